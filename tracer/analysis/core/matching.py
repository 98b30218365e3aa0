"""Matching: collectives across the ranks of a group by (group, group_seq); sends with recvs by (src, dst, tag,
order). Pure bookkeeping over the columns, one pass each; what does not match is left for problems/checks.py."""

from __future__ import annotations

from array import array
from contextlib import contextmanager

from ...data.table.columns import as_int64, copy_of
from ...data.table import COLLECTIVE_OPS, NONE, EventTable
from .window import at_the_cut, collective_starts, live_end


class Instances:
    """Each collective instance's rows in table order, instances ordered by (group, group_seq): instance k's are
    rows[offsets[k]:offsets[k + 1]] (numpy int64 columns: a list per instance would be a list
    of every instance, built and then flattened again). Indexing or iterating gives an instance's rows as a list."""

    __slots__ = ("rows", "offsets")

    def __init__(self, rows, offsets) -> None:
        self.rows, self.offsets = rows, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError("instance index out of range")
        return self.rows[self.offsets[k]:self.offsets[k + 1]].tolist()

    def __iter__(self):
        return map(self.__getitem__, range(len(self)))


def group_collectives(t: EventTable) -> Instances:
    """Rows of each collective instance, instances ordered by (group, group_seq), rows in table order; in numpy.
    Of a black-box trace, only the instances within each group's window (window.py)."""
    import numpy as np

    is_coll = np.array([v in COLLECTIVE_OPS for v in t.op.values] + [False], bool)
    seq = np.frombuffer(t.group_seq, np.int64)
    rows = np.flatnonzero(is_coll[as_int64(t.op.codes)] & (seq >= 0))
    rows = rows[_in_window(t, rows)]
    key = (np.frombuffer(t.gid, np.int32)[rows].astype(np.int64) << 40) | seq[rows]
    order = np.argsort(key, kind="stable")  # (each instance's rows stay in table order)
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    offsets = np.concatenate(([0], cuts, [len(order)])) if len(order) else np.zeros(1, np.int64)
    return Instances(rows[order].astype(np.int64), offsets.astype(np.int64))


def _in_window(t: EventTable, rows):
    """Which collective `rows` are within their group's window (all of them, without rings)."""
    import numpy as np

    gid = np.frombuffer(t.gid, np.int32)[rows].astype(np.int64)
    seq = np.frombuffer(t.group_seq, np.int64)[rows]
    start = np.frombuffer(t.start_ns, np.int64)[rows]
    keep = np.ones(len(rows), bool)
    starts = collective_starts(t, rows, gid, seq, start)
    if starts:
        first = np.zeros(int(gid.max()) + 1, np.int64)
        for g, s in starts.items():
            first[g] = s
        keep = seq >= first[gid]
    fin = finished_column(t)
    cut = live_end(t, fin) if len(rows) else None
    if cut is not None:
        keep &= ~_at_the_cut(t, cut, gid, seq, start, fin[rows])
    return keep


def _at_the_cut(t: EventTable, cut, gid, seq, start, fin):
    """Which collective rows are in instances outside a live snapshot's end (window.at_the_cut), and in later
    instances of their group: each group's window ends at its first such instance."""
    import numpy as np

    from ...data.table.columns import order_by, run_starts

    order = order_by(gid, seq)
    g = gid[order]
    heads = np.flatnonzero(run_starts(g, seq[order]))
    members = np.array([len(t.groups[x].ranks) or 1 for x in g[heads].tolist()], np.int64)
    out, counts = at_the_cut(cut, order, heads, start, fin, members)
    # from a group's first instance at the cut on, every later one of that group too
    group_heads = np.flatnonzero(run_starts(g[heads]))
    past = np.maximum.accumulate(np.where(out, np.arange(len(out)), -1))  # (within each group: reset below)
    own = np.repeat(group_heads, np.diff(np.append(group_heads, len(heads))))
    out = past >= own
    cut_rows = np.zeros(len(order), bool)
    cut_rows[order] = np.repeat(out, counts)
    return cut_rows


def match_p2p(t: EventTable) -> list[tuple[int, int, int, int, int | None, int | None]]:
    """(src, dst, tag, order, send_row, recv_row) for every message; a missing side is None.

    The n-th send from src to dst with a tag pairs with the n-th recv at dst from src with that tag (MPI's
    non-overtaking rule, which gloo and NCCL follow). Rows of one rank are in issue order in the table."""
    sends: dict[tuple[int, int, int], list[int]] = {}
    recvs: dict[tuple[int, int, int], list[int]] = {}
    i = 0
    for op, r, p, tag in zip(t.op, t.rank, t.peer, t.tag):
        if op == "send":
            sends.setdefault((r, p, max(tag, 0)), []).append(i)
        elif op == "recv":
            recvs.setdefault((p, r, max(tag, 0)), []).append(i)
        i += 1
    out = []
    for key in sorted(sends.keys() | recvs.keys()):
        s, r = sends.get(key, ()), recvs.get(key, ())
        src, dst, tag = key
        for n in range(max(len(s), len(r))):
            out.append((src, dst, tag, n, s[n] if n < len(s) else None, r[n] if n < len(r) else None))
    return out


def last_event_of_rank(t: EventTable) -> dict[int, int]:
    """rank -> row of its last event (the wavefront of a hang); in numpy."""
    import numpy as np

    ranks = np.frombuffer(t.rank, np.int32)[::-1]
    present, first = np.unique(ranks, return_index=True)  # (first from the end: the last)
    return dict(zip(present.tolist(), (len(ranks) - 1 - first).tolist()))


def finished_at(t: EventTable, i: int) -> int:
    """When row i was done: end_ns, or for an async op whose completion is unknown, when its wait() returned (NONE:
    neither). The one home of the op-end rule: every op end the analysis and the exporter read comes from here or
    from `finished`."""
    e = t.end_ns[i]
    return e if e != NONE else t.wait_end_ns[i]


_KEPT_ENDS: dict[int, tuple] = {}  # id(table) -> (table, its finished_column or None), while ends_kept


@contextmanager
def ends_kept(t: EventTable):
    """Within it, finished_column(t) is made once: an analysis reads the ends of every row several times, each a copy of
    the end column (8 bytes a row, a copy that holds the GIL as its array grows)."""
    _KEPT_ENDS[id(t)] = (t, None)
    try:
        yield
    finally:
        _KEPT_ENDS.pop(id(t), None)


def finished_column(t: EventTable):
    """finished(t) as a read-only numpy int64 column (kept while ends_kept(t))."""
    import numpy as np

    kept = _KEPT_ENDS.get(id(t))
    if kept is not None and kept[0] is t and kept[1] is not None:
        return kept[1]
    col = np.frombuffer(finished(t), np.int64)
    col.flags.writeable = False
    if kept is not None and kept[0] is t:
        _KEPT_ENDS[id(t)] = (t, col)
    return col


def finished(t: EventTable, rows=None) -> array:
    """finished_at of each of rows (every row of the table by default), as an array of "q". The end column is copied
    in C and only the rows without an end go through finished_at (few: async ops whose completion is unknown, hangs),
    found in numpy (array.index makes a Python int of every row it passes)."""
    if rows is None:
        import numpy as np

        ends = copy_of(t.end_ns)
        for p in np.flatnonzero(np.frombuffer(ends, np.int64) == NONE).tolist():
            ends[p] = finished_at(t, p)
        return ends
    ends = array("q", map(t.end_ns.__getitem__, rows))
    p = -1
    try:
        while True:
            p = ends.index(NONE, p + 1)
            ends[p] = finished_at(t, rows[p])
    except ValueError:  # no row without an end is left
        return ends
