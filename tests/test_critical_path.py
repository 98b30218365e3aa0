"""The critical path of each step across ranks, the root causes of waits, and the what-if (issue 18).

On a real DDP job with a straggler (tests/jobs/cp_ddp_straggler.py: 20 ms of compute a step, rank 1 50 ms more in
steps 3, 7, 11), and the same job run on time (--no-fault): the path of a late step is rank 1's compute, the cause
of the waiting is rank 1's span at the backward() line, and "rank 1 on time" predicts the on-time run's step time
within 10%. The walk's rules are checked on
hand-timed traces below (tests/synthetic.py)."""

from __future__ import annotations

import pytest

from harness import job
from synthetic import MS, Trace
from disttrace.tracer.analysis import analyze, to_json
from disttrace.tracer.data.load import load_trace

DDP = job("cp_ddp_straggler")


def _check_adds_up(a) -> None:
    for p in a.critical_path:
        assert sum(part.ns for part in p.parts) == p.length_ns, p.index
        assert all(part.ns > 0 for part in p.parts)


@pytest.fixture(scope="module")
def ddp(traced):
    faulty = analyze(load_trace(str(traced("cp_ddp_straggler.py", nproc=2, summaries="off"))))
    on_time = analyze(load_trace(str(traced("cp_ddp_straggler.py", nproc=2, args=["--no-fault"],
                                            summaries="off"))))
    return faulty, on_time


@pytest.mark.slow
def test_a_late_step_s_path_is_the_straggler_s_compute(ddp):
    a, _ = ddp
    _check_adds_up(a)
    site = f"cp_ddp_straggler.py:{DDP.BACKWARD_LINE}"
    by_step = {p.index: p for p in a.critical_path}
    assert a.straggler.rank == DDP.LATE_RANK and len(a.straggler.steps) == len(DDP.LATE_STEPS)
    for k in a.straggler.steps:
        mine = sum(part.ns for part in by_step[k].parts if part.rank == DDP.LATE_RANK and part.kind == "compute")
        assert mine >= DDP.LATE_S * 1e9 * 0.9, (k, by_step[k].parts)
        late = max(by_step[k].parts, key=lambda part: part.ns)
        assert late.rank == DDP.LATE_RANK and late.span.endswith(site), late


@pytest.mark.slow
def test_the_root_cause_of_the_waiting_is_the_straggler_s_span(ddp):
    a, _ = ddp
    site = f"cp_ddp_straggler.py:{DDP.BACKWARD_LINE}"
    # the waiting in the steps (start-up skew, before the first step, is a cause of its own: "start → ...")
    in_steps = [c for c in a.causes if c.span.endswith(site)]
    top = in_steps[0]
    injected = len(DDP.LATE_STEPS) * DDP.LATE_S * 1e9
    assert (top.rank, top.kind, top.ranks_delayed) == (DDP.LATE_RANK, "compute", [0])
    assert injected * 0.95 <= top.caused_wait_ns <= injected * 1.4, top
    assert all(c.caused_wait_ns < top.caused_wait_ns / 5 for c in in_steps[1:]), in_steps[:3]


@pytest.mark.slow
def test_rank_on_time_predicts_the_on_time_run(ddp):
    a, on_time = ddp
    (w,) = [w for w in a.what_if if w.change == f"rank {DDP.LATE_RANK} on time"]
    steady = [p.length_ns for p in on_time.critical_path if p.index not in {s.index for s in on_time.steps if s.warmup}]
    measured = sum(steady) / len(steady)
    assert w.step_ns_before > 1.3 * measured  # the fault is there: 3 steps of 12 late by 50 ms
    assert abs(w.step_ns_after - measured) <= 0.10 * measured, (w, measured)
    d = to_json(a)
    assert d["what_if"][0] == {"change": w.change, "step_ns_before": w.step_ns_before,
                               "step_ns_after": w.step_ns_after, "steps": len(steady)}
    assert {"index", "length_ns", "parts"} <= set(d["critical_path"][0])


# -- the walk's rules on hand-timed traces --------------------------------------------------------------------

def test_a_chain_of_waits_is_traced_to_its_root():
    # rank 0 computes 30 ms, then sends to rank 1, which forwards to rank 2 after 5 ms; rank 2 posted its recv at
    # 1 ms: its 34 ms of waiting were caused by rank 0's 30 ms and rank 1's 5 ms (minus rank 2's own 1 ms)
    tr = Trace(3)
    tr.send(0, 1, 30 * MS, 31 * MS, 4, site="a.py:10 in f")
    tr.recv(1, 0, 1 * MS, 31 * MS, 4, site="b.py:20 in g")
    tr.send(1, 2, 36 * MS, 37 * MS, 4, site="b.py:22 in g")
    tr.recv(2, 1, 1 * MS, 37 * MS, 4, site="c.py:30 in h")
    tr.coll("barrier", {0: 38 * MS, 1: 38 * MS, 2: 40 * MS}, 41 * MS, site="d.py:1 in main")
    a = analyze(tr.table())
    _check_adds_up(a)
    caused = {(c.rank, c.kind): c.caused_wait_ns for c in a.causes}
    assert caused[(0, "compute")] == 29 * MS + 29 * MS  # rank 1's wait, then rank 2's (while rank 0 computed)
    assert caused[(1, "compute")] == 5 * MS and caused[(1, "comm")] == 1 * MS  # rank 1 received, computed
    assert caused[(2, "compute")] == 2 * 2 * MS  # ranks 0 and 1 waited at the barrier while rank 2 computed
    # the path: rank 0 computes, its message arrives on rank 1, which computes and sends on to rank 2, which
    # computes and comes last to the barrier
    path = a.critical_path[0]
    assert [(p.rank, p.kind, p.span or p.op, p.ns // MS) for p in path.parts] == [
        (0, "compute", "start → a.py:10", 29), (1, "comm", "recv world", 1), (1, "compute", "b.py:20 → b.py:22", 5),
        (2, "comm", "recv world", 1), (2, "compute", "c.py:30 → d.py:1", 3), (2, "comm", "barrier world #0", 1)]
