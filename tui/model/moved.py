"""The Diff tab's moved table without Textual: B's steps and ops that moved beyond their noise, the largest move
first. Which moved, and A's medians, are the comparison's (tracer/analysis/diff/compare.py: `Diff.ops`, `step_moved`,
`a_median`); this only puts them in one list and ranks them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from disttrace.tracer.analysis.core.results import Analysis
from disttrace.tracer.data.table import EventTable

if TYPE_CHECKING:
    from disttrace.tracer.analysis import Diff


@dataclass(frozen=True)
class Moved:
    """A step (rank and op None) or one op of B that moved: A's median beside B's time, and the row shown."""

    step: int
    rank: int | None
    op: str | None
    site: str             # the op's call site as the comparison names it ("" for a step)
    a_median_ns: int
    b_ns: int
    row: int

    @property
    def delta_ns(self) -> int:
        return self.b_ns - self.a_median_ns


def moved(d: Diff, table: EventTable, analysis: Analysis) -> list[Moved]:
    """What moved in the comparison `d` (a Diff of A with the trace on screen, B), the largest move first (steps
    before ops where equal); a step is shown at its first row."""
    found: list[Moved] = []
    step_of = np.frombuffer(analysis.step_of, np.int32) if len(analysis.step_of) == len(table) else None
    first_row: dict[int, int] = {}
    if step_of is not None:
        ks, rows = np.unique(step_of, return_index=True)
        first_row = {int(k): int(r) for k, r in zip(ks, rows) if k >= 0}
    lengths = {k: y for k, _, y in d.steps if y is not None}
    med_a = d.a.median_ns
    for k, stepped in sorted(d.ops.step_moved.items()) if d.ops is not None else ():
        if stepped and k in first_row:
            found.append(Moved(k, None, None, "", med_a, lengths[k], first_row[k]))
    if d.ops is not None:
        for row in np.flatnonzero(d.ops.moved).tolist():
            site = d.a_side.site_of(table.site[row] or "") if d.a_side is not None else ""
            found.append(Moved(int(step_of[row]) if step_of is not None else -1, table.rank[row], table.op[row], site,
                               int(d.ops.a_median[row]), table.duration_ns(row) or 0, row))
    found.sort(key=lambda m: -abs(m.delta_ns))
    return found
