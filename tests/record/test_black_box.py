"""The black box on real torchrun jobs (gloo): `disttrace run --black-box --ring 200` on tests/jobs/bb_train.py, a
training loop that issues about ten times the ring in ops. Bounded memory and disk, aggregates equal to the ops the
job issued, snapshots of every rank within 5 s on a hang (taken while a rank is blocked in C++), an exception,
`disttrace snapshot` and SIGUSR1, and the job's results the same as untraced."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from harness import (aborted_at_exit, all_reduces_by_bucket, disttrace_cmd, run_disttrace, run_traced,
                     torchrun_cmd)
from disttrace.tracer.data.importers.ring import read_ring
from disttrace.tracer.format import (AGG_ALLOWANCE, AGG_DATA_AT, AGG_DAY_BUDGET, AGG_ROW, AGG_WINDOW_KEY, AGGKEY,
                                     EXCEPTION, RING_HEADER, SNAPSHOT_INFO, STACKS)
from disttrace.tracer.record.ring import ring_size

pytestmark = pytest.mark.slow

BB = ("--black-box", "--ring", "200")
STEPS = 300  # x 7 ops a step: ten times the ring
OPS_PER_STEP = 7


def _records(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().rstrip(b"\0").splitlines() if line]


def _ring_records(path: Path) -> list[dict]:
    out = []
    for line in read_ring(path):
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            pass  # a line torn at the ring's edge
    return out


def _stems(d: Path) -> list[str]:
    return sorted(p.name[: -len(".ring")] for p in d.glob("rank-*.ring"))


def _snapshots(out: Path, reason: str) -> list[Path]:
    return sorted((out / "snapshots").glob(f"*-{reason}"))


def _wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {timeout} s")


def _complete(snap: Path, n: int = 2) -> bool:
    return snap.is_dir() and len(list(snap.glob("rank-*.ring"))) == n and len(list(snap.glob("rank-*.jsonl"))) == n


def _begun_not_ended(records: list[dict]) -> list[dict]:
    ended = {r["i"] for r in records if r.get("k") == "e"}
    return [r for r in records if r.get("k") == "b" and r["i"] not in ended]


def _start(out: Path, args, run_args=()) -> subprocess.Popen:
    """The traced job in the background; its output in files beside the trace dir (read by _finish)."""
    cmd = disttrace_cmd("run", "--out", out, *BB, *run_args, "--", *torchrun_cmd("bb_train.py", 2, args))
    logs = [open(out.parent / name, "w") for name in ("stdout", "stderr")]
    return subprocess.Popen(cmd, stdout=logs[0], stderr=logs[1], text=True)


def _finish(proc: subprocess.Popen, out: Path) -> subprocess.CompletedProcess:
    proc.wait(timeout=180)
    return subprocess.CompletedProcess(proc.args, proc.returncode, (out.parent / "stdout").read_text(),
                                       (out.parent / "stderr").read_text())


def _meta_pid(out: Path, rank: int) -> int:
    f = next(out.glob(f"rank-{rank:05d}-*.jsonl"))
    return _records(f)[0]["pid"]


# -- a clean run: bounded, and the aggregates count every op ----------------------------------------------------
@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bb_clean")
    out, truth = tmp / "trace", tmp / "truth"
    proc = run_traced("bb_train.py", out, 2, ["--steps", STEPS, "--truth", truth], summaries="off", run_args=BB)
    assert proc.returncode == 0 or aborted_at_exit(proc), proc.stderr[-3000:]
    return out, {r: json.loads(Path(f"{truth}.{r}").read_text()) for r in range(2)}


def test_the_ring_is_of_fixed_size_and_holds_the_last_ops(clean):
    out, _truth = clean
    for stem in _stems(out):
        ring = out / f"{stem}.ring"
        assert ring.stat().st_size == ring_size(200)  # 128 KiB, whatever the job's length
        _, pos, wraps, size = struct.unpack_from(RING_HEADER, ring.read_bytes())
        assert wraps >= 3 and size == ring_size(200)  # ten times N ops went through it (2,100 x ~285 bytes)
        records = _ring_records(ring)
        begins = [r for r in records if r["k"] == "b"]
        assert len(begins) >= 200  # at least the last N ops
        assert records[-1] == {**records[-1], "k": "step", "n": STEPS}  # the newest last
        # the rank file keeps only the few records: no op record, no step marker
        head = _records(out / f"{stem}.jsonl")
        assert {r["k"] for r in head} <= {"meta", "group", "clock", "left", "aggkey"}
        assert head[0]["black_box"] == {"ring_bytes": ring_size(200), "ring_ops": 200, "keep_snapshots": 8,
                                        "window": {"by": "steps", "every": 10, "seconds": 10}}
        assert (out / f"{stem}.jsonl").stat().st_size < 8 << 10


def test_memory_grows_by_no_more_than_the_ring(clean):
    _out, truth = clean
    for rank, t in truth.items():
        grew = t["rss"]["at_end"] - t["rss"]["at_50"]  # over 250 steps: 1,750 ops, 8.75 times the ring
        assert grew <= ring_size(200) + (4 << 20), (rank, grew)


def _agg(path: Path) -> list[tuple]:
    data = path.read_bytes()
    return [struct.unpack_from(AGG_ROW, data, at) for at in range(AGG_DATA_AT, len(data), 48)]


def test_the_aggregates_count_every_op_the_job_issued(clean):
    out, truth = clean
    for stem in _stems(out):
        rank = int(stem.split("-")[1])
        keys = {r["id"]: r for r in _records(out / f"{stem}.jsonl") if r["k"] == AGGKEY}
        rows = _agg(out / f"{stem}.agg")
        counted: dict[tuple, int] = {}
        for window, key, flags, count, _pad, total, mx, nbytes, end in rows:
            if key == AGG_WINDOW_KEY:
                assert flags == 0  # nothing lost: the aggregator kept up with the ring
                continue
            k = keys[key]
            assert k["lo"] <= nbytes // count < k["hi"] and 0 <= mx <= total
            counted[(k["op"], k["lo"])] = counted.get((k["op"], k["lo"]), 0) + count
        assert counted == all_reduces_by_bucket(truth[rank]["allreduce"])
        # windows of 10 steps (widened where the job's steps are short, once the file holds the recorder's allowance:
        # record/aggregates.py; this run is shorter), each ending at a multiple of 10 steps (of its width, nested),
        # none narrower than the one before, the last at the job's last step; its own row says which steps; the
        # file is (keys + 1) rows a window
        wins = [r for r in rows if r[1] == AGG_WINDOW_KEY]
        firsts, lasts = [w[7] for w in wins], [w[6] for w in wins]
        assert firsts[0] == 1 and lasts[-1] == STEPS and all(f == n + 1 for n, f in zip(lasts, firsts[1:]))
        widths = [n - f + 1 for f, n in zip(firsts, lasts)]
        assert widths[0] == 10 and all(n % 10 == 0 for n in lasts) and widths[:-1] == sorted(widths[:-1]), widths
        assert all(w[3] == n * OPS_PER_STEP for w, n in zip(wins, widths))
        assert all(a[8] == b[5] for a, b in zip(wins, wins[1:]))  # each window starts where the last ended
        per_window = len(set(keys)) + 1
        assert (out / f"{stem}.agg").stat().st_size == AGG_DATA_AT + 48 * per_window * len(wins)
        steady = wins[-2]  # the last whole window's pace, over a day: within the budget once past the allowance
        assert (out / f"{stem}.agg").stat().st_size < AGG_ALLOWANCE + AGG_DATA_AT + 48 * per_window or \
            48 * per_window * 86_400e9 / (steady[8] - steady[5]) <= AGG_DAY_BUDGET, (widths, steady)


# -- a hang after the ring wrapped -----------------------------------------------------------------------------
def test_a_hang_after_the_ring_wrapped_snapshots_every_rank_even_one_blocked_in_cpp(tmp_path):
    out = tmp_path / "trace"
    go = tmp_path / "go-on"  # (written once both snapshots are in: the hang ends then, not 60 s later)
    proc = _start(out, ["--steps", STEPS, "--fault", "hang", "--at", 250, "--hang-s", 60, "--go-on", go],
                  run_args=("--hang-timeout", "2"))
    try:
        snap = _wait_for(lambda: next((s for s in _snapshots(out, "hang") if _complete(s)), None), 180,
                         "hang snapshot of both ranks")
        info = orjson.loads((snap / SNAPSHOT_INFO).read_bytes())
        assert info["reason"] == "hang" and info["by_rank"] == 0  # rank 0 waits in the all-reduce
        for f in snap.glob("rank-*"):  # every rank's copy within 5 s of the trigger
            assert f.stat().st_mtime_ns - info["wall_ns"] < 5e9, f.name
        # SIGUSR1 to rank 0 while its main thread is blocked in gloo's all-reduce (C++): it never runs a Python
        # handler there, and still its snapshot, and every rank's, comes
        sent = time.time_ns()
        os.kill(_meta_pid(out, 0), signal.SIGUSR1)
        sig = _wait_for(lambda: next((s for s in _snapshots(out, "signal") if _complete(s)), None), 5,
                        "signal snapshot")
        assert all(f.stat().st_mtime_ns - sent < 5e9 for f in sig.glob("rank-*"))
        go.touch()
        done = _finish(proc, out)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert done.returncode == 0 or aborted_at_exit(done), done.stderr[-3000:]
    for s in (snap, sig):
        r0 = next(s.glob("rank-00000-*.ring"))
        _, _pos, wraps, _ = struct.unpack_from(RING_HEADER, r0.read_bytes())
        assert wraps >= 3  # after the ring wrapped
        stuck = _begun_not_ended(_ring_records(r0))
        assert [r["op"] for r in stuck] == ["all_reduce"]  # the stuck op, taken while rank 0 was in it
    head0 = _records(next(snap.glob("rank-00000-*.jsonl")))
    head1 = _records(next(snap.glob("rank-00001-*.jsonl")))
    assert [r["reason"] for r in head0 if r["k"] == STACKS] == ["in_flight"]
    late = [r for r in head1 if r["k"] == STACKS]
    assert late and late[0]["reason"] == "peer"
    frames = [f for th in late[0]["threads"] for f in th["frames"]]
    assert any(f[0].endswith("bb_train.py") and f[2] == "load_batch" for f in frames)  # where rank 1 is
    # the SIGUSR1 snapshot, taken of the hung job as it ran on, seconds into the hang: named a hang all the same
    # (its window ends at the earliest rank's copy; the all-reduce had been waited in for longer than an op takes)
    for s in (snap, sig):
        (hang,) = _report_problems(s)
        assert (hang["kind"], hang["op"], hang["ranks"]) == ("hang", "all_reduce", [1]), hang


def _report_problems(trace: Path) -> list[dict]:
    """`disttrace report --json`'s problems of a trace dir (a snapshot)."""
    return _report(trace)["problems"]


