"""Blame and what-if on jobs written as users write them (issue 37), each run with its fault and without it, so that
every prediction meets a measurement.

The jobs (tests/jobs/wi_*.py): a persistent straggler in DDP (4 ranks); DDP with gradient accumulation and a stalling
loader; per-parameter async all-reduces from gradient hooks with a periodic straggler; a data x pipeline job (2
stages x 2 replicas, 1F1B) written with torch.distributed.pipelining and by hand with batch_isend_irecv, each with
one worker slow, one stage slow on both replicas, and a delay that moves between ranks (no culprit). For each: the
verdict's kind and its rank or stage, and the change that fixes the fault predicts the run without it: the step
within 15% of the re-run's (at the faulty run's pace where the fault leaves steps alone: tests/pairs.py), and the saving (measured step - predicted step) within 15% of the saving the re-run
measured, or within 3 ms where that is larger. One run each here; the rate over 10 runs is
benchmarks/bench_verdict_rates.py's."""

from __future__ import annotations

import pytest

import harness  # noqa: F401 (puts tests/jobs on the path)
from pairs import analysed_pair, measured_without_fault, ms
from disttrace.tracer.analysis import to_json
from disttrace.tracer.analysis.causal.what_if import parse_change

pytestmark = pytest.mark.slow

from wi_cases import CASES, prediction_error  # noqa: E402 (tests/jobs, on the path through harness)
from wi_pp_common import ITERATIONS as PP_ITERATIONS  # noqa: E402


@pytest.fixture(scope="module")
def pairs(traced):
    made = {}

    def get(name: str):
        if name not in made:
            c = CASES[name]
            made[name] = analysed_pair(traced, c.script, c.nproc, c.late_steps, (parse_change(c.change),), c.fault,
                                       c.clean, c.bystanders or None)
        return made[name]

    return get


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_verdict_names_the_fault(name, pairs):
    c = CASES[name]
    a, on_time = pairs(name)
    at = a.attribution
    print(f"\n{name}: {at.kind} rank {at.rank} stage {at.stage}, slowdown {at.slowdown:.2f}: {at.reason}")
    assert (at.kind, at.rank, at.stage) == (c.kind, c.rank, c.stage), at
    d = to_json(a)
    assert d["attribution"]["kind"] == c.kind
    if c.kind == "worker":
        assert a.straggler is not None and a.straggler.rank == c.rank, a.straggler
        assert d["straggler"]["rank"] == c.rank
        assert at.ranks[c.rank] == max(at.ranks.values())
        if c.script.startswith("wi_ddp"):
            # the critical path runs through the worker's compute, not the waiting ranks' backward() (DDP's reducer
            # waits in it, for the worker's bucket: a wait, not compute)
            warm = {s.index for s in a.steps if s.warmup}
            compute: dict[int, int] = {}
            for p in a.critical_path:
                for part in p.parts if p.index not in warm else ():
                    if part.kind == "compute":
                        compute[part.rank] = compute.get(part.rank, 0) + part.ns
            assert max(compute, key=compute.__getitem__) == c.rank, compute
    else:
        assert a.straggler is None and d["straggler"] is None, a.straggler
    if c.kind == "stage":
        assert a.pipeline.slow_stage == c.stage and d["pipeline"]["slow_stage"] == c.stage
        assert at.stages[c.stage] == max(at.stages.values())
    elif a.pipeline is not None:
        assert a.pipeline.slow_stage is None
    # the run without the fault: nothing beyond the noise, or a spread far smaller than the fault's
    clean = on_time.attribution
    assert clean.kind in ("none", "spread") and on_time.straggler is None, clean
    if (p := a.pipeline) is not None:
        assert p.stage_ranks == [[0, 2], [1, 3]], p
        assert (p.stages, p.micro_batches, p.iterations) == ([0, 1], 4, PP_ITERATIONS), p


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_change_that_undoes_the_fault_predicts_the_run_without_it(name, pairs):
    a, on_time = pairs(name)
    (w,) = a.what_if
    measured = measured_without_fault(a, on_time, CASES[name].late_steps, CASES[name].bystanders or None)
    saving, predicted_saving = w.step_ns_before - measured, w.step_ns_before - w.step_ns_after
    print(f"\n{name}: {w.change}: {ms(w.step_ns_before)} -> {ms(w.step_ns_after)} predicted, {ms(measured)} "
          f"measured without the fault (saving {ms(predicted_saving)} predicted, {ms(saving)} measured)")
    assert saving > 0.1 * w.step_ns_before, "the fault must be there"
    assert prediction_error(w, measured) is None, prediction_error(w, measured)


# -- a start read before the previous op's end (issue 53) ---------------------------------------------------------

def _loss_read_early(trace, shifted, ranks=(1, 2, 3), by_ns: int = 20_000):
    """A copy of the trace dir with each loss all-reduce's recorded start (wi_dp_back_to_back.py's second one, of
    a scalar) moved
    by_ns before the recorded end of the op before it, on `ranks`: the order in which a 16-rank job's clock reads of
    one op's end and the next one's start interleaved (issue 53). One process's reads never interleave so here."""
    import json
    import re
    import shutil

    shifted.mkdir(parents=True, exist_ok=True)
    for f in trace.iterdir():
        if f.name == "run.json":
            shutil.copy(f, shifted / f.name)
        if not re.fullmatch(r"rank-\d+-.*\.jsonl", f.name):
            continue
        # (a rank file is written through a memory map: zero bytes after its last record)
        records = [json.loads(x) for x in f.read_bytes().split(b"\0", 1)[0].decode().splitlines() if x.strip()]
        mine, end = records[0]["rank"] in ranks, None
        for r in records:
            if r["k"] == "e":
                end = r["t"]
            elif mine and r["k"] == "b" and r["op"] == "all_reduce" and r["shape"] == [] and end is not None:
                r["t"] = end - by_ns
        (shifted / f.name).write_text("".join(json.dumps(r) + "\n" for r in records))
    return shifted


def test_a_worker_slow_before_two_ops_read_overlapping_is_named_and_its_pace_predicts_the_run_without_it(
        traced, tmp_path):
    # 4-rank data parallelism by hand, rank 0's loader 40 ms slow every step: ranks 1-3 wait for it in the
    # gradients' all-reduce, then go straight on into the loss's, whose start is read 20 µs before the first one's
    # end. The compute before it was measured from before the first one, its 40 ms wait read as compute: "none", and
    # rank 0's pace saved nothing (90.3 ms -> 90.1 ms; the re-run measured 56 ms)
    made = iter(range(10**6))

    def read_early(script, **kw):
        trace = traced(script, **kw)
        return trace if "--no-fault" in kw.get("args", ()) else _loss_read_early(trace, tmp_path / f"{next(made)}")

    a, on_time = analysed_pair(read_early, "wi_dp_back_to_back.py", 4, None, (parse_change("rank:0"),), (),
                               ("--no-fault",), (1, 2, 3))
    at = a.attribution
    assert (at.kind, at.rank) == ("worker", 0), at
    assert a.straggler is not None and a.straggler.rank == 0, a.straggler
    (w,) = a.what_if
    measured = measured_without_fault(a, on_time, None, (1, 2, 3))
    print(f"\n{w.change}: {ms(w.step_ns_before)} -> {ms(w.step_ns_after)} predicted, {ms(measured)} measured")
    assert prediction_error(w, measured) is None, prediction_error(w, measured)
