"""memory_report(memory, analysis): the memory analysis of a trace recorded with `disttrace run --memory`, put
together from its parts (steps.py, breakdown.py, formula.py, leaks.py) into a MemoryReport (results.py)."""

from __future__ import annotations

from ...units import fmt_bytes
from .breakdown import imbalance, rank_breakdown
from .formula import checks, formula
from .leaks import leaks
from .results import MemoryReport
from .steps import rank_windows, step_series

NEAR_CAPACITY = 0.9  # a CUDA peak above this share of the device's memory is said


def memory_report(memory, a, step: int | None = None) -> MemoryReport | None:
    """memory: importers/memory_files.MemoryTrace (data/load.read_memory), a: the trace's Analysis; None: no memory.
    step: the step whose breakdown is made, picked in the viewer (one of a.steps), over the trace's --memory-step."""
    if memory is None or not memory.ranks:
        return None
    warmup = {s.index for s in a.steps if s.warmup or s.outside}
    steady = [s.index for s in a.steps if not (s.warmup or s.outside)]
    notes = list(memory.damage)
    chosen = "whole trace"
    if step is not None and any(s.index == step for s in a.steps):
        chosen = "picked"
    else:
        step = None
    if step is None and memory.step is not None:
        if any(s.index == memory.step for s in a.steps):
            step, chosen = memory.step, "--memory-step"
        else:
            notes.append(f"--memory-step {memory.step}: the trace has no such step ({len(a.steps)} steps); "
                         "the first steady step is shown")
    if step is None and steady:
        step, chosen = steady[0], "first steady"
    elif step is None and a.steps:
        step, chosen = a.steps[-1].index, "last step"
    ranks, series = {}, {}
    for r, samples in sorted(memory.ranks.items()):
        windows = rank_windows(a, r)
        series[r] = step_series(samples, windows, warmup)
        m = rank_breakdown(samples, windows.get(step) if step is not None else None)
        if m is None:
            notes.append(f"rank {r} has no memory sample in step {step}")
            continue
        m.steps = series[r]
        ranks[r] = m
    f = formula(memory)
    if f is not None:
        for r, m in ranks.items():
            m.predicted = f.predicted.get(r, {})
    notes += _capacity(memory)
    return MemoryReport(step, chosen, ranks, f, checks(f, ranks), imbalance(ranks), notes, leaks(series),
                        memory.kinds)


def _capacity(memory) -> list[str]:
    """CUDA: a peak of the device's used memory near its capacity, with the op it was sampled at."""
    out = []
    for r, s in sorted(memory.ranks.items()):
        worst = None
        for i, dev in enumerate(s.device):
            if isinstance(dev, dict) and dev.get("total") and dev.get("used") is not None:
                share = dev["used"] / dev["total"]
                if worst is None or share > worst[0]:
                    worst = (share, i, dev)
        if worst is not None and worst[0] >= NEAR_CAPACITY:
            share, i, dev = worst
            out.append(f"rank {r}'s device was {share:.0%} full ({fmt_bytes(dev['used'])} of "
                       f"{fmt_bytes(dev['total'])}) at {s.op[i]}")
    return out
