"""Communication/computation overlap: how much of each op's communication ran while its rank computed.

An op communicates from the arrival it needed (its own, plus its wait: waits.py) to its end. A rank's host is
blocked in a synchronous op's call and in wait() calls (critical_path.py's host intervals); a blocking the trace
cannot see (DDP's reducer waiting for its buckets inside backward(), in C++) looks like compute, so only what the
trace proves counts as overlap: the communication up to the host's last call of an op before the op ended (the
host was running Python then), less the time it was blocked meanwhile. A synchronous op never overlaps (its host
is blocked in it); DDP's bucket all-reduces do for as long as backward() went on issuing buckets. Per rank, the
totals are over the union of its ops' intervals (concurrent ops counted once). What overlaps is hidden behind
compute; what does not can be on the critical path."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right

from ..data.events import NONE, EventTable
from .critical_path import ISSUE, WAIT
from .model import Overlap
from .waits import merged


def _merged(intervals: list[tuple[int, int]]) -> tuple[list[int], list[int], list[int]]:
    """Disjoint sorted intervals (starts, ends) and the prefix sums of their lengths."""
    spans = merged(intervals)
    pre = [0]
    for a, b in spans:
        pre.append(pre[-1] + b - a)
    return [a for a, _ in spans], [b for _, b in spans], pre


def _covered(los: list[int], his: list[int], pre: list[int], a: int, b: int) -> int:
    """How much of [a, b] the disjoint intervals cover."""
    if b <= a or not los:
        return 0
    i, j = bisect_right(his, a), bisect_left(los, b)  # the intervals that may meet [a, b]: i .. j-1
    if i >= j:
        return 0
    total = pre[j] - pre[i]
    total -= max(0, a - los[i])
    total -= max(0, his[j - 1] - b)
    return total


def overlaps(t: EventTable, walker, event_wait_ns) -> tuple[array, list[Overlap]]:
    """Event row -> the ns of its communication proven to overlap its rank's compute (array of "q"), and each rank's
    totals."""
    out = array("q", bytes(8 * len(t)))
    fin, start, async_op = walker.fin, t.start_ns, t.async_op
    ranks = []
    for r, host in sorted(walker.hosts.items()):
        blocked = _merged([(a, b) for a, b, k in zip(host.a, host.b, host.kind) if k != ISSUE])
        comm, hidden = [], []
        for row, kind in zip(host.row, host.kind):
            f, c0 = fin[row], start[row] + event_wait_ns[row]
            if kind == WAIT or f == NONE or f <= c0:
                continue
            comm.append((c0, f))
            if async_op[row]:  # a synchronous op's host is blocked throughout
                k = bisect_left(host.a, f) - 1  # the host's last call before the op ended
                last = host.a[k] if k >= 0 else c0
                if last > c0:
                    hidden.append((c0, last))
                    out[row] = last - c0 - _covered(*blocked, c0, last)
        comm_ns = _merged(comm)[2][-1]
        los, his, _ = _merged(hidden)
        if comm_ns:
            ranks.append(Overlap(r, comm_ns, sum(b - a - _covered(*blocked, a, b) for a, b in zip(los, his))))
    return out, ranks


__all__ = ["overlaps"]
