"""Wait states (Scalasca's patterns in PyTorch's words) and the stragglers who caused them.

A rank can only have waited while it was blocked: in the op itself for a synchronous call, or inside wait()
for an async one. So every wait is the overlap of the pattern's interval (e.g. [own start, latest start] for
Wait at N×N) with the time the rank was blocked in the op."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..events import NONE, EventTable
from .model import EARLY_REDUCE, LATE_BROADCAST, WAIT_BARRIER, WAIT_NXN, Straggler

if TYPE_CHECKING:
    from .tables import CollectiveTable, P2PTable

WAIT_KIND = {
    "all_reduce": WAIT_NXN, "all_gather": WAIT_NXN, "reduce_scatter": WAIT_NXN, "all_to_all": WAIT_NXN,
    "barrier": WAIT_BARRIER,
    "broadcast": LATE_BROADCAST, "scatter": LATE_BROADCAST,
    "reduce": EARLY_REDUCE, "gather": EARLY_REDUCE,
}


def blocked_in(t: EventTable, i: int, a: int, b: int) -> int:
    """How long row i was blocked within [a, b] (ns). An op that never finished blocks to the end of [a, b]."""
    if b <= a:
        return 0
    if t.async_op[i]:
        lo, hi = t.wait_start_ns[i], t.wait_end_ns[i]
        if lo == NONE:
            return 0  # wait() never called: the rank never blocked on it
    else:
        lo, hi = t.start_ns[i], t.end_ns[i]
    if hi == NONE:
        hi = b
    lo, hi = max(lo, a), min(hi, b)
    return hi - lo if hi > lo else 0


def collective_waits(t: EventTable, kind: str, rows: list[int], ranks: list[int], starts: list[int],
                     root: int | None) -> tuple[list[int], int | None]:
    """Per-row wait of one instance and the rank that caused it (None when nobody waited)."""
    n = len(rows)
    waits = [0] * n
    any_async = any(t.async_op[i] for i in rows)
    if kind == WAIT_NXN or kind == WAIT_BARRIER:
        latest = max(starts)
        culprit = ranks[starts.index(latest)]
        if any_async:
            ws, we, asy, end = t.wait_start_ns, t.wait_end_ns, t.async_op, t.end_ns
            waits = []
            for i, s in zip(rows, starts):
                # blocked inside wait() (async) or inside the call (sync), clipped to [own start, latest start]
                lo, hi = (ws[i], we[i]) if asy[i] else (s, end[i])
                if lo == NONE:
                    waits.append(0)
                    continue
                lo = lo if lo > s else s
                hi = latest if hi == NONE or hi > latest else hi
                waits.append(hi - lo if hi > lo else 0)
        else:
            waits = [latest - s for s in starts]
            # a synchronous op that ended before the latest arrival is a clock violation: it did not wait longer
            end = t.end_ns
            for k, i in enumerate(rows):
                e = end[i]
                if e != NONE and e < latest:
                    waits[k] = max(0, e - starts[k])
        return waits, culprit
    if root is None or root not in ranks:
        return waits, None
    k_root = ranks.index(root)
    if kind == LATE_BROADCAST:  # non-roots wait for a late root
        rs = starts[k_root]
        for k, (i, s) in enumerate(zip(rows, starts)):
            if k != k_root and rs > s:
                waits[k] = blocked_in(t, i, s, rs)
        return waits, root
    # EARLY_REDUCE: the root waits for its latest sender
    others = [(s, r) for k, (s, r) in enumerate(zip(starts, ranks)) if k != k_root]
    if not others:
        return waits, None
    latest, culprit = max(others)
    waits[k_root] = blocked_in(t, rows[k_root], starts[k_root], latest)
    return waits, culprit


def p2p_waits(t: EventTable, send: int, recv: int) -> tuple[int, int]:
    """(late sender: receiver's wait, late receiver: sender's wait) of one matched message."""
    ss, rs = t.start_ns[send], t.start_ns[recv]
    if ss > rs:
        return blocked_in(t, recv, rs, ss), 0
    if rs > ss:
        return 0, blocked_in(t, send, ss, rs)
    return 0, 0


def stragglers_of(collectives: CollectiveTable, p2p: P2PTable, culprits: list[int | None],
                  ranks: list[int]) -> list[Straggler]:
    """Per rank, the waiting it caused others (its delay cost) and how often it arrived last; worst first."""
    cost = dict.fromkeys(ranks, 0)
    late = dict.fromkeys(ranks, 0)
    waits, offset = collectives.waits, collectives.offset
    for k, culprit in enumerate(culprits):
        if culprit is None:
            continue
        caused = sum(waits[offset[k]:offset[k + 1]])
        if caused > 0:
            cost[culprit] = cost.get(culprit, 0) + caused
            late[culprit] = late.get(culprit, 0) + 1
    for src, w in zip(p2p.src, p2p.late_sender_ns):
        if w:
            cost[src] = cost.get(src, 0) + w
    for dst, w in zip(p2p.dst, p2p.late_receiver_ns):
        if w:
            cost[dst] = cost.get(dst, 0) + w
    out = [Straggler(r, cost[r], late.get(r, 0)) for r in cost]
    out.sort(key=lambda s: (-s.delay_cost_ns, -s.late_count, s.rank))
    return out
