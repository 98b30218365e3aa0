"""Level of detail for the timeline: what one character cell of a rank's lane stands for.

A cell may cover a fraction of one event or a million of them. Per rank we keep prefix sums of the time
spent in each category (collective, barrier, send/recv) and in the waiting part, so the time any window holds
of each costs one bisect per cell boundary, whatever the number of events inside: a cell standing for thousands
of short collectives still shows that the rank was communicating there, and how much, rather than averaging
it away. Lanes are built in numpy (every rank at once, `Lane.build_all`), not a Python loop per event.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from functools import partial
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from disttrace.tracer.data.table.columns import running_max_by, stable_order, typecode
from disttrace.tracer.data.table import NONE, EventTable

N_CATS = 4  # index 0: waiting; 1 collective, 2 barrier, 3 p2p (no event: compute)
LANE_COLUMNS = ("present", "bounds", "rows", "starts", "ends", "cats", "maxend", "cum0", "cum1", "cum2", "cum3")
_LOOK_BACK = 64  # events looked back for async ops still running (beyond that, a long async op is approximate)


class Cell(NamedTuple):
    """What a timeline cell shows: busy fraction, dominant category, whether waiting dominates, and the event
    row that stands for the cell (for its colour and for clicks). A tuple: a frame makes thousands of them."""

    busy: float
    cat: int
    waiting: bool
    row: int  # -1 when no event touches the cell
    inside: bool  # between the rank's first and last event (a compute gap rather than nothing)


_new_cell = partial(tuple.__new__, Cell)  # Cell from a tuple, without a Python-level __new__ call


EMPTY = Cell(0.0, 0, False, -1, False)


class Lane:
    """One rank's events in start order with prefix sums for window coverage in O(log n)."""

    __slots__ = ("rows", "starts", "ends", "cats", "cum", "maxend")

    def __init__(self, rows, starts, ends, cats, cum, maxend=None):
        self.rows = rows
        self.starts = starts
        self.ends = ends
        self.cats = cats
        # cum[c][i]: time in category c (c=0: waiting) over events [0, i), plus a constant of the lane (build_all:
        # the lanes before it), so that only differences mean anything; event i's wait is cum[0][i + 1] -
        # cum[0][i] (not kept apart: 8 bytes an event)
        self.cum = cum
        # maxend[i]: latest end among events [0, i). Async ops overlap later ones on the same rank: when an event
        # before j still runs at t, the prefix sum at j over-counts it, and maxend says to look back for it.
        self.maxend = array("q", accumulate(ends, max, initial=0)) if maxend is None else maxend

    @classmethod
    def build_all(cls, table: EventTable, cats_of_row, wait_ns, t_end: int) -> dict[int, "Lane"]:
        """Every rank's lane, by rank (a rank with a file and no event gets an empty one). `cats_of_row`: each row's
        category (a buffer of bytes), `wait_ns`: each row's wait."""
        return cls.from_columns(table, cls.columns_all(table, cats_of_row, wait_ns, t_end))

    @staticmethod
    def columns_all(table: EventTable, cats_of_row, wait_ns, t_end: int) -> dict:
        """Every lane's columns, one after another in rank order (LANE_COLUMNS: what from_columns makes the lanes
        of, and what model/saved_lanes.py keeps beside the trace). In numpy, every rank at once: the columns are
        gathered in rank order, and each lane's are slices of them."""
        rank = np.frombuffer(table.rank, np.int32)
        order = stable_order(rank)  # (table order is start order: kept per rank)
        counts = np.bincount(rank) if len(rank) else np.zeros(0, np.int64)
        present = np.flatnonzero(counts)
        counts = counts[present]
        bounds = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        # (np.take with intp indices: fancy indexing with int32 ones converts them first)
        starts, ends = (np.take(np.frombuffer(c, np.int64), order) for c in (table.start_ns, table.end_ns))
        if (unfinished := ends == NONE).any():  # never finished: it occupies the rest of the trace (the hang)
            ends[unfinished] = np.maximum(t_end, starts[unfinished])
        cats = np.take(np.frombuffer(cats_of_row, np.uint8), order)
        durs = ends - starts
        waits = np.frombuffer(wait_ns, np.int64)
        waits = np.minimum(np.take(waits, order) if waits.any() else 0, durs)  # (none yet: no gather)
        # each category's sums run through all the lanes one after another, and lane k takes its stretch
        # [bounds[k], bounds[k + 1]] of them: its own prefix sums plus the lanes' before it, a constant that the
        # lane's differences (all that is read of them) cancel
        cum = [_prefix_all(v) for v in (waits, *(np.where(cats == c, durs, 0) for c in (1, 2, 3)))]
        # maxend: each lane's running maximum of its ends from 0, one after another (lane k's at [bounds[k] + k,
        # bounds[k + 1] + k + 1)); its leading slot filled with the smallest end, so as not to widen the values'
        # span (a lane's 0 would, below epoch times), then set to the 0 it stands for
        heads = bounds[:-1] + np.arange(len(present))
        padded = np.empty(len(order) + len(present), np.int64)
        padded[np.arange(len(order)) + np.repeat(np.arange(len(present)), counts) + 1] = ends
        padded[heads] = ends.min() if len(ends) else 0
        maxend = running_max_by(padded, heads)
        np.maximum(maxend, 0, out=maxend)
        maxend[heads] = 0
        cols = {"present": present.astype(np.int32), "bounds": bounds, "rows": order.astype(np.int32),
                "starts": starts, "ends": ends, "cats": cats, "maxend": maxend}
        cols.update((f"cum{c}", v) for c, v in enumerate(cum))
        return {name: memoryview(cols[name]) for name in LANE_COLUMNS}

    @classmethod
    def from_columns(cls, table: EventTable, cols: dict) -> dict[int, "Lane"]:
        """The lanes over columns_all's columns (memoryviews, as quick to index as arrays; no copy per lane)."""
        rows, starts, ends, cats, maxend = (cols[k] for k in ("rows", "starts", "ends", "cats", "maxend"))
        cum = [cols[f"cum{c}"] for c in range(N_CATS)]
        bounds = cols["bounds"]
        lanes = {}
        for k, r in enumerate(cols["present"].tolist()):
            lo, hi = bounds[k], bounds[k + 1]
            lanes[r] = cls(rows[lo:hi], starts[lo:hi], ends[lo:hi], cats[lo:hi],
                           [c[lo:hi + 1] for c in cum], maxend[lo + k:hi + k + 1])
        for r in table.ranks:
            if r not in lanes:
                lanes[r] = cls(array("i"), array("q"), array("q"), b"", [array("q", [0])] * N_CATS, array("q", [0]))
        return lanes

    def with_waits(self, wait_ns) -> "Lane":
        """The same lane with other waits (the analysis arrived): everything else is shared."""
        durs = np.frombuffer(self.ends, np.int64) - np.frombuffer(self.starts, np.int64)
        waits = np.frombuffer(wait_ns, np.int64)[np.frombuffer(self.rows, np.int32)]
        return Lane(self.rows, self.starts, self.ends, self.cats, [_prefix_all(np.minimum(waits, durs)), *self.cum[1:]],
                    self.maxend)

    def before(self, t: int) -> tuple[int, int, int, int, int]:
        """Time in (waiting, collective, barrier, p2p) before time t, each plus the lane's constant (cum), and the
        index of the first event starting at or after t."""
        j = bisect_left(self.starts, t)
        cum = self.cum
        f = [cum[0][j], cum[1][j], cum[2][j], cum[3][j]]
        q, maxend, ends = j - 1, self.maxend, self.ends
        while q >= 0 and maxend[q + 1] > t and q > j - _LOOK_BACK:
            over = ends[q] - t
            if over > 0:  # event q straddles t: take off its part after t
                f[self.cats[q]] -= over
                wover = self.starts[q] + cum[0][q + 1] - cum[0][q] - t
                if wover > 0:
                    f[0] -= wover
            q -= 1
        return f[0], f[1], f[2], f[3], j

    def coverage(self, a: int, b: int) -> list[int]:
        """Time per category inside [a, b) (index 0: waiting)."""
        fa, fb = self.before(a), self.before(b)
        return [fb[c] - fa[c] for c in range(N_CATS)]

    def cell(self, a: int, b: int) -> Cell:
        return self.cells(a, b - a, 1)[0]

    def cells(self, t_start: int, ns_per_cell: float, width: int) -> list[Cell]:
        """The width cells of ns_per_cell each from t_start."""
        return self.columns(t_start, ns_per_cell, 0, width)

    def _sums(self, origin: int, ns_per_cell: float, first_cell: int, width: int):
        """Boundaries of cells first_cell .. first_cell + width - 1 (strictly increasing: below 1 ns a cell, int()
        repeats them), the first event at or after each, and the prefix sums (waiting, collective, barrier, p2p)
        there, as int64 arrays; where a boundary falls inside an earlier event still running, that event's part
        after it is taken off (before()'s look-back, for every boundary at once: this is the hot part of drawing
        a lane; in numpy, quicker than the maps of C functions it replaced)."""
        starts, ends = np.frombuffer(self.starts, np.int64), np.frombuffer(self.ends, np.int64)
        maxend, cum = np.frombuffer(self.maxend, np.int64), [np.frombuffer(c, np.int64) for c in self.cum]
        bounds = origin + (np.arange(first_cell, first_cell + width + 1) * ns_per_cell).astype(np.int64)
        if ns_per_cell < 1:  # each at least one past the one before
            x = np.arange(width + 1)
            bounds = np.maximum.accumulate(bounds - x) + x
        js = np.searchsorted(starts, bounds, "left")
        f = [c[js] for c in cum]
        inside = np.flatnonzero(maxend[js] > bounds)
        if len(inside):
            # events p looked back at for each such boundary t: from js - 1 down while maxend[p + 1] > t (maxend
            # only grows: down to the first event whose maxend passes t), at most _LOOK_BACK of them
            t, j = bounds[inside], js[inside]
            lo = np.maximum(np.maximum(np.searchsorted(maxend, t, "right") - 1, j - _LOOK_BACK + 1), 0)
            n = j - lo
            which = np.repeat(np.arange(len(inside)), n)  # the boundary of each (boundary, event) pair
            p = np.repeat(j - 1, n) - (np.arange(len(which)) - np.repeat(np.cumsum(n) - n, n))
            t = t[which]
            over = np.maximum(ends[p] - t, 0)
            cats = np.frombuffer(self.cats, np.uint8)[p]
            for c in (1, 2, 3):
                mine = cats == c
                f[c][inside] -= np.bincount(which[mine], over[mine], len(inside)).astype(np.int64)
            wover = np.where(over > 0, np.maximum(starts[p] + cum[0][p + 1] - cum[0][p] - t, 0), 0)
            f[0][inside] -= np.bincount(which, wover, len(inside)).astype(np.int64)
        return bounds, js, f[0], f[1], f[2], f[3]

    def _row_at(self, p: int, a: int) -> int:
        """Index of the event standing for a cell starting at a whose last event starting before its end is p:
        p itself unless it ended before a (an async op still running under later ones: look back for it)."""
        ends = self.ends
        if ends[p] <= a:
            q = p - 1
            while q > p - 16 and q >= 0 and ends[q] <= a:
                q -= 1
            if q >= 0 and ends[q] > a:
                return q
        return p

    def columns(self, origin: int, ns_per_cell: float, first_cell: int, width: int) -> list[Cell]:
        """Cells first_cell .. first_cell + width - 1 of the grid whose cell x covers [origin + int(x * ns_per_cell),
        origin + int((x + 1) * ns_per_cell)): cells computed apart from each other are the same cells, so a
        pan reuses the ones already drawn."""
        if not self.rows:
            return [EMPTY] * width
        rows = self.rows
        first, last = self.starts[0], self.maxend[-1]
        bounds, js, fw, f1, f2, f3 = (a.tolist() for a in self._sums(origin, ns_per_cell, first_cell, width))
        out = []
        inside = Cell(0.0, 0, False, -1, True)
        for x in range(width):
            a, b = bounds[x], bounds[x + 1]
            if b <= first or a >= last:
                out.append(EMPTY)
                continue
            d1, d2, d3 = f1[x + 1] - f1[x], f2[x + 1] - f2[x], f3[x + 1] - f3[x]
            busy = d1 + d2 + d3
            if busy <= 0:
                out.append(inside)
                continue
            cat = 1 if d1 >= d2 and d1 >= d3 else (2 if d2 >= d3 else 3)
            p = self._row_at(js[x + 1] - 1, a)  # the last event starting before b, or an async op under it
            out.append(_new_cell((min(1.0, busy / (b - a)), cat, (fw[x + 1] - fw[x]) * 2 > busy, rows[p], True)))
        return out

    def glyph_keys(self, origin: int, ns_per_cell: float, first_cell: int, width: int, op_codes) -> list[int]:
        """What `columns` says of the same cells, as one int a cell for the timeline to draw: op_codes[row] * 18 +
        waiting * 9 + level (level 1..8: busy eighths, 8 from 80% busy), GAP_KEY for a compute gap between the
        rank's events, BLANK_KEY before its first or after its last. In numpy, Python only for the cells whose
        event needs looking back for."""
        if not self.rows:
            return [BLANK_KEY] * width
        bounds, js, fw, f1, f2, f3 = self._sums(origin, ns_per_cell, first_cell, width)
        busy = np.diff(f1) + np.diff(f2) + np.diff(f3)
        levels = np.searchsorted(_LEVEL_AT, busy / np.diff(bounds), "right")  # level - 1
        waiting = 2 * np.diff(fw) > busy  # waiting dominates the busy time
        p = js[1:] - 1  # the last event starting before each cell's end
        # where that event ended before the cell began and the cell is busy: an async op still running under it
        under = np.flatnonzero((np.frombuffer(self.ends, np.int64)[p] <= bounds[:-1]) & (busy > 0) & (p >= 0))
        if len(under):
            p[under] = [self._row_at(q, a) for q, a in zip(p[under].tolist(), bounds[under].tolist())]
        rows = np.frombuffer(self.rows, np.int32)[p]  # (p -1: the last row, as for any cell not busy, set below)
        keys = np.frombuffer(op_codes, typecode(op_codes))[rows].astype(np.int64) * 18 + waiting * 9 + levels + 1
        keys[busy <= 0] = GAP_KEY
        keys = keys.tolist()
        # before the rank's first event and after its last: nothing
        lo = int(np.searchsorted(bounds, self.starts[0], "right")) - 1
        hi = int(np.searchsorted(bounds, self.maxend[-1], "left"))
        if lo > 0:
            keys[:lo] = [BLANK_KEY] * min(lo, width)
        if hi < width:
            keys[hi:] = [BLANK_KEY] * (width - hi)
        return keys


GAP_KEY = -1
"""glyph_keys' value for a compute gap between a rank's events."""
BLANK_KEY = -2
"""glyph_keys' value for a cell before a rank's first event or after its last."""
_LEVEL_AT = np.array([(level + 0.001) / 8 for level in range(1, 7)] + [0.8])
"""Busy fractions at which a cell's level (1..8) steps up: the level is int(busy * 8 + 0.999) clamped to 1..7, or
8 from 80% busy (searchsorted to the right over these, plus one)."""


def _prefix_all(values) -> memoryview:
    """The prefix sums of `values` from 0 (len + 1 of them)."""
    out = np.zeros(len(values) + 1, np.int64)
    np.cumsum(values, out=out[1:])
    return memoryview(out)


