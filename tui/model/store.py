"""Indexes over an EventTable and its Analysis that the viewer needs: per-rank rows in time order, the
order of collectives and the lanes the timeline draws from (the wait part of every event is the analysis').

No Textual here (and no torch): everything is plain ints and arrays so it can be unit-tested and built
in a worker thread.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import numpy as np

from disttrace.tracer.analysis import pending_analysis
from disttrace.tracer.analysis.core.results import Analysis
from disttrace.tracer.data.table.columns import typecode
from disttrace.tracer.data.table import NONE, P2P_OPS, EventTable, gc_paused

from . import saved_lanes
from .lod import Lane

# Categories the timeline colours by (compute gaps are the absence of an event).
CAT_COLLECTIVE = 1
CAT_BARRIER = 2
CAT_P2P = 3


def category(op: str) -> int:
    if op == "barrier":
        return CAT_BARRIER
    if op in P2P_OPS:
        return CAT_P2P
    return CAT_COLLECTIVE


@dataclass
class RankRow:
    """One line of the timeline: a global rank, its host, and its lane."""

    rank: int
    host: str
    lane: Lane


class TraceStore:
    """The viewer's read-only model of one trace: table + analysis + indexes. Built without an analysis, it shows
    the events at once (`analysed` False) and takes the analysis later with `adopt`."""

    def __init__(self, table: EventTable, analysis: Analysis | None, progress=None):
        # a big table holds millions of objects: a garbage collection pass in the middle of building these
        # arrays would walk all of them (seconds); nothing built here has reference cycles
        with gc_paused():
            self._build(table, analysis, progress)

    def with_analysis(self, analysis: Analysis) -> "TraceStore":
        """A store of the same table that has the analysis. The lanes keep their rows and category sums and only
        take the waits: quicker than building them again, and no long stretch of C code holding the GIL (a big
        sort) while the UI thread waits to answer a key."""
        new = object.__new__(TraceStore)
        new.__dict__.update(self.__dict__)
        new._take_analysis(analysis)
        lanes = {rr.rank: rr.lane for rr in self.rows}
        if self.kept_columns is not None:  # the lanes as kept (mapped): the built ones go with this store
            new.lane_columns = self.kept_columns
            lanes = Lane.from_columns(self.table, self.kept_columns)
        new.rows = [RankRow(rr.rank, rr.host, lanes[rr.rank].with_waits(new.wait_ns)) for rr in self.rows]
        return new

    def keep_lanes(self) -> None:
        """Keep the bare store's lanes beside the trace's store for the next open (model/saved_lanes.py), and
        read them back mapped, as a re-open does, for the analysed store (with_analysis): built, they are
        all in this process's memory; mapped, only the pages a frame reads come in."""
        if not self.analysed and not self.lanes_kept:
            saved_lanes.save(self.table, self.t1, self.lane_columns)
            self.kept_columns = saved_lanes.load(self.table, self.t1)
            self.lanes_kept = True

    def adopt(self, other: "TraceStore") -> None:
        """Take over everything another store of the same table holds (its analysis, waits, lanes): one
        assignment on the UI thread, so widgets never see half of it."""
        self.__dict__.update(other.__dict__)

    def _build(self, table: EventTable, analysis: Analysis | None, progress) -> None:
        self.table = table
        n = len(table)
        self.n_events = n
        starts = np.frombuffer(table.start_ns, np.int64) if n else np.zeros(1, np.int64)
        ends = np.frombuffer(table.end_ns, np.int64) if n else np.zeros(1, np.int64)
        self.t0 = int(starts.min()) if n else 0
        self.t1 = max(self.t0 + 1, int(ends.max()), int(starts.max()))
        self._take_analysis(analysis)
        if progress:
            progress(0.2, "indexing ranks")
        # the bare store's lanes as a previous open kept them, else built (and kept by keep_lanes)
        cols = saved_lanes.load(table, self.t1) if analysis is None else None
        self.lanes_kept = cols is not None
        self.kept_columns: dict | None = None  # the lanes just kept, read back (keep_lanes)
        if cols is None:
            cat_of_code = np.array([category(op) for op in table.op.values], np.uint8)  # op is dictionary-encoded
            cats = cat_of_code[np.frombuffer(table.op.codes, typecode(table.op.codes))]
            cols = Lane.columns_all(table, cats, self.wait_ns, self.t1)
        self.lane_columns = cols
        lanes = Lane.from_columns(table, cols)
        self.rows: list[RankRow] = []
        for r in sorted(lanes):
            info = table.ranks.get(r)
            self.rows.append(RankRow(r, info.host if info else "", lanes[r]))
        self.rank_index = {rr.rank: k for k, rr in enumerate(self.rows)}

    def _take_analysis(self, analysis: Analysis | None) -> None:
        """The analysis, the wait part of every event, and the order of the collectives."""
        self.analysed = analysis is not None
        if analysis is None:
            analysis = pending_analysis(self.table)
        self.analysis = analysis
        self.wait_ns = analysis.event_wait_ns  # wait part of each event (the time it spent waiting for a late peer)
        # collectives in order of their first arrival
        colls = analysis.collectives
        first = np.frombuffer(colls.first_starts(), np.int64)
        order = np.argsort(first, kind="stable")
        self.coll_order = order.tolist()
        pos = np.empty(len(order), np.int64)
        pos[order] = np.arange(len(order))
        self.coll_pos = array("q", pos.tobytes())  # collective -> its place in coll_order
        self.coll_first_start = array("q", first[order].tobytes())

    # -- queries -------------------------------------------------------------------------------
    @property
    def span_ns(self) -> int:
        return self.t1 - self.t0

    def end_of(self, row: int) -> int:
        e = self.table.end_ns[row]
        return self.t1 if e == NONE else e

    def instance(self, row: int):
        """The CollectiveInstance of an event row, or None."""
        if row < 0:
            return None
        c = self.analysis.instance_of[row] if row < len(self.analysis.instance_of) else -1
        return self.analysis.collectives[c] if c >= 0 else None

    def p2p_match(self, row: int):
        if row < 0:
            return None
        m = self.analysis.p2p_of[row] if row < len(self.analysis.p2p_of) else -1
        return self.analysis.p2p[m] if m >= 0 else None

    def partner(self, row: int) -> int | None:
        """The matching recv of a send, or send of a recv."""
        m = self.p2p_match(row)
        if m is None:
            return None
        other = m.recv if row == m.send else m.send
        return other

    def same_collective_next(self, row: int, direction: int = 1) -> int | None:
        """The same collective on the next rank of its group (cycling), or None."""
        inst = self.instance(row)
        if inst is None or len(inst.events) < 2:
            return None
        ranks = sorted(inst.events)
        k = ranks.index(self.table.rank[row])
        return inst.events[ranks[(k + direction) % len(ranks)]]

    def event_at(self, rank_k: int, t_ns: int) -> int | None:
        """The event of the rank at display index rank_k covering time t (or the nearest one)."""
        lane = self.rows[rank_k].lane
        if not lane.rows:
            return None
        i = bisect_right(lane.starts, t_ns) - 1
        cands = [j for j in (i, i + 1) if 0 <= j < len(lane.rows)]
        if i >= 0 and lane.ends[i] >= t_ns:
            return lane.rows[i]
        best = min(cands, key=lambda j: min(abs(lane.starts[j] - t_ns), abs(lane.ends[j] - t_ns)))
        return lane.rows[best]

    def next_collective_row(self, row: int, direction: int) -> int | None:
        """First event (earliest arrival) of the next/previous collective after the one at row."""
        if not self.coll_order:
            return None
        c = self.analysis.instance_of[row] if row >= 0 else -1
        if c >= 0:
            k = self.coll_pos[c] + direction
        else:
            t = self.table.start_ns[row] if row >= 0 else -1
            k = bisect_right(self.coll_first_start, t) if direction > 0 else bisect_left(self.coll_first_start, t) - 1
        if not 0 <= k < len(self.coll_order):
            return None
        inst = self.analysis.collectives[self.coll_order[k]]
        return min(inst.events.values(), key=lambda i: (self.table.start_ns[i], i))
