"""The analysis' critical paths as the viewer needs them: the step at the playhead, the row a step or a path part
is shown at, and each rank's stretches of a step's path (what the timeline marks). Nothing is recomputed: the
paths, causes and what-ifs are the analysis' (tracer/analysis/causal/critical_path.py); this only finds rows for them.

No Textual here: plain ints, so it can be unit-tested.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from disttrace.tracer.analysis import merged
from disttrace.tracer.analysis.core.results import CriticalPath, PathPart, Step

from .store import TraceStore

_SCAN = 4096
"""Rows looked at from a step's start for its first row before one pass over all of them."""


class StepPaths:
    """The critical paths of one analysis by step, in time order (index 0: the whole trace, when the analysis found
    no steps)."""

    def __init__(self, store: TraceStore) -> None:
        a = store.analysis
        self.store = store
        self.analysis = a
        self.paths: dict[int, CriticalPath] = {p.index: p for p in a.critical_path}
        self.steps: dict[int, Step] = {s.index: s for s in a.steps}
        # the steps with a path, by start (steps without one: no op of theirs finished)
        if self.steps:
            self.order = sorted((k for k in self.paths if k in self.steps), key=lambda k: self.steps[k].start_ns)
        else:
            self.order = sorted(self.paths)
        self._starts = [self.steps[k].start_ns for k in self.order] if self.steps else []
        self._marks: dict[int, dict[int, list[tuple[int, int]]]] = {}
        self._first: dict[int, int] = {}

    @property
    def by_step(self) -> bool:
        """Whether the paths are per step (else one path for the whole trace)."""
        return bool(self.steps)

    def step_at(self, row: int) -> int | None:
        """The step whose path to show for the playhead at `row`: the step of its event; for an event outside
        every step (set-up, the end), the step under or after its time, else the last; before the first event,
        the first. None when the analysis has no critical path."""
        if not self.order:
            return None
        if not self.steps or row < 0:
            return self.order[0]
        step_of = self.analysis.step_of
        k = step_of[row] if row < len(step_of) else -1
        if k in self.paths and k in self.steps:
            return k
        t = self.store.table.start_ns[row]
        j = bisect_right(self._starts, t) - 1
        if j >= 0 and t <= self.steps[self.order[j]].end_ns:
            return self.order[j]
        return self.order[min(j + 1, len(self.order) - 1)]

    def neighbour(self, step: int | None, direction: int) -> int | None:
        """The step before (-1) or after (+1) this one that has a path, None at the ends."""
        if step is None or step not in self.paths:
            return None
        j = self.order.index(step) + direction
        return self.order[j] if 0 <= j < len(self.order) else None

    def position(self, step: int) -> int:
        """1-based place of the step among those with a path."""
        return self.order.index(step) + 1

    def first_row(self, step: int) -> int:
        """The step's first event in time (rows are in start order), the playhead's place for it."""
        row = self._first.get(step)
        if row is not None:
            return row
        n, step_of = self.store.n_events, self.analysis.step_of
        if not self.steps or not n:
            return 0
        start = bisect_left(self.store.table.start_ns, self.steps[step].start_ns)
        for i in range(start, min(n, start + _SCAN)):
            if step_of[i] == step:
                self._first[step] = i
                return i
        row = next((i for i in range(n) if step_of[i] == step), start if start < n else n - 1)
        self._first[step] = row
        return row

    def window(self, step: int) -> tuple[int, int]:
        """(start, end) of the step's path, absolute ns."""
        p = self.paths[step]
        start = p.parts[0].start_ns if p.parts else (self.steps[step].start_ns if step in self.steps else
                                                      self.store.t0)
        return start, start + p.length_ns

    def marks(self, step: int) -> dict[int, list[tuple[int, int]]]:
        """rank -> the stretches [start, end) of the step's path on it, sorted and merged (what the timeline
        marks)."""
        got = self._marks.get(step)
        if got is not None:
            return got
        by_rank: dict[int, list[tuple[int, int]]] = {}
        p = self.paths.get(step)
        for part in p.parts if p is not None else ():
            by_rank.setdefault(part.rank, []).append((part.start_ns, part.start_ns + part.ns))
        for rank, spans in by_rank.items():
            by_rank[rank] = merged(spans)
        self._marks[step] = by_rank
        return by_rank

    @staticmethod
    def part_row(part: PathPart) -> int | None:
        """The event to show for a part of a path: the op it communicated or waited in, or the op that ended a
        compute span (the analysis' `PathPart.row`)."""
        return part.row if part.row >= 0 else None


def shares(path: CriticalPath) -> dict[str, float]:
    """The percent of the path's length in compute, comm and wait (its parts add up to it)."""
    length = max(1, path.length_ns)
    return {k: 100 * sum(p.ns for p in path.parts if p.kind == k) / length for k in ("compute", "comm", "wait")}


def step_paths(store: TraceStore) -> StepPaths:
    """The StepPaths of the store's analysis, made once per analysis (kept on the store)."""
    got = getattr(store, "_step_paths", None)
    if got is None or got.analysis is not store.analysis:
        got = store._step_paths = StepPaths(store)
    return got


__all__ = ["StepPaths", "shares", "step_paths"]
