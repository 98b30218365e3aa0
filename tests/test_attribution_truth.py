"""Blame and what-if on jobs written as users write them (issue 37), each run with its fault and without it, so that
every prediction meets a measurement.

The jobs (tests/jobs/wi_*.py): a persistent straggler in DDP (4 ranks); DDP with gradient accumulation and a stalling
loader; per-parameter async all-reduces from gradient hooks with a periodic straggler; a data x pipeline job (2
stages x 2 replicas, 1F1B) written with torch.distributed.pipelining and by hand with batch_isend_irecv, each with
one worker slow, one stage slow on both replicas, and a delay that moves between ranks (no culprit). For each: the
verdict's kind and its rank or stage, and the change that fixes the fault predicts the run without it: the step
within 15% of the re-run's, and the saving (measured step - predicted step) within 15% of the saving the re-run
measured, or within 3 ms where that is larger. One run each here; the rate over 10 runs is
benchmarks/bench_verdict_rates.py's."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pairs import analysed_pair, ms, steady_mean
from disttrace.tracer.analysis import to_json
from disttrace.tracer.analysis.what_if import parse_change

pytestmark = pytest.mark.slow

STEP_TOLERANCE, SAVING_TOLERANCE, SAVING_FLOOR_NS = 0.15, 0.15, 3e6


@dataclass(frozen=True)
class Case:
    script: str
    nproc: int
    fault: tuple[str, ...]
    clean: tuple[str, ...]
    change: str                  # the what-if that undoes the fault
    kind: str                    # the verdict's kind
    rank: int | None = None      # the worker named (kind "worker")
    stage: int | None = None     # the stage named (kind "stage")
    bystanders: tuple[int, ...] = ()  # ranks the fault leaves alone: the two runs' pace compared on their compute
    late_steps: tuple[int, ...] | None = None  # or the steps it leaves alone


PP = dict(nproc=4, clean=())
CASES = {
    "ddp_persistent": Case("wi_ddp_persistent.py", 4, (), ("--no-fault",), "rank:3", "worker", rank=3,
                           bystanders=(0, 1, 2)),
    "ddp_accumulation": Case("wi_ddp_accum.py", 2, (), ("--no-fault",), "rank:1", "worker", rank=1, bystanders=(0,)),
    "grad_hooks": Case("wi_grad_hooks.py", 2, (), ("--no-fault",), "rank:1", "worker", rank=1,
                       late_steps=(3, 7, 11, 15)),
    "pipelining_worker": Case("wi_pp_pipelining.py", fault=("--fault=worker",), change="rank:3", kind="worker",
                              rank=3, bystanders=(0, 1, 2), **PP),
    "pipelining_stage": Case("wi_pp_pipelining.py", fault=("--fault=stage",), change="stage:1", kind="stage",
                             stage=1, bystanders=(0, 2), **PP),
    "pipelining_spread": Case("wi_pp_pipelining.py", fault=("--fault=spread",), change="ranks", kind="spread", **PP),
    "manual_worker": Case("wi_pp_manual.py", fault=("--fault=worker",), change="rank:3", kind="worker", rank=3,
                          bystanders=(0, 1, 2), **PP),
    "manual_stage": Case("wi_pp_manual.py", fault=("--fault=stage",), change="stage:1", kind="stage", stage=1,
                         bystanders=(0, 2), **PP),
    "manual_spread": Case("wi_pp_manual.py", fault=("--fault=spread",), change="ranks", kind="spread", **PP),
}


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
    if a.pipeline is not None:
        assert a.pipeline.stage_ranks == [[0, 2], [1, 3]], a.pipeline
        assert (a.pipeline.stages, a.pipeline.micro_batches, a.pipeline.iterations) == ([0, 1], 4, 10), a.pipeline


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_change_that_undoes_the_fault_predicts_the_run_without_it(name, pairs):
    c = CASES[name]
    a, on_time = pairs(name)
    (w,) = a.what_if
    measured = steady_mean(on_time)
    saving, predicted_saving = w.step_ns_before - measured, w.step_ns_before - w.step_ns_after
    print(f"\n{name}: {w.change}: {ms(w.step_ns_before)} -> {ms(w.step_ns_after)} predicted, {ms(measured)} "
          f"measured without the fault (saving {ms(predicted_saving)} predicted, {ms(saving)} measured)")
    assert saving > 0.1 * w.step_ns_before, "the fault must be there"
    assert abs(w.step_ns_after - measured) <= STEP_TOLERANCE * measured, (w, measured)
    assert abs(predicted_saving - saving) <= max(SAVING_TOLERANCE * saving, SAVING_FLOOR_NS), (w, measured)
