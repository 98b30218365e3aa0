"""The ground truths of the blame-and-what-if jobs (wi_*.py): each job with its fault and the run without it, the
change that undoes the fault, the verdict it must give, and the bounds a prediction must meet. Read by
tests/analysis/causal/test_attribution_truth.py (one run each) and benchmarks/bench_verdict_rates.py (the rate over many)."""

from __future__ import annotations

from dataclasses import dataclass

from wi_grad_hooks import LATE_STEPS as HOOKS_LATE

STEP_TOLERANCE, SAVING_TOLERANCE, SAVING_FLOOR_NS = 0.15, 0.15, 3e6  # the bounds


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
# the spread fault makes each rank late before a quarter of the steps (wi_pp_common.spread_late): their median
# compute a step (pairs.compute_pace) is still the pace the fault leaves alone, so every rank is a bystander for it
# (unpaired, the two runs' pace differed by up to 5%: a 13 ms miss of an 82 ms saving, 2 of 6 runs)
SPREAD = dict(bystanders=(0, 1, 2, 3), **PP)
CASES = {
    "ddp_persistent": Case("wi_ddp_persistent.py", 4, (), ("--no-fault",), "rank:3", "worker", rank=3,
                           bystanders=(0, 1, 2)),
    # (DDP's broadcast of the buffers each forward, relayed by gloo: a relay rank waits in it for the worker)
    "ddp_batchnorm": Case("wi_ddp_persistent.py", 4, ("--batchnorm",), ("--no-fault", "--batchnorm"), "rank:3",
                          "worker", rank=3, bystanders=(0, 1, 2)),
    "ddp_accumulation": Case("wi_ddp_accum.py", 2, (), ("--no-fault",), "rank:1", "worker", rank=1, bystanders=(0,)),
    "grad_hooks": Case("wi_grad_hooks.py", 2, (), ("--no-fault",), "rank:1", "worker", rank=1,
                       late_steps=HOOKS_LATE),
    "pipelining_worker": Case("wi_pp_pipelining.py", fault=("--fault=worker",), change="rank:3", kind="worker",
                              rank=3, bystanders=(0, 1, 2), **PP),
    "pipelining_stage": Case("wi_pp_pipelining.py", fault=("--fault=stage",), change="stage:1", kind="stage",
                             stage=1, bystanders=(0, 2), **PP),
    "pipelining_spread": Case("wi_pp_pipelining.py", fault=("--fault=spread",), change="ranks", kind="spread",
                              **SPREAD),
    "manual_worker": Case("wi_pp_manual.py", fault=("--fault=worker",), change="rank:3", kind="worker", rank=3,
                          bystanders=(0, 1, 2), **PP),
    "manual_stage": Case("wi_pp_manual.py", fault=("--fault=stage",), change="stage:1", kind="stage", stage=1,
                         bystanders=(0, 2), **PP),
    "manual_spread": Case("wi_pp_manual.py", fault=("--fault=spread",), change="ranks", kind="spread", **SPREAD),
}


def prediction_error(w, measured: float) -> str | None:
    """Why a what-if's prediction misses the run without the fault (its mean steady step `measured`), or None: the
    predicted step within STEP_TOLERANCE of it, and the predicted saving (measured step - predicted step) within
    SAVING_TOLERANCE of the saving the re-run measured, or within SAVING_FLOOR_NS where that is larger."""
    saving, predicted = w.step_ns_before - measured, w.step_ns_before - w.step_ns_after
    if abs(w.step_ns_after - measured) > STEP_TOLERANCE * measured:
        return f"step {w.step_ns_after / 1e6:.1f} ms predicted, {measured / 1e6:.1f} ms measured"
    if abs(predicted - saving) > max(SAVING_TOLERANCE * saving, SAVING_FLOOR_NS):
        return f"saving {predicted / 1e6:.1f} ms predicted, {saving / 1e6:.1f} ms measured"
    return None
