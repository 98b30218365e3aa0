"""A trace keeps every run: torchrun restarts, successive process groups in one script, a loop of spawned jobs.

Each case of tests/jobs/runs_cases.py runs once under `disttrace run`; the runs the trace holds, their ranks and
their numbers of ops are checked against what the job did (runs_cases.OPS), through `disttrace runs`, `events` and
`report`. The grouping rules themselves are checked on made-up rank files below."""

from __future__ import annotations

import json
from collections import Counter

import orjson
import pytest

from harness import free_port, job, run_disttrace, torchrun_cmd
from disttrace.tracer.data.importers import runs as runs_mod

CASES = job("runs_cases")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    made = {}
    for case, cmd in (
            ("restart", [*torchrun_cmd("runs_cases.py", 2, ["restart"])[:3], "--max-restarts=1",
                         *torchrun_cmd("runs_cases.py", 2, ["restart"])[3:]]),
            ("cycles", torchrun_cmd("runs_cases.py", 2, ["cycles"])),
            ("spawnloop", [torchrun_cmd("runs_cases.py")[0], str(CASES.__file__), "spawnloop"])):
        proc = run_disttrace("run", "--out", tmp / case, "--", *cmd, timeout=240, env={"RUNS_PORT": str(free_port())})
        assert proc.returncode == 0, (case, proc.stderr[-3000:])
        made[case] = tmp / case, proc
    return made


def runs_of(trace) -> list[dict]:
    proc = run_disttrace("runs", "--json", trace)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def ops_per_rank(trace, run) -> Counter:
    proc = run_disttrace("events", "--run", str(run), trace)
    assert proc.returncode == 0, proc.stderr
    events = [orjson.loads(line) for line in proc.stdout.splitlines()]
    assert {e["run"] for e in events} == {run} and {e["v"] for e in events} == {3}
    return Counter(e["rank"] for e in events if e["op"] == "all_reduce")


@pytest.mark.slow
@pytest.mark.parametrize("case", ["restart", "cycles", "spawnloop"])
def test_every_run_is_kept_with_its_ops(traces, case):
    trace, proc = traces[case]
    runs = runs_of(trace)
    expected = CASES.OPS[case]
    assert [r["run"] for r in runs] == list(range(1, len(expected) + 1)), runs
    for run, n in zip(runs, expected):
        assert run["ranks"] == [0, 1] and run["world_size"] == 2
        ops = ops_per_rank(trace, run["run"])
        if case == "restart" and run["attempt"] == 0:
            # the failed attempt: rank 1 died after its 3; rank 0's 4th raised (its peer had gone)
            assert ops == {0: n + 1, 1: n} and not run["ok"] and 1 in run["died"], run
        else:
            assert ops == {0: n, 1: n} and run["ok"], (run, ops)
    if case == "restart":
        assert [r["attempt"] for r in runs] == [0, 1]
    # nothing recorded is dropped: every begin record of every rank file is in some run
    begins = sum(f.read_bytes().count(b'"k":"b"') for f in trace.glob("rank-*.jsonl"))
    assert sum(r["ops"] for r in runs) == begins
    # `disttrace run` says what it left
    assert f"{len(expected)} runs" in proc.stderr and "disttrace runs" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_the_default_is_the_last_run_with_a_note_and_any_run_can_be_read(traces):
    trace, _ = traces["cycles"]
    default = run_disttrace("report", "--json", trace)
    assert default.returncode == 0, default.stderr
    report = json.loads(default.stdout)
    assert report["summary"]["events"] == 2 * CASES.OPS["cycles"][-1]
    assert any("holds 2 runs" in w and "--run N" in w for w in report["summary"]["warnings"]), report["summary"]
    first = json.loads(run_disttrace("report", "--json", "--run", "1", trace).stdout)
    assert first["summary"]["events"] == 2 * CASES.OPS["cycles"][0]
    assert not any("holds 2 runs" in w for w in first["summary"]["warnings"])
    every = run_disttrace("events", "--run", "all", trace).stdout.splitlines()
    assert Counter(orjson.loads(line)["run"] for line in every) == {1: 4, 2: 8}
    missing = run_disttrace("report", "--run", "3", trace)
    assert missing.returncode == 2 and "no run 3 in this trace: it holds runs 1, 2" in missing.stderr


# -- the grouping rules, on made-up rank files -------------------------------------------------------------
def rank_file(rank, wall_s, path="", **meta) -> runs_mod.RankFile:
    meta = {"k": "meta", "rank": rank, "world_size": 2, "wall_ns": int(wall_s * 1e9), "mono_ns": 0, **meta}
    return runs_mod.RankFile(path or f"r{rank}-{wall_s}", meta,
                             runs_mod.Ending(ops=1, left=True, torn=False, end_wall_ns=int((wall_s + 1) * 1e9)))


