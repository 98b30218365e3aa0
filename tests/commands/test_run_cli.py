"""`disttrace run` end to end: exit codes, bad input, every way of starting ranks, never changing the job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import JOBS, disttrace_cmd, free_port, run_disttrace, torchrun_cmd
import disttrace.tracer
from disttrace.tracer.data.load import load_trace


def one_line_error(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.slow
def test_exit_code_is_the_jobs(tmp_path):
    proc = run_disttrace("run", "--out", tmp_path / "t", sys.executable, "-c", "import sys; sys.exit(7)")
    assert proc.returncode == 7
    assert "no rank was traced" in proc.stderr


def test_ctrl_c_while_the_trace_is_stored_skips_storing_and_keeps_the_jobs_exit_code(tmp_path, monkeypatch, capsys):
    """The job is over when its trace is stored and analysed: a Ctrl-C then (a user who would rather not wait) skips
    that work, which the first view does instead, and says so; it does not end the run with 130 and a traceback."""
    from disttrace.tracer.commands import run
    from disttrace.tracer.data import load

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(load, "load_trace", interrupted)
    (tmp_path / "rank-00000-h-1.jsonl").write_bytes(b"{}\n")
    run._write_store(str(tmp_path), [str(tmp_path / "rank-00000-h-1.jsonl")], always=True)
    assert capsys.readouterr().err == "disttrace: storing skipped; the first view or report will do it\n"


@pytest.mark.slow
def test_signal_death_maps_to_128_plus_signal(tmp_path):
    proc = run_disttrace("run", "--out", tmp_path / "t", "--", sys.executable, "-c",
                         "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert proc.returncode == 128 + 9


@pytest.mark.parametrize("args, says", [
    (["run", "--bogus", "x"], "unrecognized arguments"),
    (["run"], "no command to run"),
    (["run", "--summaries", "loud", "python"], "invalid choice"),
    (["events", "/nonexistent/trace"], "no such file or directory"),
    (["frobnicate"], "invalid choice"),
])
@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(args, says):
    assert says in one_line_error(run_disttrace(*args))


@pytest.mark.parametrize("args, starts", [
    (["run"], "disttrace run: error: no command to run"),
    (["run", "--"], "disttrace run: error: no command to run"),
    (["run", "--hang-timeout", "-5", "--", "true"], "disttrace run: error: --hang-timeout must be"),
    (["run", "--bogus", "--", "true"], "disttrace run: error: unrecognized arguments: --bogus"),
    (["report", "/nonexistent", "--bogus"], "disttrace report: error: unrecognized arguments: --bogus"),
    (["view", "--bogus", "x"], "disttrace view: error: unrecognized arguments: --bogus"),
])
@pytest.mark.slow
def test_the_error_names_the_subcommand_that_says_it(args, starts):
    # the program name is the subcommand's, never the job's command line as a Python list ("disttrace ['--']")
    assert one_line_error(run_disttrace(*args)).startswith(starts)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["events", "report"])
def test_a_reader_that_closes_the_pipe_is_not_a_finding(command, tmp_path):
    # `disttrace report T | head -1`: the reader went away; the command ends as one killed by SIGPIPE would (141,
    # what the shell shows for `yes | head -1`), silently, not with 1 ("problems found") or a traceback
    trace = Path(__file__).parents[1] / "tui" / "data" / "tui_job.jsonl"  # no problem in it: report alone exits 0
    line = " ".join(disttrace_cmd(command, trace))
    proc = subprocess.run(f"{line} | true; exit ${{PIPESTATUS[0]}}", shell=True, executable="/bin/bash",
                          capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (141, "")


@pytest.mark.slow
def test_a_traced_job_s_traceback_is_the_one_it_prints_untraced(tmp_path):
    # rank 0's recv times out inside gloo: the error passes through the tracer's Work.wait wrapper on its way to
    # the user's line, and must not show it
    proc = run_disttrace("run", "--out", tmp_path / "t", "--", *torchrun_cmd("wait_timeout.py", 2), timeout=120)
    assert proc.returncode != 0
    tb = proc.stderr[proc.stderr.index("Traceback (most recent call last)"):]
    assert f'{JOBS / "wait_timeout.py"}", line 19, in main' in tb, tb
    # no frame of the tracer's own files (the job's own path may hold "disttrace": a clone named so)
    ours = str(Path(disttrace.tracer.__file__).resolve().parent)
    frames = re.findall(r'File "([^"]+)"', tb.split("ChildFailedError")[0])
    assert frames and not [f for f in frames if f.startswith(ours) or "_bootstrap" in f], tb
    assert "tracer/record" not in tb, tb


@pytest.mark.slow
def test_an_error_inside_init_process_group_shows_no_tracer_frame(tmp_path):
    # the rendezvous fails (env:// without MASTER_ADDR) inside the tracer's init_process_group wrapper
    code = ("import os\nos.environ.pop('MASTER_ADDR', None)\nimport torch.distributed as dist\n"
            "dist.init_process_group('gloo', rank=0, world_size=1)\n")
    proc = run_disttrace("run", "--out", tmp_path / "t", "--", sys.executable, "-c", code, timeout=120)
    assert proc.returncode != 0
    tb = proc.stderr[proc.stderr.index("Traceback (most recent call last)"):]
    assert 'File "<string>", line 4, in <module>' in tb and "MASTER_ADDR" in tb, tb
    assert "tracer/record" not in tb and "hooks.py" not in tb, tb


@pytest.mark.slow
def test_unwritable_out_fails_before_the_job_starts(tmp_path):
    # a path below a regular file cannot be created, even by root
    (tmp_path / "file").write_text("x")
    marker = tmp_path / "ran"
    proc = run_disttrace("run", "--out", tmp_path / "file" / "sub", sys.executable, "-c",
                         f"open({str(marker)!r}, 'w')")
    assert "cannot create trace directory" in one_line_error(proc)
    assert not marker.exists()


@pytest.mark.slow
def test_reader_rejects_what_is_not_a_trace(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "not a disttrace trace" in one_line_error(run_disttrace("events", tmp_path / "empty"))
    (tmp_path / "junk.jsonl").write_bytes(b"\x00\xffnot json\n{\"a\": 1}\n")
    assert "no disttrace events" in one_line_error(run_disttrace("events", tmp_path / "junk.jsonl"))
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "rank-00000-h-1.jsonl").write_bytes(b'{"k":"meta","v":99,"rank":0}\n')
    assert "newer disttrace" in one_line_error(run_disttrace("events", newer))


@pytest.mark.slow
def test_torn_and_zero_padded_rank_file_is_read_with_a_warning(traced, tmp_path):
    src = traced("rec_nodes.py", nproc=2, summaries="off")
    dst = tmp_path / "torn"
    dst.mkdir()
    for f in src.glob("rank-*.jsonl"):
        data = f.read_bytes()
        if "rank-00001" in f.name:
            cut = data.rindex(b'{"k":"e"') + 12  # died while writing its last end record
            data = data[:cut] + b"\0" * 4096     # and the preallocated tail is still zero
        (dst / f.name).write_bytes(data)
    proc = run_disttrace("events", dst)
    assert proc.returncode == 0, proc.stderr
    assert "last record torn" in proc.stderr and "Traceback" not in proc.stderr
    full = load_trace([str(src)])
    torn = load_trace([str(dst)])
    assert len(torn) == len(full)  # the torn line was an end record: the op is there, unfinished
    assert sum(s == "unfinished" for s in torn.status) == 1


@pytest.mark.slow
def test_tracing_never_changes_the_numbers(traced, tmp_path):
    plain = tmp_path / "plain.pt"
    subprocess.run(torchrun_cmd("rec_train.py", 2, [plain]), check=True, capture_output=True, timeout=180)
    traced_w = tmp_path / "traced.pt"
    traced("rec_train.py", nproc=2, args=(traced_w,), summaries="full")
    a, b = torch.load(plain), torch.load(traced_w)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k  # bit-identical
    # and its resources: destroy_process_group ends as many of gloo's threads traced as untraced (a tracer that
    # held the groups kept them to the interpreter's exit, where gloo can abort the process), and a tensor the job
    # lets go of is freed (a tracer that held an async op's Work held its tensors)
    for rank in (0, 1):
        ends, freed = [], []
        for weights in (plain, traced_w):
            seen = json.loads(Path(f"{weights}.threads{rank}").read_text())
            counts = seen["threads"]
            ends.append([counts[0] - counts[1], counts[1] - counts[2]])  # at the subgroup's destroy, the world's
            freed.append(seen["tensor_freed"])
        assert ends[0] == ends[1] and ends[0][0] > 0, ends  # (untraced, the world's may end none: DDP's)
        assert freed == [True, True], freed


@pytest.mark.slow
def test_internal_failure_disables_tracing_with_one_warning_and_the_job_goes_on(tmp_path):
    out = tmp_path / "t"
    cmd = ["run", "--out", out, "--", *torchrun_cmd("rec_train.py", 2, [tmp_path / "w.pt"])]
    proc = run_disttrace(*cmd, env={"DISTTRACE_TEST_FAULT_AT": "3"}, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "w.pt").exists()
    warnings = [l for l in proc.stderr.splitlines() if "tracing disabled" in l]
    assert len(warnings) == 1, proc.stderr  # both ranks failed: the user is told once
    assert "injected fault" in warnings[0] and "Traceback" not in proc.stderr
    table = load_trace([str(out)])
    assert {table.id[i] for i in range(len(table))} == {0, 1, 2}  # what came before the fault is kept


@pytest.mark.slow
def test_spawned_ranks_are_traced(tmp_path):
    out = tmp_path / "t"
    proc = run_disttrace("run", "--out", out, sys.executable, JOBS / "rec_spawn.py", str(free_port()), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = load_trace([str(out)])
    assert sorted(table.ranks) == [0, 1]
    assert sorted((table.rank[i], table.op[i]) for i in range(len(table))) == [
        (0, "all_reduce"), (0, "barrier"), (1, "all_reduce"), (1, "barrier")]
    assert "disttrace view" in proc.stderr


@pytest.mark.slow
def test_two_nodes_each_with_its_own_dir_merge(tmp_path, monkeypatch):
    """Two nodes, each traced into its own dir by its own `disttrace run`, which stores it (--store: the job is
    small) when its job ends: the dirs opened together are one trace, merged from the two stores (no rank file
    parsed again) into the table a read of both makes."""
    from disttrace.tracer.data.importers import rank_files as reader

    from test_store import assert_same, opened_from_store
    port = free_port()
    procs = []
    for node in (0, 1):
        cmd = disttrace_cmd("run", "--store", "--out", tmp_path / f"node{node}", "--",
                            *torchrun_cmd("rec_nodes.py", 1, nnodes=2, node_rank=node, port=port))
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-2000:]
    assert len(list((tmp_path / "node0").glob("rank-*.jsonl"))) == 1
    with monkeypatch.context() as m:
        m.setattr(reader, "read_rank_files", lambda *a, **k: pytest.fail("a rank file parsed: the stores not merged"))
        table = load_trace([str(tmp_path / "node0"), str(tmp_path / "node1")])
    assert opened_from_store(table)
    assert_same(load_trace([str(tmp_path / "node0"), str(tmp_path / "node1")], cache=False), table)
    assert sorted(table.ranks) == [0, 1]
    ops = [(table.rank[i], table.op[i]) for i in range(len(table))]
    assert sorted(ops) == sorted([(0, "all_reduce"), (1, "all_reduce"), (0, "barrier"), (1, "barrier"),
                                  (0, "send"), (1, "recv")])
    # the two nodes' times on one clock: rank 1 reached the barrier 0.3 s after its all-reduce, and rank 0 left it
    # after that, give or take the clocks' alignment (orders, not durations: the parallel part runs starved beside
    # the quiet tests, and a starved rank 0 reaches the barrier late too)
    at = {(table.rank[i], table.op[i]): i for i in range(len(table))}
    late = table.start_ns[at[1, "barrier"]]
    assert late - table.end_ns[at[1, "all_reduce"]] >= 0.3e9
    assert table.end_ns[at[0, "barrier"]] >= late - 10e6
    # the merged JSON Lines are sorted by start time
    proc = run_disttrace("events", tmp_path / "node0", tmp_path / "node1")
    starts = [__import__("orjson").loads(l)["start_ns"] for l in proc.stdout.splitlines()]
    assert starts == sorted(starts) and len(starts) == 6


@pytest.mark.slow
def test_the_users_own_sitecustomize_still_runs(tmp_path):
    """disttrace's bootstrap shadows sitecustomize on PYTHONPATH; it must load the one it shadows."""
    mine = tmp_path / "site"
    mine.mkdir()
    marker = tmp_path / "ran"
    (mine / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('yes')\n")
    proc = run_disttrace("run", "--out", tmp_path / "t", sys.executable, "-c", "pass",
                         env={"PYTHONPATH": str(mine)})
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "yes"
