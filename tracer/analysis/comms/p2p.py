"""Build the matched messages (a P2PTable): Late Sender / Late Receiver waits and the transfer time of each message.

In numpy over the event columns: the n-th send from src to dst with a tag pairs with the n-th recv at dst from src
with that tag (MPI's non-overtaking rule, which gloo and NCCL follow; matching.match_p2p says it one message at a
time), messages in order of (src, dst, tag, n); waits as wait_states.p2p_waits says them."""

from __future__ import annotations

from array import array

import numpy as np

from ...data.table.columns import extend_from_numpy, filled, order_by, run_starts, running_count, typecode
from ...data.table import NONE, EventTable
from ..core.matching import finished_column
from ..core.window import align_p2p
from ..core.tables import P2PTable


def _nth(keys: tuple, rows: np.ndarray) -> np.ndarray:
    """For each row, how many rows of the same keys come before it (rows in table order)."""
    order = order_by(*keys, rows)
    new = run_starts(*(k[order] for k in keys))
    first = np.maximum.accumulate(np.where(new, np.arange(len(rows)), 0))
    out = np.empty(len(rows), np.int64)
    out[order] = np.arange(len(rows)) - first
    return out


def build_p2p(t: EventTable) -> tuple[P2PTable, array]:
    p2p = P2PTable()
    p2p_of = filled("i", len(t), -1)
    ops = t.op.values
    codes = np.frombuffer(t.op.codes, typecode(t.op.codes))
    rank = np.frombuffer(t.rank, np.int32).astype(np.int64)
    peer = np.frombuffer(t.peer, np.int32).astype(np.int64)
    tag = np.maximum(np.frombuffer(t.tag, np.int64), 0)
    sends = np.flatnonzero(codes == ops.index("send")) if "send" in ops else np.zeros(0, np.int64)
    recvs = np.flatnonzero(codes == ops.index("recv")) if "recv" in ops else np.zeros(0, np.int64)
    if not len(sends) and not len(recvs):
        return p2p, p2p_of
    # each side's message key: (src, dst, tag, n)
    side_src = np.concatenate((rank[sends], peer[recvs]))
    side_dst = np.concatenate((peer[sends], rank[recvs]))
    side_tag = np.concatenate((tag[sends], tag[recvs]))
    is_send = np.concatenate((np.ones(len(sends), bool), np.zeros(len(recvs), bool)))
    row = np.concatenate((sends, recvs))
    nth = np.empty(len(row), np.int64)
    for mask in (is_send, ~is_send):
        idx = np.flatnonzero(mask)
        nth[idx] = _nth((side_src[idx], side_dst[idx], side_tag[idx]), row[idx])
    start = np.frombuffer(t.start_ns, np.int64)
    fin = finished_column(t)
    # a black-box trace's windows: each pair's sides aligned, those outside the window left out (core/window.py)
    keep, nth = align_p2p(t, side_src, side_dst, side_tag, is_send, row, nth, start, fin)
    if not keep.all():
        side_src, side_dst, side_tag, is_send, row, nth = (c[keep] for c in (side_src, side_dst, side_tag, is_send,
                                                                               row, nth))
        if not len(row):
            return p2p, p2p_of
    order = order_by(side_src, side_dst, side_tag, nth, ~is_send)  # by message, its send first
    src, dst, tg, n, snd, r = (c[order] for c in (side_src, side_dst, side_tag, nth, is_send, row))
    new = run_starts(src, dst, tg, n)
    msg = running_count(new) - 1  # each side's message
    m = int(msg[-1]) + 1
    s_row = np.full(m, NONE, np.int64)
    r_row = np.full(m, NONE, np.int64)
    s_row[msg[snd]] = r[snd]
    r_row[msg[~snd]] = r[~snd]
    first = np.flatnonzero(new)
    m_src, m_dst, m_order = src[first], dst[first], n[first]

    nbytes = np.frombuffer(t.bytes, np.int64)
    both = (s_row != NONE) & (r_row != NONE)
    s_, r_ = np.where(s_row != NONE, s_row, 0), np.where(r_row != NONE, r_row, 0)
    ss, rs = start[s_], start[r_]
    send_end, recv_end = fin[s_], fin[r_]
    # late sender: the recv waited from its start for the send's, unless it ended before (wait_states._until)
    ls = np.where(both & (ss > rs), _until(rs, recv_end, ss), 0)
    # the send was over before the recv was posted (by more than the two clocks can be off: a send seen ending a
    # few hundred µs before its recv began, after tens of ms in flight, waited for it on skewed clocks)
    unc = np.zeros(int(max(m_src.max(), m_dst.max(), 0)) + 1 if m else 1, np.int64)
    for r, info in t.ranks.items():
        if r < len(unc):
            unc[r] = max(0, info.clock_uncertainty_ns)
    buffered = (send_end != NONE) & (send_end <= rs - unc[m_src] - unc[m_dst])
    lr = np.where(both & (rs > ss) & ~buffered, _until(ss, send_end, rs), 0)
    tr = recv_end - np.maximum(ss, rs)
    transfer = np.where(both & (recv_end != NONE) & (tr > 0), tr, NONE)
    size = np.where(s_row != NONE, nbytes[s_], nbytes[r_])
    size = np.where(both & (size == 0), nbytes[r_], size)  # (the send's size, or the recv's if it has none)

    for name, col in (("src", m_src), ("dst", m_dst), ("order", m_order), ("send", s_row), ("recv", r_row),
                      ("bytes", size), ("late_sender_ns", ls), ("late_receiver_ns", lr), ("transfer_ns", transfer)):
        extend_from_numpy(getattr(p2p, name), col)
    of = np.frombuffer(p2p_of, np.int32)
    ids = np.arange(m, dtype=np.int32)
    of[s_row[s_row != NONE]] = ids[s_row != NONE]
    of[r_row[r_row != NONE]] = ids[r_row != NONE]
    return p2p, p2p_of


def _until(start: np.ndarray, end: np.ndarray, needed: np.ndarray) -> np.ndarray:
    """wait_states._until of columns: the wait of an op that arrived at `start`, ended at `end` (NONE: never) and needed
    a peer arriving at `needed`."""
    ended_before = (end != NONE) & (end < needed)
    return np.where(needed <= start, 0, np.where(ended_before, np.maximum(end - start, 0), needed - start))
