"""Bandwidth: nccl-tests' algbw/busbw for collectives, and the per-link communication matrix for P2P.

algbw = S / time and busbw = algbw x factor, where S is nccl-tests' size for the op (the total buffer for
all_gather, reduce_scatter, all_to_all, gather, scatter) and the factor makes busbw comparable to link speed.
busbw x time is also what each rank must move with ring algorithms: theory's volume (see theory.py).
Bytes per ns is GB/s (1e9 bytes per second)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..data.events import NONE
from .model import Link

if TYPE_CHECKING:
    from .tables import P2PTable

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
    """The communication matrix: per (src, dst), matched messages, their bytes and transfer time."""
    acc: dict[tuple[int, int], list[int]] = {}
    for src, dst, s, r, b, tr in zip(p2p.src, p2p.dst, p2p.send, p2p.recv, p2p.bytes, p2p.transfer_ns):
        if s == NONE or r == NONE:
            continue
        a = acc.setdefault((src, dst), [0, 0, 0])
        a[0] += b
        a[1] += 1
        if tr != NONE:
            a[2] += tr
    return [Link(src, dst, b, n, tns, (b / tns) if tns > 0 and b > 0 else None)
            for (src, dst), (b, n, tns) in sorted(acc.items())]
