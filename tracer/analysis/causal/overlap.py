"""Communication/computation overlap: how much of each op's communication ran while its rank computed.

An op communicates from the arrival it needed (its own, plus its wait: waits/wait_states.py) to its end. A rank's host is
blocked in a synchronous op's call and in wait() calls (causal/critical_path.py's host intervals); a blocking the trace
cannot see (DDP's reducer waiting for its buckets inside backward(), in C++) looks like compute, so only what the
trace proves counts as overlap: the communication up to the host's last call of an op before the op ended (the
host was running Python then), less the time it was blocked meanwhile. A synchronous op never overlaps (its host
is blocked in it); DDP's bucket all-reduces do for as long as backward() went on issuing buckets. Per rank, the
totals are over the union of its ops' intervals (concurrent ops counted once). What overlaps is hidden behind
compute; what does not can be on the critical path."""

from __future__ import annotations

from array import array

import numpy as np

from ...data.table.columns import filled, order_by
from ...data.table import NONE, EventTable
from .critical_path import ISSUE, WAIT
from ..core.results import Overlap


def _union(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of the intervals [lo, hi) (wait_states.merged's: touching ones joined, empty ones dropped) as disjoint
    sorted (starts, ends) and the lengths before each, in numpy."""
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    order = order_by(lo, hi)
    lo, hi = lo[order], hi[order]
    if not len(lo):
        return lo, hi, np.zeros(1, np.int64)
    reach = np.maximum.accumulate(hi)
    new = np.ones(len(lo), bool)
    new[1:] = lo[1:] > reach[:-1]
    first = np.flatnonzero(new)
    starts = lo[first]
    ends = reach[np.append(first[1:] - 1, len(lo) - 1)]
    return starts, ends, np.concatenate(([0], np.cumsum(ends - starts)))


def _below(union, x: np.ndarray) -> np.ndarray:
    """How much of the union lies before each instant x."""
    starts, ends, pre = union
    j = np.searchsorted(starts, x, side="right") - 1  # the last interval starting at or before x
    jj = np.maximum(j, 0)
    inside = np.minimum(x, ends[jj] if len(ends) else x) - (starts[jj] if len(starts) else x)
    return np.where(j >= 0, pre[jj] + np.maximum(inside, 0), 0)


def _covered(union, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How much of each [a, b] the union covers (0 where b <= a)."""
    return np.where(b > a, _below(union, b) - _below(union, a), 0)


def overlaps(t: EventTable, walker, event_wait_ns) -> tuple[array, list[Overlap]]:
    """Event row -> the ns of its communication proven to overlap its rank's compute (array of "q"), and each rank's
    totals. In numpy, rank by rank."""
    out = filled("q", len(t))
    out_np = np.frombuffer(out, np.int64)
    fin = np.frombuffer(walker.fin, np.int64)
    start = np.frombuffer(t.start_ns, np.int64)
    async_op = np.frombuffer(t.async_op, np.uint8)
    wait = np.frombuffer(event_wait_ns, np.int64)
    ranks = []
    for r, host in sorted(walker.hosts.items()):
        a, b = np.frombuffer(host.a, np.int64), np.frombuffer(host.b, np.int64)
        row, kind = np.frombuffer(host.row, np.int64), np.frombuffer(host.kind, np.uint8)
        not_issue = kind != ISSUE
        blocked = _union(a[not_issue], b[not_issue])
        f, c0 = fin[row], start[row] + wait[row]
        comm = (kind != WAIT) & (f != NONE) & (f > c0)
        row, f, c0 = row[comm], f[comm], c0[comm]
        comm_ns = int(_union(c0, f)[2][-1])
        is_async = async_op[row] != 0  # (a synchronous op's host is blocked throughout)
        row, f, c0 = row[is_async], f[is_async], c0[is_async]
        k = np.searchsorted(a, f, side="left") - 1  # the host's last call before the op ended
        last = np.where(k >= 0, a[np.maximum(k, 0)] if len(a) else c0, c0)
        hid = last > c0
        row, c0, last = row[hid], c0[hid], last[hid]
        out_np[row] = last - c0 - _covered(blocked, c0, last)
        if comm_ns:
            h_lo, h_hi, _ = _union(c0, last)
            hidden = int(np.sum(h_hi - h_lo - _covered(blocked, h_lo, h_hi)))
            ranks.append(Overlap(r, comm_ns, hidden))
    return out, ranks


__all__ = ["overlaps"]