def _report(trace: Path) -> dict:
    """`disttrace report --json` of a trace dir."""
    proc = run_disttrace("report", "--json", trace, timeout=120)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stdout)


# -- an exception at step k ----------------------------------------------------------------------------------
def test_a_rank_that_raises_keeps_its_last_ops_and_the_exception_and_the_others_snapshot_too(tmp_path):
    out = tmp_path / "trace"
    proc = run_traced("bb_train.py", out, 2, ["--steps", STEPS, "--fault", "raise", "--at", 250],
                      summaries="off", run_args=BB)
    assert proc.returncode != 0
    first = _snapshots(out, "exception")[0]
    info = orjson.loads((first / SNAPSHOT_INFO).read_bytes())
    assert info["by_rank"] == 1 and _complete(first)
    for f in first.glob("rank-*"):
        assert f.stat().st_mtime_ns - info["wall_ns"] < 5e9, f.name
    exc = [r for r in _records(next(first.glob("rank-00001-*.jsonl"))) if r["k"] == EXCEPTION]
    assert len(exc) == 1 and exc[0]["type"] == "RuntimeError" and exc[0]["msg"] == "corrupt batch at step 250"
    assert exc[0]["tb"][-1][0].endswith("bb_train.py") and exc[0]["tb"][-1][2] == "load_batch"
    records = _ring_records(next(first.glob("rank-00001-*.ring")))
    assert records[-1]["k"] == "step" and records[-1]["n"] == 250  # its last step, then its last ops before it
    assert [r["op"] for r in records if r["k"] == "b"][-OPS_PER_STEP:] == ["all_reduce"] * OPS_PER_STEP
    assert len([r for r in records if r["k"] == "b"]) >= 200


