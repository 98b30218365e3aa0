"""Level of detail for the timeline: what one character cell of a rank's lane stands for.

A cell may cover a fraction of one event or a million of them. Per rank we keep prefix sums of the time
spent in each category (collective, barrier, send/recv) and of the waiting part, so any time window's
coverage costs two bisects, whatever the number of events in it: a cell standing for thousands of short
collectives still shows that the rank was communicating there (and how much), rather than averaging it away.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from disttrace.tracer.events import NONE, EventTable

N_CATS = 4  # 0 unused (compute), 1 collective, 2 barrier, 3 p2p


@dataclass
class Cell:
    """What a timeline cell shows: busy fraction, dominant category, whether waiting dominates, and the event
    row that stands for the cell (for its colour and for clicks)."""

    busy: float
    cat: int
    waiting: bool
    row: int  # -1 when no event touches the cell
    inside: bool  # between the rank's first and last event (a compute gap rather than nothing)


EMPTY = Cell(0.0, 0, False, -1, False)


class Lane:
    """One rank's events in start order with prefix sums for O(log n) window coverage."""

    __slots__ = ("rows", "starts", "ends", "waits", "cats", "cum")

    def __init__(self, rows, starts, ends, waits, cats, cum):
        self.rows = rows
        self.starts = starts
        self.ends = ends
        self.waits = waits
        self.cats = cats
        self.cum = cum  # cum[c][i]: time in category c (c=0: waiting) over events [0, i)

    @classmethod
    def build(cls, rows: array, table: EventTable, cats_of_row, wait_ns, t_end: int) -> "Lane":
        n = len(rows)
        tstart, tend = table.start_ns, table.end_ns
        starts = array("q", (tstart[i] for i in rows))
        ends = array("q", bytes(8 * n))
        waits = array("q", bytes(8 * n))
        cats = bytearray(n)
        cum = [array("q", bytes(8 * (n + 1))) for _ in range(N_CATS)]
        acc = [0] * N_CATS
        c0, c1, c2, c3 = cum
        for p, i in enumerate(rows):
            s = starts[p]
            e = tend[i]
            if e == NONE or e < s:
                e = t_end  # never finished: it occupies the rest of the trace (that is the hang)
            ends[p] = e
            d = e - s
            w = min(wait_ns[i], d)
            waits[p] = w
            c = cats_of_row[i]
            cats[p] = c
            acc[c] += d
            acc[0] += w
            c0[p + 1] = acc[0]
            c1[p + 1] = acc[1]
            c2[p + 1] = acc[2]
            c3[p + 1] = acc[3]
        return cls(rows, starts, ends, waits, cats, cum)

    def coverage(self, a: int, b: int) -> tuple[list[int], int, int]:
        """Time per category inside [a, b) (index 0: waiting), and the index range [lo, hi) of touched events."""
        starts, ends = self.starts, self.ends
        hi = bisect_left(starts, b)  # events starting before b
        lo = bisect_right(starts, a) - 1
        if lo < 0:
            lo = 0
        if hi <= lo:
            return [0] * N_CATS, lo, lo
        cov = [self.cum[c][hi] - self.cum[c][lo] for c in range(N_CATS)]
        # clip the first event to start at a and the last to end at b
        for p, clip_before in ((lo, True), (hi - 1, False)):
            s, e, w, c = starts[p], ends[p], self.waits[p], self.cats[p]
            if clip_before:
                cut = min(e, a) - s
                wcut = min(s + w, a) - s
            else:
                cut = e - max(s, b)
                wcut = (s + w) - max(s, b)
            if cut > 0:
                cov[c] -= cut
            if wcut > 0:
                cov[0] -= wcut
        return cov, lo, hi

    def cell(self, a: int, b: int) -> Cell:
        if not self.rows or b <= self.starts[0] or a >= self.ends[-1]:
            return EMPTY
        cov, lo, hi = self.coverage(a, b)
        busy = cov[1] + cov[2] + cov[3]
        if busy <= 0:
            return Cell(0.0, 0, False, -1, True)
        cat = max((1, 2, 3), key=lambda c: cov[c])
        # the event standing for the cell: the one covering its middle, else the longest touched one
        mid = (a + b) // 2
        p = bisect_right(self.starts, mid) - 1
        if not (0 <= p < len(self.rows) and self.ends[p] > mid and self.cats[p] == cat):
            p = max(range(lo, min(hi, lo + 8)), key=lambda q: min(self.ends[q], b) - max(self.starts[q], a))
        return Cell(min(1.0, busy / (b - a)), cat, cov[0] * 2 > busy, self.rows[p], True)

    def cells(self, t_start: int, ns_per_cell: float, width: int) -> list[Cell]:
        out = []
        for x in range(width):
            a = t_start + int(x * ns_per_cell)
            b = t_start + int((x + 1) * ns_per_cell)
            out.append(self.cell(a, max(b, a + 1)))
        return out
