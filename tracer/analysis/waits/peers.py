"""Each rank measured against its peers (docs/ANALYSIS.md, "Peers, the ideal step, and attribution").

A rank is never measured against its own history (a rank slow in every step is never late against itself), but
against the ranks that do the same work in the same step, its *peers*: ranks of the same *role*. The roles come from
the trace's P2P pattern: every rank of a pipeline stage (its stage in each replica: pipeline/stages.py's pipelines) has the
role of that stage; every rank outside a pipeline has one role (pure data parallelism: every rank a peer of every
other; the ranks of tensor- or context-parallel groups too, whose shards do equal work in the schemes PyTorch and
Megatron ship).

Two ops are *the same* on two peers when their op, call site, kind of group (its size and its members' roles: each
replica's pipeline group is of one kind) and, for a send or a recv, the role of the rank at the other end are. A
compute span is the same when the ops around it are and it is the n-th such span of the rank's step (a pipeline
stage's micro-batches: pipelining issues every one from the same line). The *typical* duration of a span on a rank
is the median of its other peers' (`others_median`): with two peers, a slow one is measured against the fast one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...data.table.columns import dense_ids, order_by
from ...data.table import NONE, EventTable
from ..core.results import PipelineStats


@dataclass
class Roles:
    """What each rank does, as pipeline/stages.py found it."""

    role: np.ndarray               # by rank: its role (a small int; ranks of one role are peers)
    stage: np.ndarray              # by rank: its pipeline stage, -1 outside a pipeline
    stage_ranks: list[list[int]] = field(default_factory=list)  # per stage, its ranks over the replicas

    def peers_of(self, rank: int) -> list[int]:
        if rank >= len(self.role):
            return []
        return np.flatnonzero(self.role == self.role[rank]).tolist()

    def found(self) -> str:
        """What was found, in a line: the report says it."""
        if not self.stage_ranks:
            n = int((self.role >= 0).sum())
            return f"all {n} ranks do the same work (no pipeline)" if n > 1 else "one rank: no peers"
        replicas = max(len(r) for r in self.stage_ranks)
        stages = ", ".join(f"stage {s} {_ranks(r)}" for s, r in enumerate(self.stage_ranks))
        return (f"the ranks of each pipeline stage ({len(self.stage_ranks)} stages x {replicas} "
                f"replica{'s' if replicas > 1 else ''}: {stages})")


def _ranks(ranks: list[int]) -> str:
    return "rank " + str(ranks[0]) if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def roles_of(t: EventTable, pipeline: PipelineStats | None) -> Roles:
    ranks = set(t.ranks) | set(np.unique(np.frombuffer(t.rank, np.int32)).tolist())
    size = max(ranks, default=-1) + 1
    role = np.full(size, -1, np.int64)
    stage = np.full(size, -1, np.int64)
    role[sorted(ranks)] = 0
    stage_ranks: list[list[int]] = []
    if pipeline is not None and pipeline.pipelines:
        depth = len(pipeline.stages)  # (pipelines of another length: roles of their own)
        for path in pipeline.pipelines:
            for s, r in enumerate(path):
                if r < size:
                    stage[r] = s
                    role[r] = 1 + s if len(path) == depth else 1 + depth + len(path) * 64 + s
        stage_ranks = [sorted(p[s] for p in pipeline.pipelines if len(p) == depth) for s in range(depth)]
    return Roles(role, stage, stage_ranks)


def identities(t: EventTable, roles: Roles) -> np.ndarray:
    """Per row, its op's identity among peers (a small int): its op, call site, kind of group and the other end's
    role."""
    gkind = dense_ids(*_group_keys(t, roles)) if t.groups else np.zeros(0, np.int64)
    gid = np.frombuffer(t.gid, np.int32).astype(np.int64)
    peer = np.frombuffer(t.peer, np.int32).astype(np.int64)
    role = np.append(roles.role, -1)  # (index -1: a row without a peer)
    other = np.where((peer >= 0) & (peer < len(roles.role)), peer, -1)
    return dense_ids(np.asarray(t.op.codes, np.int64), np.asarray(t.site.codes, np.int64),
                     gkind[gid] if len(gkind) else gid, role[other])


def _group_keys(t: EventTable, roles: Roles) -> list[np.ndarray]:
    """Per group, two columns whose pair says its kind: its size, and its members' roles (sorted) as one number."""
    role = roles.role
    sizes, kinds, seen = [], [], {}
    for g in t.groups:
        members = tuple(sorted(int(role[r]) if r < len(role) else -1 for r in g.ranks))
        sizes.append(len(members))
        kinds.append(seen.setdefault(members, len(seen)))
    return [np.array(sizes, np.int64), np.array(kinds, np.int64)]


def occurrences(*keys) -> np.ndarray:
    """Per row, how many earlier rows have the same keys (numpy columns): the n-th of its kind."""
    ids = dense_ids(*keys)
    order = order_by(ids)  # (stable: rows in order within a key)
    sorted_ids = ids[order]
    first = np.flatnonzero(np.diff(sorted_ids, prepend=-1))
    counts = np.diff(np.append(first, len(ids)))
    out = np.empty(len(ids), np.int64)
    out[order] = np.arange(len(ids)) - np.repeat(first, counts)
    return out


def spread(xs) -> float:
    """The spread of values over steps: 1.4826 median absolute deviations, a standard deviation where they are
    normal and unmoved by a few outliers (0 below 3 values)."""
    x = np.asarray(xs, np.float64)
    if len(x) < 3:
        return 0.0
    return float(np.median(np.abs(x - np.median(x)))) * 1.4826


def others_median(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per row, the median of `values` over the other rows of its group (float; NaN where it is alone): each
    member measured against its peers, never with itself in the typical."""
    n = len(values)
    out = np.full(n, np.nan)
    if not n:
        return out
    order = order_by(groups, values)
    g, v = groups[order], values[order].astype(np.float64)
    first = np.flatnonzero(np.diff(g, prepend=g[0] - 1))
    size = np.diff(np.append(first, n))
    start = np.repeat(first, size)
    m = np.repeat(size, size) - 1  # the others
    i = np.arange(n) - start       # this one's place among its group, sorted

    def other(j):  # the j-th smallest of the others
        return v[np.minimum(start + j + (j >= i), n - 1)]

    half = m // 2
    odd = other(half)
    even = (other(np.maximum(half - 1, 0)) + odd) / 2
    med = np.where(m % 2 == 1, odd, even)
    out[order] = np.where(m > 0, med, np.nan)
    return out


__all__ = ["Roles", "identities", "occurrences", "others_median", "roles_of", "NONE"]