def test_a_sigkilled_ranks_ring_joins_the_snapshot_taken_when_the_job_failed(tmp_path):
    out = tmp_path / "trace"
    proc = run_traced("bb_train.py", out, 2, ["--steps", STEPS, "--fault", "kill", "--at", 250], summaries="off",
                      run_args=BB)
    assert proc.returncode != 0
    snaps = sorted((out / "snapshots").iterdir())
    assert snaps, proc.stderr[-2000:]
    last = snaps[-1]  # rank 0's (its gloo error once rank 1 was gone), or the launcher's own at the job's end
    assert _complete(last), sorted(p.name for p in last.iterdir())
    records = _ring_records(next(last.glob("rank-00001-*.ring")))  # the dead rank's ring, from the disk
    assert [r["n"] for r in records if r["k"] == "step"][-1] == 250
    assert len([r for r in records if r["k"] == "b"]) >= 200


# -- asked while it runs: disttrace snapshot, SIGUSR1 ------------------------------------------------------------
def test_snapshot_command_and_sigusr1_on_a_running_job_leave_its_results_as_untraced(tmp_path):
    go = tmp_path / "go-on"  # (written once the snapshots are in: the slow steps end then, not 60 s later)
    args = ["--steps", 300, "--fault", "pause", "--at", 100, "--pause-s", 60, "--go-on", go,
            "--ready", tmp_path / "ready"]
    out = tmp_path / "trace"
    proc = _start(out, args)
    try:
        _wait_for(lambda: (tmp_path / "ready").exists(), 180, "the job at step 100")
        asked = run_disttrace("snapshot", out, timeout=30)
        assert asked.returncode == 0, asked.stderr
        req = _snapshots(out, "request")
        assert len(req) == 1 and _complete(req[0]) and "snapshot of 2 ranks" in asked.stdout
        # the trace dir itself, reported while the job runs: each rank's ring read at its own moment, no death, no
        # hang; never from a store (a ring's map keeps its size, and its mtime for seconds): a later report is later
        first, second = _report(out), (time.sleep(1.0), _report(out))[1]
        for r in (first, second):
            assert r["problems"] == [] and "the job was running" in " ".join(r["summary"]["notes"]), r["problems"]
        assert second["steps"][-1]["index"] > first["steps"][-1]["index"] and not (out / ".disttrace-cache").exists()
        sig = _signal_snapshot(out, 1)  # any rank
        go.touch()
        done = _finish(proc, out)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert done.returncode == 0 or aborted_at_exit(done), done.stderr[-3000:]
    for snap in (req[0], sig):
        for f in snap.iterdir():
            assert f.stat().st_mode & 0o777 == 0o600
        # a healthy job, asked while it ran: each rank's ring copied at another moment, in the midst of its ops; what
        # one rank did after another's copy, or was doing at it, is no death and no hang
        assert _report_problems(snap) == []
    # the same job untraced (its go-on file there already: sleeping is all the pause does)
    plain = subprocess.run(torchrun_cmd("bb_train.py", 2, args[:-2]), capture_output=True, text=True, timeout=180)
    # (the ranks print at once: their lines may run together)
    checksums = lambda text: sorted(re.findall(r"rank (\d+) checksum (-?\d+\.\d{12})", text))  # noqa: E731
    assert checksums(done.stdout) == checksums(plain.stdout) and len(checksums(done.stdout)) == 2


