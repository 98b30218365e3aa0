"""Pipeline parallelism: stages from the send/recv chain, and the bubble of each stage.

A connected set of ranks whose P2P links form a path (each rank talks to at most two others, no cycle) is a
pipeline; stage 0 is the end that sends first. Between two global synchronizations (a barrier or N×N collective
over all of the pipeline's ranks) a stage's bubble is the time it is blocked in communication — in its sends and
recvs, and waiting at the closing synchronization — over the window from the opening sync's end to the moment
the closing sync could complete. For GPipe with P stages, M micro-batches and equal compute this is (P-1)/(M+P-1).
"""

from __future__ import annotations

from bisect import bisect_left

from ..events import EventTable
from .model import WAIT_BARRIER, WAIT_NXN, CollectiveInstance, P2PMatch, PipelineStats, StageStats
from .waits import blocked_in


def _paths(p2p: list[P2PMatch]) -> list[tuple[list[int], dict[tuple[int, int], int]]]:
    """Connected P2P components that are paths, with their message counts per directed link."""
    count: dict[tuple[int, int], int] = {}
    for m in p2p:
        if m.send is not None and m.recv is not None and m.src != m.dst:
            count[(m.src, m.dst)] = count.get((m.src, m.dst), 0) + 1
    adj: dict[int, set[int]] = {}
    for a, b in count:
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    seen: set[int] = set()
    out = []
    for start in sorted(adj):
        if start in seen:
            continue
        comp, stack = [], [start]
        seen.add(start)
        while stack:
            x = stack.pop()
            comp.append(x)
            for y in adj[x]:
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        degrees = [len(adj[x]) for x in comp]
        n_edges = sum(degrees) // 2
        if len(comp) < 2 or max(degrees) > 2 or n_edges != len(comp) - 1:
            continue  # a ring, a star, an all-to-all: not a pipeline
        ends = [x for x in comp if len(adj[x]) == 1]
        path = [ends[0]]
        while len(path) < len(comp):
            path.append(next(y for y in adj[path[-1]] if y not in path[-2:-1]))
        out.append((path, {k: v for k, v in count.items() if k[0] in adj and k[0] in comp}))
    return out


def pipeline_stats(t: EventTable, p2p: list[P2PMatch], collectives: list[CollectiveInstance]) -> PipelineStats | None:
    paths = _paths(p2p)
    if not paths:
        return None
    first_send: dict[tuple[int, int], int] = {}  # (src, dst) -> start of its first send
    for m in p2p:
        if m.send is not None:
            k = (m.src, m.dst)
            s = t.start_ns[m.send]
            if s < first_send.get(k, 1 << 62):
                first_send[k] = s
    # each pipeline's P2P rows per rank, made in one pass over the messages
    comp_of = {r: k for k, (path, _) in enumerate(paths) for r in path}
    rows_of: list[dict[int, list[int]]] = [{r: [] for r in path} for path, _ in paths]
    for m in p2p:
        k = comp_of.get(m.src)
        if k is not None and comp_of.get(m.dst) == k:
            rows = rows_of[k]
            if m.send is not None:
                rows[m.src].append(m.send)
            if m.recv is not None:
                rows[m.dst].append(m.recv)
    by_group: dict[int, list[CollectiveInstance]] = {}
    for c in collectives:
        if c.complete and (c.wait_kind == WAIT_NXN or c.wait_kind == WAIT_BARRIER):
            by_group.setdefault(c.gid, []).append(c)
    per_stage: list[StageStats] = []
    first: tuple[list[int], int] | None = None
    tot_blocked = tot_window = 0
    for k_path, (path, count) in enumerate(paths):
        members = set(path)
        if first_send.get((path[-1], path[-2]), 1 << 62) < first_send.get((path[0], path[1]), 1 << 62):
            path.reverse()
        forward = count.get((path[0], path[1]), 0)
        if forward < 2 and len(path) < 3:
            continue  # a single exchange between two ranks is not a pipeline
        # the pipeline's P2P rows per rank, in time order
        rows = rows_of[k_path]
        for r in rows:
            rows[r].sort(key=t.start_ns.__getitem__)
        row_starts = {r: [t.start_ns[i] for i in rr] for r, rr in rows.items()}
        # global synchronizations: blocking barriers and N×N collectives over all the pipeline's ranks
        syncs = [c for g, grp in enumerate(t.groups) if members <= set(grp.ranks) for c in by_group.get(g, ())
                 if not any(t.async_op[i] for i in c.rows)]
        syncs.sort(key=lambda c: max(c.starts))
        windows = 0
        stage_acc = {r: [0, 0] for r in path}
        if len(syncs) >= 2:
            for open_, close in zip(syncs, syncs[1:]):
                latest = max(close.starts)
                open_end = open_.end_ns
                used = False
                for r in path:
                    a, b = open_end[r], latest
                    rr, starts = rows[r], row_starts[r]
                    lo, hi = bisect_left(starts, a), bisect_left(starts, b)
                    if hi == lo:
                        continue
                    used = True
                    blocked = sum(blocked_in(t, i, a, b) for i in rr[lo:hi])
                    blocked += close.wait_of(r)
                    stage_acc[r][0] += blocked
                    stage_acc[r][1] += b - a
                windows += used
        if windows == 0:  # no synchronizations around the traffic: one window over the pipeline's span
            windows = 1
            a = min(t.start_ns[rr[0]] for rr in rows.values() if rr)
            b = max(max(t.end_ns[i] for i in rr) for rr in rows.values() if rr)
            for r in path:
                rr = rows[r]
                blocked = sum(blocked_in(t, i, a, b) for i in rr)
                blocked += b - max(t.end_ns[i] for i in rr)  # idle after its last message
                stage_acc[r] = [blocked, b - a]
        for k, r in enumerate(path):
            blocked, window = stage_acc[r]
            per_stage.append(StageStats(r, k, window, blocked, blocked / window if window else 0.0))
            tot_blocked += blocked
            tot_window += window
        if first is None:
            first = (path, round(forward / windows))
    if first is None:
        return None
    path, micro = first
    p = len(path)
    return PipelineStats(path, micro, tot_blocked / tot_window if tot_window else 0.0,
                         (p - 1) / (micro + p - 1), per_stage)