def test_the_ranks_of_one_world_on_several_nodes_are_one_run():
    files = [rank_file(0, 10.0, run_id="x", master="n0:29500"), rank_file(1, 10.4, run_id="x", master="n0:29500")]
    (run,) = runs_mod.group(files)
    assert run.ranks == [0, 1] and run.ok


def test_a_rank_met_again_starts_the_next_run_and_old_traces_are_split_by_it():
    # traces from before the world's identity was recorded: the same key, told apart by time and repeated ranks
    files = [rank_file(r, t) for t in (1.0, 5.0, 9.0) for r in (1, 0)]
    runs = runs_mod.group(files)
    assert [(run.number, run.ranks, run.start_wall_ns) for run in runs] == [
        (1, [0, 1], 1e9), (2, [0, 1], 5e9), (3, [0, 1], 9e9)]


def test_concurrent_jobs_with_their_own_stores_are_not_mixed():
    a = [rank_file(r, 1.0 + r * 0.2, master="h:1000", path=f"a{r}") for r in (0, 1)]
    b = [rank_file(r, 1.1 + r * 0.2, master="h:2000", path=f"b{r}") for r in (0, 1)]
    runs = runs_mod.group(a + b)
    assert [[f.path for f in run.files] for run in runs] == [["a0", "a1"], ["b0", "b1"]]


def test_a_rank_that_did_not_leave_or_is_missing_is_said():
    files = [rank_file(0, 1.0), runs_mod.RankFile("r1", rank_file(1, 1.0).meta, runs_mod.Ending(1, False, True, 0))]
    (run,) = runs_mod.group(files)
    assert run.died == [1] and run.outcome() == "rank 1 died"
    (alone,) = runs_mod.group([rank_file(0, 1.0)])
    assert alone.missing == [1] and alone.outcome() == "rank 1 not in the trace"


def test_a_rank_of_an_old_trace_that_left_alive_is_not_said_to_have_died(tmp_path):
    # before the "left" record, a rank's one clock "end" measurement (at destroy_process_group) said so; the
    # reader has always read it that way (format.says_left), and `disttrace runs` must agree with it
    lines = [{"k": "meta", "v": 2, "rank": r, "world_size": 2, "wall_ns": 10, "mono_ns": 0} for r in (0, 1)]
    for r, meta in enumerate(lines):
        records = [meta, {"k": "clock", "phase": "start", "offset_ns": 0, "mono_ns": 5}]
        if r == 0:
            records.append({"k": "clock", "phase": "end", "offset_ns": 0, "mono_ns": 9})
        (tmp_path / f"rank-{r:05d}-h-{r}.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in records))
    (run,) = runs_mod.find_runs(sorted(str(p) for p in tmp_path.iterdir()))[0]
    assert run.died == [1]


def test_runs_here_is_a_live_process_of_this_host_that_began_before_its_meta_record():
    """Whether a rank file's process runs now (a trace read while its job runs is cut at each read, never stored):
    this process, yes; no process, another host's, or a process that began after the meta record (its pid given to
    another), no."""
    import os
    import socket
    import time

    me = {"host": socket.gethostname(), "pid": os.getpid(), "mono_ns": time.monotonic_ns()}
    assert runs_mod.runs_here(me)
    assert not runs_mod.runs_here({**me, "host": me["host"] + "-elsewhere"})
    assert not runs_mod.runs_here({**me, "mono_ns": 1})  # this pid's process began long after that record
    with open("/proc/sys/kernel/pid_max") as f:  # (a pid above it is no process's)
        assert not runs_mod.runs_here({**me, "pid": int(f.read()) + 1})
    assert not runs_mod.runs_here({"host": me["host"], "pid": 0})


def test_a_rank_that_runs_on_is_running_not_dead(tmp_path):
    """`disttrace runs` of a job that still runs: its ranks of this host that have not left are running, not dead
    (their files stop where the job is, as a dead rank's would)."""
    import os
    import socket
    import time

    me = {"k": "meta", "rank": 0, "world_size": 2, "host": socket.gethostname(), "pid": os.getpid(),
          "mono_ns": time.monotonic_ns(), "wall_ns": time.time_ns()}
    gone = {**me, "rank": 1, "pid": 0}
    files = []
    for meta in (me, gone):
        f = tmp_path / f"rank-{meta['rank']:05d}-x-{meta['pid']}.jsonl"
        f.write_bytes(orjson.dumps(meta) + b"\n")
        files.append(runs_mod.scan(str(f)))
    (run,) = runs_mod.group(files)
    assert (run.running, run.died) == ([0], [1]) and run.outcome() == "rank 0 running; rank 1 died"
    assert run.to_json()["running"] == [0]