def _signal_snapshot(out: Path, rank: int) -> Path:
    """SIGUSR1 to `rank`: its snapshot of every rank, whole within 5 s, said to be that rank's."""
    os.kill(_meta_pid(out, rank), signal.SIGUSR1)
    sig = _wait_for(lambda: next((s for s in _snapshots(out, "signal") if _complete(s)), None), 5, "signal snapshot")
    assert orjson.loads((sig / SNAPSHOT_INFO).read_bytes())["by_rank"] == rank
    return sig


def test_sigusr1_reaches_a_job_that_trains_in_a_thread_of_its_own(tmp_path):
    """init_process_group called from a thread that is not the main one (where a signal handler cannot be set):
    the handler set when the job imported torch.distributed on its main thread still takes SIGUSR1's snapshot."""
    go = tmp_path / "go-on"
    args = ["--steps", 300, "--fault", "pause", "--at", 100, "--pause-s", 60, "--go-on", go,
            "--ready", tmp_path / "ready", "--thread"]
    out = tmp_path / "trace"
    proc = _start(out, args)
    try:
        _wait_for(lambda: (tmp_path / "ready").exists(), 180, "the job at step 100")
        _signal_snapshot(out, 0)
        go.touch()
        done = _finish(proc, out)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert done.returncode == 0 or aborted_at_exit(done), done.stderr[-3000:]
    assert "rank 0 checksum" in done.stdout


def test_the_python_api_records_a_black_box_too(tmp_path):
    out = tmp_path / "trace"
    proc = subprocess.run(torchrun_cmd("bb_train.py", 2, ["--steps", 100, "--trace", out]), capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0 or aborted_at_exit(proc), proc.stderr[-3000:]
    stems = _stems(out)
    assert len(stems) == 2
    for stem in stems:
        assert (out / f"{stem}.ring").stat().st_size == ring_size(200)
        assert _records(out / f"{stem}.jsonl")[0]["black_box"]["ring_ops"] == 200
        wins = [r for r in _agg(out / f"{stem}.agg") if r[1] == AGG_WINDOW_KEY]
        assert sum(w[3] for w in wins) == 100 * OPS_PER_STEP


def test_snapshot_of_a_job_that_is_not_running_says_so_in_one_line(clean):
    out, _ = clean
    proc = run_disttrace("snapshot", out, timeout=30)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not running" in proc.stderr
