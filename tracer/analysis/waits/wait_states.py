"""Wait states (Scalasca's patterns in PyTorch's words): how long each rank waited inside an op for a late peer.

A wait is computed from arrivals (start_ns), never from whether the rank called wait(): DDP's reducer, FSDP2 and
functional collectives block inside C++ where no Python wait() shows, yet the time from a rank's arrival to the
arrival it needed is spent inside the op all the same (docs/ANALYSIS.md, "Arrival, end, wait"). Each wait is bounded by
the op's own end on that rank (an op that was over before a peer arrived did not wait for it):

  Wait at N×N      all_reduce, all_gather, reduce_scatter, all_to_all, barrier: every rank but the last arrival
                   waits min(last arrival - own arrival, own end - own arrival)
  Late Broadcast   broadcast, scatter: a rank waits for the root, and for the last of the op's other ranks
                   to arrive before its own end (the backends relay a broadcast: gloo's tree, NCCL's ring);
                   the instance's culprit is the rank whose arrival held up the most waiting
  Early Reduce     reduce, gather: the root arriving before the last sender waits for it
  Late Sender      a recv posted before its send began waits for the sender
  Late Receiver    a send that is still running when its recv is posted waited for the receiver (a send that was
                   over before, buffered by the backend, did not; "before" by more than the two ranks' clocks can
                   be off: on skewed clocks a send that waited for its recv is seen ending just before it began)

A rank's total is the length of the union of its ops' wait intervals [arrival, arrival + wait]: async ops run
concurrently (DDP's buckets are all late by the same straggler), and their waits overlap in time; a sum would
count the same interval twice.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import TYPE_CHECKING

from ...data.table.columns import filled, order_by, packed_keys, repeat_each, run_starts, running_count, running_max_by
from ...data.table import NONE, EventTable
from ..core.matching import finished_at
from ..core.results import EARLY_REDUCE, LATE_BROADCAST, WAIT_BARRIER, WAIT_NXN

if TYPE_CHECKING:
    from ..core.tables import CollectiveTable, P2PTable

WAIT_KIND = {
    "all_reduce": WAIT_NXN, "all_gather": WAIT_NXN, "reduce_scatter": WAIT_NXN, "all_to_all": WAIT_NXN,
    "barrier": WAIT_BARRIER,
    "broadcast": LATE_BROADCAST, "scatter": LATE_BROADCAST,
    "reduce": EARLY_REDUCE, "gather": EARLY_REDUCE,
}


def blocked_in(t: EventTable, i: int, a: int, b: int) -> int:
    """How long row i's rank was blocked in it within [a, b] (ns): in the call for a synchronous op, inside wait()
    for an async one (0 if it never called wait()). An op that never finished blocks to the end of [a, b]. (The
    pipeline's bubble is this time in communication; waits are not: see the module docstring.)"""
    if b <= a:
        return 0
    if t.async_op[i]:
        lo, hi = t.wait_start_ns[i], t.wait_end_ns[i]
        if lo == NONE:
            return 0
    else:
        lo, hi = t.start_ns[i], t.end_ns[i]
    if hi == NONE:
        hi = b
    lo, hi = max(lo, a), min(hi, b)
    return hi - lo if hi > lo else 0


def blocked_intervals(t: EventTable) -> tuple:
    """blocked_in's rule for every row at once, in numpy: (lo, hi, never), where row i blocked from lo[i] to hi[i]
    (NONE: it never ended, so to the end of any window), and never[i]: an async op whose wait() was never called,
    which blocks nothing."""
    import numpy as np

    start, end = np.frombuffer(t.start_ns, np.int64), np.frombuffer(t.end_ns, np.int64)
    is_async = np.frombuffer(t.async_op, np.uint8) != 0
    lo = np.where(is_async, np.frombuffer(t.wait_start_ns, np.int64), start)
    hi = np.where(is_async, np.frombuffer(t.wait_end_ns, np.int64), end)
    return lo, hi, is_async & (lo == NONE)


def _until(start: int, end: int, needed: int) -> int:
    """Wait of an op that arrived at `start`, ended at `end` (NONE: never) and needed a peer arriving at `needed`."""
    if needed <= start:
        return 0
    if end != NONE and end < needed:
        return end - start if end > start else 0
    return needed - start


def collective_waits(kind: str, ranks: list[int], starts: list[int], ends: list[int], root: int | None
                     ) -> tuple[list[int], int | None]:
    """Per-rank waits of one instance (in the order of `ranks`) and the rank that caused them (None: nobody)."""
    if kind == WAIT_NXN or kind == WAIT_BARRIER:
        latest = max(starts)
        return [_until(s, e, latest) for s, e in zip(starts, ends)], ranks[starts.index(latest)]
    waits = [0] * len(ranks)
    if root is None or root not in ranks:
        return waits, None
    k_root = ranks.index(root)
    if kind == LATE_BROADCAST:  # each rank waits for the last of the op's ranks to arrive before its own end
        by_arrival = sorted(zip(starts, ranks))
        arrivals = [a for a, _ in by_arrival]
        caused = dict.fromkeys(ranks, 0)
        for k, (s, e) in enumerate(zip(starts, ends)):
            j = len(arrivals) if e == NONE else bisect_right(arrivals, e)
            needed, who = by_arrival[j - 1] if j else (starts[k_root], root)
            if k == k_root and who == root:
                continue
            waits[k] = _until(s, e, max(needed, starts[k_root]))
            caused[who if needed >= starts[k_root] else root] += waits[k]
        culprit = max(caused, key=lambda r: (caused[r], r == root))
        return waits, culprit if caused[culprit] else root
    # EARLY_REDUCE: the root waits for its last sender
    others = [(s, r) for k, (s, r) in enumerate(zip(starts, ranks)) if k != k_root]
    if not others:
        return waits, None
    latest, culprit = max(others)
    waits[k_root] = _until(starts[k_root], ends[k_root], latest)
    return waits, culprit


def p2p_waits(t: EventTable, send: int, recv: int) -> tuple[int, int]:
    """(late sender: the receiver's wait, late receiver: the sender's wait) of one matched message."""
    ss, rs = t.start_ns[send], t.start_ns[recv]
    if ss > rs:
        return _until(rs, finished_at(t, recv), ss), 0
    if rs > ss:
        e = finished_at(t, send)
        if e != NONE and e <= rs - _uncertainty(t, t.rank[send]) - _uncertainty(t, t.rank[recv]):
            return 0, 0  # the send was over before the recv was posted: buffered, it waited for nobody
        return 0, _until(ss, e, rs)
    return 0, 0


def _uncertainty(t: EventTable, rank: int) -> int:
    info = t.ranks.get(rank)
    return max(0, info.clock_uncertainty_ns) if info is not None else 0


def event_waits(t: EventTable, collectives: CollectiveTable, p2p: P2PTable) -> array:
    """Event row -> its wait (ns, 0: none): a collective's per-rank wait, a message's Late Sender wait on its recv
    and Late Receiver wait on its send (what the viewer draws as the waiting part of each event)."""
    import numpy as np

    wait_ns = filled("q", len(t))
    out = np.frombuffer(wait_ns, np.int64)  # (in numpy, not a Python loop over every collective row and
    #                                          message; a row is in one instance or one side of one message)
    for rows, waits, ok in ((collectives.rows, collectives.waits, None), (p2p.send, p2p.late_receiver_ns, True),
                            (p2p.recv, p2p.late_sender_ns, True)):
        rows, waits = np.asarray(rows), np.asarray(waits)
        put = (waits > 0) & (rows != NONE) if ok else waits > 0
        out[rows[put]] = waits[put]
    return wait_ns


def merged(intervals) -> list[tuple[int, int]]:
    """The union of [a, b) intervals as disjoint ones in time order (touching ones joined, empty ones dropped):
    a rank's waits (union_ns), its blocked and communicating time (causal/overlap.py), a path's stretches on a rank (the
    viewer's marks)."""
    out: list[tuple[int, int]] = []
    cur_a = cur_b = None
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                out.append((cur_a, cur_b))
            cur_a, cur_b = a, b
        elif b > cur_b:
            cur_b = b
    if cur_b is not None:
        out.append((cur_a, cur_b))
    return out


def union_ns(intervals: list[tuple[int, int]]) -> int:
    """Total length of the union of [a, b) intervals."""
    return sum(b - a for a, b in merged(intervals))


def union_by(keys: list, a, b) -> tuple[list, "object"]:
    """The union's length of the [a, b) intervals of each distinct key, in numpy: `keys` are integer columns (a
    key is a row's tuple of them), `a` and `b` the intervals' columns. Returns (the key columns, one row per
    distinct key in sorted order; their lengths as int64). What union_ns does for one key, for millions of waits at
    once without a tuple and a list per wait (a trace has about as many wait records as events)."""
    import numpy as np

    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    keys = [np.asarray(k, dtype=np.int64) for k in keys]
    n = len(a)
    if n == 0:
        return [k[:0] for k in keys], np.zeros(0, dtype=np.int64)
    order = _by_key_then_start(keys, a)
    a, b, keys = a[order], b[order], [k[order] for k in keys]
    new = run_starts(*keys)
    starts = np.flatnonzero(new)
    # each interval adds what lies past the reach of the key's earlier ones (they all start no later)
    part = np.maximum(b - np.maximum(a, reach_before(b, new)), 0)
    return [k[starts] for k in keys], np.add.reduceat(part, starts)


def _by_key_then_start(keys: list, a):
    """The order of rows by keys (the first most significant), then by start a. Where the keys and the starts pack
    into one int64, one unstable sort of it (cheaper than np.lexsort's sort of each key): rows alike in both may
    come in any order, since their union's length is the same."""
    import numpy as np

    packed = packed_keys([*keys, a])
    return np.argsort(packed[0]) if len(packed) == 1 else order_by(*keys, a)


def reach_before(b, new):
    """Per row, the largest of `b` over the earlier rows of its group (int64's minimum for a group's first row,
    and where `b` holds only that minimum before it: a row left out); a group is a run of rows that begins where
    `new` is True (new[0] must be). A running maximum that starts afresh at each group (columns.running_max_by),
    shifted by a row."""
    import numpy as np

    n = len(b)
    low = np.iinfo(np.int64).min
    b = np.asarray(b, dtype=np.int64)
    before = np.full(n, low, dtype=np.int64)
    starts = np.flatnonzero(new)
    counted = b != low
    if not counted.any():
        return before
    # the rows left out take the least counted value instead (it never wins), not int64's minimum (whose span
    # the running maximum could not lift over); a row with none counted before it in its group gets low
    values = b if counted.all() else np.where(counted, b, b[counted].min())
    run = running_max_by(values, starts)
    before[1:] = np.where(new[1:], low, run[:-1])
    if not counted.all():
        seen = running_count(counted) - counted
        seen -= repeat_each(seen[starts], np.diff(np.append(starts, n)))
        before[seen == 0] = low
    return before
