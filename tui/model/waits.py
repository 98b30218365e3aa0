"""The Waits tab's rows without Textual: the collectives the ranks waited at, each step's row to show, and the
collective a straggler held the others at longest.

Who waited, how long, who arrived last and each step's late rank are the analysis' (tracer/analysis/waits/wait_states.py,
waits/stragglers.py, waits/steps.py: `late_rank`); this only picks rows of the event table for them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from disttrace.tracer.analysis.core.results import Analysis
from disttrace.tracer.data.table import EventTable

from . import MAX_ROWS


@dataclass(frozen=True)
class WaitedCollective:
    """A collective where ranks waited: its total wait, the rank that waited longest, the row it is shown at (its
    last arrival's event, else its first event)."""

    op: str
    gid: int
    group_seq: int
    total_wait_ns: int
    skew_ns: int
    last_arrival: int | None
    longest: int          # the rank that waited longest (the first of equals)
    longest_ns: int
    row: int


def most_waited(a: Analysis, top: int = MAX_ROWS) -> tuple[list[WaitedCollective], int]:
    """The collectives by the waiting they held, most first, at most `top`, and how many had a rank waiting."""
    ct = a.collectives
    totals = ct.wait_totals()
    out = []
    for k in ct.most_waited(top):
        c = ct[k]
        longest = max(c.wait_ns, key=lambda r: c.wait_ns[r])
        target = c.events.get(c.last_arrival) if c.last_arrival is not None else None
        out.append(WaitedCollective(c.op, c.gid, c.group_seq, int(totals[k]), c.skew_ns, c.last_arrival, longest,
                                    c.wait_ns[longest], target if target is not None else min(c.events.values())))
    waited = int((totals > 0).sum()) if len(out) == top else len(out)
    return out, waited


def step_rows(a: Analysis, t: EventTable) -> dict[int, int]:
    """step -> the row to show for it: the late rank's first event in it, else the step's first event (one pass
    over the rows for all the steps)."""
    late = {s.index: s.late_rank for s in a.steps}
    first: dict[int, int] = {}
    out: dict[int, int] = {}
    for i, k in enumerate(a.step_of):
        if k >= 0 and k not in out:
            first.setdefault(k, i)
            if late.get(k) is None or t.rank[i] == late[k]:
                out[k] = i
    return {**first, **out}


def held_longest(a: Analysis, rank: int) -> int | None:
    """The row of `rank`'s event at the collective it arrived last to that made the others wait longest (the first
    of equals), from the instances' columns, not a view of each (a key would wait for them all); None if it arrived
    last nowhere."""
    ct = a.collectives
    row = ct.culprit_rows(np.where(ct.column("last_arrival") == rank, rank, -1))  # (-1: not in it)
    late = np.flatnonzero(row >= 0)
    return int(row[late[np.argmax(ct.wait_totals()[late])]]) if len(late) else None
