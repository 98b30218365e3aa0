"""The leak rule (docs/ANALYSIS.md "Memory"): memory at a step's end growing by more than LEAK_FRACTION (1%) and
LEAK_BYTES (1 MB) in each of LEAK_STEPS (5) consecutive steady steps is a leak: a `leak` problem naming the step
it began, the rank and the kind that grew most. The first steps' growth (optimizer state created, DDP's buckets
rebuilt) is not: only growth from a steady step to the next steady one counts."""

from __future__ import annotations

from ...units import fmt_bytes
from ..core.results import Problem
from .results import StepMemory

LEAK_FRACTION, LEAK_BYTES, LEAK_STEPS = 0.01, 1 << 20, 5


def leak_start(steps: list[StepMemory]) -> tuple[int, int] | None:
    """(index into steps of the first step that grew, of the last) of the first run of LEAK_STEPS growing steady
    steps, or None."""
    run = 0
    for i in range(1, len(steps)):
        a, b = steps[i - 1], steps[i]
        grew = (not a.warmup and not b.warmup and b.step == a.step + 1
                and b.end_bytes - a.end_bytes > max(LEAK_BYTES, LEAK_FRACTION * a.end_bytes))
        run = run + 1 if grew else 0
        if run >= LEAK_STEPS:
            first = i - run + 1
            last = i
            while last + 1 < len(steps) and _grew(steps[last], steps[last + 1]):
                last += 1
            return first, last
    return None


def _grew(a: StepMemory, b: StepMemory) -> bool:
    return (not b.warmup and b.step == a.step + 1
            and b.end_bytes - a.end_bytes > max(LEAK_BYTES, LEAK_FRACTION * a.end_bytes))


def leaks(series: dict[int, list[StepMemory]]) -> list[Problem]:
    """One `leak` problem per rank whose steps' ends grow so."""
    out = []
    for rank, steps in sorted(series.items()):
        found = leak_start(steps)
        if found is None:
            continue
        i, j = found
        before, first, last = steps[i - 1], steps[i], steps[j]
        growth = {k: last.end_by_kind[k] - before.end_by_kind.get(k, 0) for k in last.end_by_kind}
        kind = max(growth, key=growth.get)
        n = j - i + 1
        out.append(Problem(
            "leak", None, (), None, [rank],
            f"rank {rank}'s memory grows at every step from step {first.step} on ({n} steps: "
            f"{fmt_bytes(before.end_bytes)} → {fmt_bytes(last.end_bytes)} at the steps' ends), most of it "
            f"{kind} (+{fmt_bytes(growth[kind])}): something keeps a tensor of every step",
            time_ns=first.end_ns, step=first.step))
        out[-1].where = {rank: kind}
    return out
