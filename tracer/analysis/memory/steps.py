"""Each rank's memory samples cut into the analysis' steps (waits/steps.py finds them; docs/ANALYSIS.md "Steps").

A step begins on a rank where the analysis says steps begin: at the end of that rank's op before the step's first
one (so the compute before a step's first collective is the step's: its forward), and the last step ends at the
end of its last op. So with DDP a step's window runs from the previous step's optimizer through the forward and
backward to its last gradient all-reduce; the same cut on every step makes their ends comparable (leaks.py).
"""

from __future__ import annotations

import numpy as np

from ...data.table import NONE
from ...format import MEM_KINDS
from ..core.matching import finished_column
from .results import StepMemory


def rank_windows(a, rank: int) -> dict[int, tuple[int, int]]:
    """step -> (start_ns, end_ns) of `rank`'s window of each step it has ops in (end exclusive but the last)."""
    t = a.table
    ranks = np.asarray(t.rank)
    step_of = np.asarray(a.step_of)
    if len(step_of) != len(ranks):
        return {}
    rows = np.flatnonzero(ranks == rank)
    if not len(rows):
        return {}
    ends = finished_column(t)[rows]
    ends = np.where(ends == NONE, np.asarray(t.start_ns)[rows], ends)
    steps = step_of[rows]
    out: dict[int, tuple[int, int]] = {}
    firsts = np.flatnonzero((steps >= 0) & np.r_[True, steps[1:] != steps[:-1]])
    for i in firsts:
        s = int(steps[i])
        if s in out:
            continue  # (a step met again: its window runs from its first start)
        out[s] = (int(ends[i - 1]) if i > 0 else np.iinfo(np.int64).min, 0)
    order = sorted(out)
    for s, nxt in zip(order, order[1:] + [None]):
        last_end = int(ends[steps == s].max())
        out[s] = (out[s][0], out[nxt][0] if nxt is not None else last_end + 1)
    return out


def step_series(samples, windows: dict[int, tuple[int, int]], warmup: set[int]) -> list[StepMemory]:
    """The rank's bytes at each step's start, peak and end (importers/memory_files.RankMemory's samples)."""
    out = []
    total = samples.total
    for s, (lo, hi) in sorted(windows.items()):
        i, j = np.searchsorted(samples.t, lo, "left"), np.searchsorted(samples.t, hi, "left")
        if i >= j:
            continue
        k = i + int(np.argmax(total[i:j]))
        out.append(StepMemory(s, int(samples.t[i]) if lo < -(1 << 62) else lo, hi, int(total[i]), int(total[k]),
                              int(total[j - 1]), int(samples.t[k]),
                              dict(zip(MEM_KINDS, samples.bytes[j - 1].tolist())), s in warmup))
    return out


def window_rows(samples, window: tuple[int, int] | None) -> tuple[int, int]:
    """The samples' index range in a window (None: all of them)."""
    if window is None:
        return 0, len(samples.t)
    lo, hi = window
    return int(np.searchsorted(samples.t, lo, "left")), int(np.searchsorted(samples.t, hi, "left"))
