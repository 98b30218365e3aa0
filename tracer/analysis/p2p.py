"""Build the matched messages (a P2PTable): Late Sender / Late Receiver waits and the transfer time of each message."""

from __future__ import annotations

from array import array

from ..data.events import NONE, EventTable
from .matching import finished_at, match_p2p
from .tables import P2PTable
from .waits import p2p_waits


def build_p2p(t: EventTable) -> tuple[P2PTable, array]:
    p2p = P2PTable()
    p2p_of = array("i", [-1]) * len(t)
    start, nbytes = t.start_ns, t.bytes
    for src, dst, _tag, order, s, r in match_p2p(t):
        ls = lr = 0
        transfer = None
        if s is not None and r is not None:
            ss, rs = start[s], start[r]
            ls, lr = p2p_waits(t, s, r)
            end = finished_at(t, r)
            if end != NONE:
                # data can only flow once both sides are posted; it has arrived when the recv is done
                tr = end - (ss if ss > rs else rs)
                transfer = tr if tr > 0 else None
            b = nbytes[s] or nbytes[r]
        else:
            b = nbytes[s if s is not None else r]
        idx = len(p2p)
        p2p.append(src, dst, order, s, r, b, ls, lr, transfer)
        if s is not None:
            p2p_of[s] = idx
        if r is not None:
            p2p_of[r] = idx
    return p2p, p2p_of
