"""User-marked training steps: disttrace.tracer.mark_step() and torch.profiler's prof.step() write "step" records;
the reader numbers each op by the markers before its begin (`step` in the normalized events, `user_step` in the
EventTable). A real 2-rank job (tests/jobs/rec_steps.py) marks 6 steps both ways; hand-written rank files pin the
reader's rules; fresh interpreters show that the marker costs nothing and imports nothing untraced."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import orjson
import pytest

from harness import run_disttrace
from disttrace.tracer.analysis import analyze
from disttrace.tracer.data.table import NONE
from disttrace.tracer.data.load import load_trace

REC_STEPS_OPS = ["all_reduce"] * 6 + ["barrier"]


def _by_rank(table) -> dict[int, list[int]]:
    rows: dict[int, list[int]] = {}
    for i in sorted(range(len(table)), key=lambda i: (table.rank[i], table.id[i])):
        rows.setdefault(table.rank[i], []).append(i)
    return rows


@pytest.mark.slow
def test_a_job_s_markers_number_its_ops_and_survive_the_events_round_trip(traced, tmp_path):
    trace = traced("rec_steps.py", summaries="off")
    for f in trace.glob("rank-*.jsonl"):
        marks = [orjson.loads(line) for line in f.read_bytes().rstrip(b"\0").splitlines() if b'"k":"step"' in line]
        # 3 + 1 mark_step() calls once tracing ran (not the one before init_process_group), 3 prof.step() calls
        assert [m["src"] for m in marks] == ["api"] * 3 + ["profiler", "api", "profiler", "profiler"], f
        assert [m["n"] for m in marks] == list(range(1, 8))
    table = load_trace(str(trace))
    rows = _by_rank(table)
    assert sorted(rows) == [0, 1]
    for rank, idx in rows.items():
        assert [table.op[i] for i in idx] == REC_STEPS_OPS, rank
        # step 4's end was marked both ways: once
        assert [table.user_step[i] for i in idx] == list(range(7)), rank

    out = run_disttrace("events", str(trace))
    assert out.returncode == 0, out.stderr
    events = tmp_path / "events.jsonl"
    events.write_text(out.stdout)
    assert all(orjson.loads(line)["step"] in range(7) for line in out.stdout.splitlines())
    again = load_trace(str(events))
    assert [again.row(i) for i in range(len(again))] == [table.row(i) for i in range(len(table))]
    assert list(again.user_step) == list(table.user_step)

    # the analysis takes the job's steps over its own detection (which would find one all_reduce a step)
    a = analyze(table)
    assert a.steps_source == "marker" and [s.index for s in a.steps] == list(range(7))
    assert list(a.step_of) == list(table.user_step)


# -- the reader's rules, on hand-written rank files ---------------------------------------------------------
def _rank_file(path, rank: int, records: list[dict]) -> None:
    head = [{"k": "meta", "v": 2, "rank": rank, "world_size": 2, "host": "h", "pid": 10 + rank},
            {"k": "group", "g": 0, "name": "0", "desc": "default_pg", "ranks": [0, 1], "backend": "gloo"}]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in head + records))


def _op(i: int, t: int) -> list[dict]:
    return [{"k": "b", "i": i, "op": "all_reduce", "api": "all_reduce", "g": 0, "gs": i, "bytes": 16, "t": t},
            {"k": "e", "i": i, "t": t + 5}]


def _step(t: int, n: int, src: str = "api") -> dict:
    return {"k": "step", "t": t, "n": n, "src": src}


def test_each_op_s_step_is_the_markers_before_it_and_one_step_end_marked_both_ways_counts_once(tmp_path):
    # rank 0: op0 | api | op1 | api, profiler (same end) | op2 | profiler, profiler (an empty step) | op3
    # rank 1 marks nothing: its ops have no step
    _rank_file(tmp_path / "rank-00000-h-10.jsonl", 0, [
        *_op(0, 100), _step(200, 1), *_op(1, 300), _step(400, 2), _step(401, 3, "profiler"), *_op(2, 500),
        _step(600, 4, "profiler"), _step(700, 5, "profiler"), *_op(3, 800)])
    _rank_file(tmp_path / "rank-00001-h-11.jsonl", 1, [r for k in range(4) for r in _op(k, 100 + 200 * k)])
    table = load_trace(str(tmp_path))
    rows = _by_rank(table)
    assert [table.user_step[i] for i in rows[0]] == [0, 1, 2, 4]
    assert [table.user_step[i] for i in rows[1]] == [NONE] * 4
    assert all("step" not in table.row(i) for i in rows[1])
    assert [table.row(i)["step"] for i in rows[0]] == [0, 1, 2, 4]
    assert not table.warnings


def test_a_malformed_step_record_is_skipped_with_a_warning(tmp_path):
    _rank_file(tmp_path / "rank-00000-h-10.jsonl", 0, [*_op(0, 100), {"k": "step", "t": "soon"}, *_op(1, 300)])
    table = load_trace(str(tmp_path))
    assert list(table.user_step) == [NONE, NONE]
    assert any("malformed" in w for w in table.warnings), table.warnings


# -- the marker in the traced process ---------------------------------------------------------------------
@pytest.mark.slow
def test_untraced_the_marker_imports_nothing_and_costs_next_to_nothing():
    code = textwrap.dedent("""
        import sys, time
        from disttrace.tracer import mark_step
        mark_step()
        t = time.perf_counter_ns()
        for _ in range(10000):
            mark_step()
        print((time.perf_counter_ns() - t) / 10000, "torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1] == "False"
    assert float(out[0]) < 5000  # ns a call: a dictionary lookup (~0.1 µs), far from anything a step costs


def test_a_failing_write_disables_tracing_and_never_reaches_the_job(monkeypatch):
    from disttrace.tracer import mark_step
    from disttrace.tracer.record import current

    importlib.import_module("disttrace.tracer.record.hooks")  # mark_step acts only where the hooks are loaded

    class Broken:
        failed = None

        def write(self, obj):
            raise OSError("disk gone")

        def fail(self, e):
            self.failed = e

    t = Broken()
    monkeypatch.setattr(current, "tracer", t)
    mark_step()
    assert isinstance(t.failed, OSError)


@pytest.mark.slow
def test_programmatic_tracing_marks_steps_and_gives_the_profiler_back(tmp_path):
    # a world of one, in a fresh interpreter: trace() wraps profile.step while it runs and unwraps it after
    code = textwrap.dedent(f"""
        import torch, torch.distributed as dist
        from disttrace.tracer import mark_step, trace
        orig = torch.profiler.profile.step
        with trace(out={str(tmp_path / "t")!r}):
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
            dist.all_reduce(torch.ones(2))
            mark_step()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                dist.all_reduce(torch.ones(2))
                prof.step()
            dist.all_reduce(torch.ones(2))
            wrapped = torch.profiler.profile.step is not orig
            dist.destroy_process_group()
        print("WRAPPED", wrapped, "RESTORED", torch.profiler.profile.step is orig)
        mark_step()  # after the block: nothing, no error
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "WRAPPED True RESTORED True" in proc.stdout, proc.stderr[-3000:]
    table = load_trace(str(tmp_path / "t"))
    assert [table.user_step[i] for i in sorted(range(len(table)), key=table.id.__getitem__)] == [0, 1, 2]
