"""Bandwidth: nccl-tests' algbw/busbw for collectives, and the per-link communication matrix for P2P.

algbw = S / time and busbw = algbw x factor, where S is nccl-tests' size for the op (the total buffer for
all_gather, reduce_scatter, all_to_all, gather, scatter) and the factor makes busbw comparable to link speed.
busbw x time is also what each rank must move with ring algorithms: the volume the alpha-beta model uses
(comms/alpha_beta.py).
Bytes per ns is GB/s (1e9 bytes per second)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...data.table.columns import order_by, run_starts
from ...data.table import NONE
from ..core.results import Link

if TYPE_CHECKING:
    from ..core.tables import P2PTable

_TOTAL_IS_N_INPUTS = frozenset({"all_gather", "gather"})  # each rank puts in S/n


def size_s(op: str, per_rank_bytes: int, n: int) -> int:
    """nccl-tests' S from the per-rank input size."""
    return per_rank_bytes * n if op in _TOTAL_IS_N_INPUTS else per_rank_bytes


def busbw_factor(op: str, n: int) -> float:
    if n <= 1:
        return 0.0 if op != "send" and op != "recv" else 1.0
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (n - 1) / n
    if op == "barrier":
        return 0.0
    return 1.0  # broadcast, reduce, send, recv


def links_of(p2p: P2PTable) -> list[Link]:
    """The communication matrix: per (src, dst), matched messages, their bytes and transfer time (in numpy: a
    Python loop over every message is slow on a large trace)."""
    import numpy as np

    src, dst, send, recv, nbytes, transfer = map(np.asarray, (p2p.src, p2p.dst, p2p.send, p2p.recv, p2p.bytes,
                                                              p2p.transfer_ns))
    matched = np.flatnonzero((send != NONE) & (recv != NONE))
    if not len(matched):
        return []
    order = matched[order_by(src[matched], dst[matched])]
    s, d = src[order], dst[order]
    first = np.flatnonzero(run_starts(s, d))
    count = np.diff(np.append(first, len(order)))
    total = np.add.reduceat(nbytes[order].astype(np.int64), first)
    tr = transfer[order].astype(np.int64)
    busy = np.add.reduceat(np.where(tr != NONE, tr, 0), first)
    return [Link(a, b, n_bytes, n, tns, (n_bytes / tns) if tns > 0 and n_bytes > 0 else None)
            for a, b, n_bytes, n, tns in zip(*(c.tolist() for c in (s[first], d[first], total, count, busy)))]
