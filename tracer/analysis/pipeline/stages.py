"""Pipeline parallelism: stages from the send/recv chain, and the bubble of each stage.

A connected set of ranks whose P2P links form a path (each rank talks to at most two others, no cycle) is a
pipeline; stage 0 is the end that sends first. Its iterations are the training steps (waits/steps.py) when each step
holds a pipeline iteration's traffic, else the windows between global synchronizations (a barrier or N×N
collective over all of the pipeline's ranks), else one window over all its traffic. In each window a stage's bubble
is the time it is blocked in communication — in its sends and recvs, and waiting at the closing synchronization
or, without one, idle after its last message — and the rest is its compute. The micro-batches of one iteration
are the first link's forward messages over the iterations, and the textbook bubble of GPipe (and 1F1B) with P
stages and M micro-batches an iteration is (P-1)/(M+P-1). A stage whose compute stands out from the others' is an
imbalance that sets the pipeline's pace: it is named (the others' waits for it are bubble, not straggling).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from statistics import median
from typing import TYPE_CHECKING

import numpy as np

from ...data.table.columns import GIL_ROWS, groups_of, link_in, order_by, repeat_each
from ...data.table import NONE, EventTable
from ..core.matching import finished_column
from ..core.results import WAIT_BARRIER, WAIT_NXN, CollectiveInstance, PipelineStats, StageStats, Step
from .schedule import read_schedule
from ..waits.wait_states import blocked_in, blocked_intervals

if TYPE_CHECKING:
    from ..core.tables import CollectiveTable, P2PTable


def _pair_counts(p2p: P2PTable) -> dict[tuple[int, int], int]:
    """(src, dst) -> its matched messages (both sides seen, src != dst), in the order each pair first occurs (the
    order _paths' walk meets them in). In numpy, GIL_ROWS messages at a time (a Python loop over every message
    is slow on a large trace; one np.unique of them all would hold the GIL through its sort)."""
    src, dst = np.frombuffer(p2p.src, np.int32).astype(np.int64), np.frombuffer(p2p.dst, np.int32).astype(np.int64)
    ok = (np.frombuffer(p2p.send, np.int32) != NONE) & (np.frombuffer(p2p.recv, np.int32) != NONE) & (src != dst)
    count: dict[tuple[int, int], int] = {}
    if not ok.any():
        return count
    w = int(max(src.max(), dst.max())) + 1
    for k in range(0, len(src), GIL_ROWS):
        keys = (src[k:k + GIL_ROWS] * w + dst[k:k + GIL_ROWS])[ok[k:k + GIL_ROWS]]
        pairs, first, n = np.unique(keys, return_index=True, return_counts=True)
        order = np.argsort(first)
        for key, m in zip(pairs[order].tolist(), n[order].tolist()):
            pair = divmod(key, w)
            count[pair] = count.get(pair, 0) + m
    return count


def _first_sends(t: EventTable, p2p: P2PTable, links: set[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """(src, dst) -> the start of the first send on that link (1 << 62: none), for each of `links`, in one pass
    over the messages."""
    src, dst = np.frombuffer(p2p.src, np.int32), np.frombuffer(p2p.dst, np.int32)
    send = np.frombuffer(p2p.send, np.int32)
    out = dict.fromkeys(links, 1 << 62)
    m = np.flatnonzero(link_in(src, dst, links) & (send != NONE))
    starts = np.frombuffer(t.start_ns, np.int64)[send[m]]
    for key, part in groups_of(src[m].astype(np.int64) << 32 | dst[m]):
        out[(key >> 32, key & 0xFFFFFFFF)] = int(starts[part].min())
    return out


def _stage_rows(t: EventTable, p2p: P2PTable, paths: list) -> list[dict[int, list[int]]]:
    """Per path, each of its ranks' P2P rows within the path (its sends and its recvs), by start; a tie in the order
    of the messages, a send before a recv of the same one."""
    src, dst = np.frombuffer(p2p.src, np.int32), np.frombuffer(p2p.dst, np.int32)
    send, recv = np.frombuffer(p2p.send, np.int32), np.frombuffer(p2p.recv, np.int32)
    out: list[dict[int, list[int]]] = [{r: [] for r in path} for path, _ in paths]
    if not len(src):
        return out
    w = int(max(src.max(), dst.max(), max(max(path) for path, _ in paths))) + 1
    comp = np.full(w, -1, np.int64)
    for k, (path, _) in enumerate(paths):
        comp[path] = k
    within = (comp[src] >= 0) & (comp[dst] == comp[src])
    sends, recvs = np.flatnonzero(within & (send != NONE)), np.flatnonzero(within & (recv != NONE))
    rank = np.concatenate((src[sends], dst[recvs])).astype(np.int64)
    row = np.concatenate((send[sends], recv[recvs])).astype(np.int64)
    tie = np.concatenate((sends * 2, recvs * 2 + 1))
    order = order_by(rank, np.frombuffer(t.start_ns, np.int64)[row], tie)
    rank, row = rank[order], row[order]
    for r, part in groups_of(rank):
        out[comp[r]][r] = row[part].tolist()
    return out


def _paths(p2p: P2PTable) -> list[tuple[list[int], dict[tuple[int, int], int]]]:
    """Connected P2P components that are paths, with their message counts per directed link."""
    count = _pair_counts(p2p)
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
        mine = {k: v for k, v in count.items() if k[0] in comp}
        if len(comp) >= 3 and degrees == [2] * len(comp) and n_edges == len(comp):
            wrap = _wrap(comp, adj, mine)
            if wrap is None:
                continue  # a ring of equal links (a ring all-reduce by hand): not a pipeline
            adj = {x: set(ys) for x, ys in adj.items()}
            adj[wrap[0]].discard(wrap[1])
            adj[wrap[1]].discard(wrap[0])
        elif len(comp) < 2 or max(degrees) > 2 or n_edges != len(comp) - 1:
            continue  # a star, an all-to-all: not a pipeline
        ends = [x for x in comp if len(adj[x]) == 1]
        path = [ends[0]]
        while len(path) < len(comp):
            path.append(next(y for y in adj[path[-1]] if y not in path[-2:-1]))
        out.append((path, mine))
    return out


def _wrap(comp: list[int], adj: dict, count: dict[tuple[int, int], int]) -> tuple[int, int] | None:
    """An interleaved schedule's ring (each rank holds v stages: the last rank hands its activations back to the
    first): the link that carries fewer messages than every other, (v - 1) micro-batches' a way against v's; None
    when no link does."""
    links = sorted({(min(a, b), max(a, b)) for a in comp for b in adj[a]})
    traffic = sorted((count.get(k, 0) + count.get(k[::-1], 0), k) for k in links)
    if len(traffic) < 2 or traffic[0][0] >= traffic[1][0]:
        return None
    # every other link alike, and the wrap's share of theirs (v - 1) / v for a whole v of 2 or more
    others = [x for x, _ in traffic[1:]]
    if max(others) > 1.1 * min(others):
        return None
    v = others[0] / (others[0] - traffic[0][0])
    if v < 1.9 or abs(v - round(v)) > 0.1:
        return None
    return traffic[0][1]


def virtual_stages(path: list[int], count: dict[tuple[int, int], int]) -> int:
    """How many stages each rank of a pipeline holds: 1, or v for an interleaved schedule's ring, whose links carry
    v micro-batches' activations a way and the wrap link (the last rank back to the first) v - 1."""
    wrap = count.get((path[-1], path[0]), 0)
    along = count.get((path[0], path[1]), 0)
    if len(path) < 3 or not wrap or along <= wrap:
        return 1
    return max(1, round(along / (along - wrap)))


def _is_pipeline(path: list[int], count: dict[tuple[int, int], int]) -> bool:
    # a single exchange between two ranks is not a pipeline
    return len(path) >= 3 or max(count.get((path[0], path[1]), 0), count.get((path[1], path[0]), 0)) >= 2


def pipeline_stats(t: EventTable, p2p: P2PTable, collectives: CollectiveTable, steps: list[Step],
                   step_of: array) -> PipelineStats | None:
    paths = _paths(p2p)
    if not paths:
        return None
    rows_of = _stage_rows(t, p2p, paths)  # each pipeline's P2P rows per rank, by start
    by_group: dict[int, list[CollectiveInstance]] = {}  # (made when a pipeline's steps are no iterations)

    def syncs_by_group() -> dict[int, list[CollectiveInstance]]:
        if not by_group:
            for c in collectives:
                if c.complete and (c.wait_kind == WAIT_NXN or c.wait_kind == WAIT_BARRIER):
                    by_group.setdefault(c.gid, []).append(c)
        return by_group

    cols = _Columns(t)
    schedule = read_schedule(t, cols.fin, p2p)
    per_stage: list[StageStats] = []
    pipelines: list[list[int]] = []
    first: tuple[list[int], int, int] | None = None
    # stage 0 is the end that sends first
    ends = {link for path, count in paths if _is_pipeline(path, count)
            for link in ((path[0], path[1]), (path[-1], path[-2]))}
    first_send = _first_sends(t, p2p, ends)
    tot_blocked = tot_window = 0
    for k_path, (path, count) in enumerate(paths):
        if not _is_pipeline(path, count):
            continue
        if first_send[(path[-1], path[-2])] < first_send[(path[0], path[1])]:
            path.reverse()
        v = virtual_stages(path, count)
        forward = count.get((path[0], path[1]), 0)
        pipelines.append(path)
        rows = rows_of[k_path]
        windows, in_steps, used = _step_windows(t, path, rows, steps, step_of)
        if windows:  # (the micro-batches of the iterations: not the messages before the first, shape inference's)
            forward = in_steps
            schedule.pipeline(len(pipelines) - 1, path, v,
                              lambda path=path, rows=rows, used=used: _rows_by_step(path, rows, used, step_of),
                              {s.index for s in steps if s.warmup})
        else:
            windows = _sync_windows(t, path, rows, syncs_by_group())
            schedule.pipeline(len(pipelines) - 1, path, v,
                              lambda path=path, rows=rows, windows=windows: _rows_in(t, path, rows, windows))
        stage_acc = {r: [0, 0] for r in path}
        if windows:
            iterations = len(windows)
            ends = [b for _, b, _ in windows]
            for r in path:
                starts = [a_of(r) for a_of, _, _ in windows]
                # per window: blocked in its ops, the last of them done, whether it has any
                blocked, last, some = cols.per_window(rows[r], starts, ends)
                for a, b, (_, _, close), bl, fin, any_op in zip(starts, ends, windows, blocked, last, some):
                    if not any_op:
                        continue
                    if close is not None:
                        bl += close.wait_of(r)
                    else:  # idle after its last message of the iteration until the iteration ends
                        bl += max(0, b - fin)
                    stage_acc[r][0] += bl
                    stage_acc[r][1] += b - a
        else:  # no iterations found: one window over the pipeline's span
            iterations = 1
            schedule.pipeline(len(pipelines) - 1, path, v, lambda rows=rows: [(0, rows)], set())
            a = min(t.start_ns[rr[0]] for rr in rows.values() if rr)
            b = max(max(t.end_ns[i] for i in rr) for rr in rows.values() if rr)
            for r in path:
                rr = rows[r]
                blocked = sum(blocked_in(t, i, a, b) for i in rr)
                blocked += b - max(t.end_ns[i] for i in rr)  # idle after its last message
                stage_acc[r] = [blocked, b - a]
        for k, r in enumerate(path):
            blocked, window = stage_acc[r]
            per_stage.append(StageStats(r, k, window, blocked, blocked / window if window else 0.0,
                                        window - blocked))
            tot_blocked += blocked
            tot_window += window
        if first is None:
            first = (path, max(1, round(forward / iterations / v)), iterations, v)
    if first is None:
        return None
    path, micro, iterations, v = first
    p = len(path)
    slow, factor = _slow_stage(per_stage)
    read = schedule.finish()
    return PipelineStats(path, micro, tot_blocked / tot_window if tot_window else 0.0,
                         (p - 1) / (v * micro + p - 1), per_stage, iterations, slow, factor, pipelines,
                         virtual_stages=v, schedule_fraction=read.fraction(), schedule_iterations=read.iterations,
                         schedule=read.cells, stage_idle=read.stage_idle, ideal_schedules=read.ideals,
                         schedule_note="; ".join(read.notes), schedule_startup=read.startup)


Window = tuple  # (rank -> window start, window end, the closing synchronization or None)


class _Columns:
    """The columns blocked_in reads, in numpy (wait_states.blocked_intervals), to sum a rank's blocked time over many
    windows at once."""

    def __init__(self, t: EventTable) -> None:
        self.start = np.frombuffer(t.start_ns, np.int64)
        self.lo, self.hi, self.never = blocked_intervals(t)
        self.fin = finished_column(t)

    def per_window(self, rows: list[int], starts: list[int], ends: list[int]) -> tuple[list, list, list]:
        """For rows (one rank's, by start) and windows [starts[w], ends[w]): the sum of blocked_in over the rows
        that start in each window, the latest finished_at among them, and whether there are any."""
        rr = np.array(rows, np.int64)
        begin = self.start[rr]
        a, b = np.array(starts, np.int64), np.array(ends, np.int64)
        lo, hi = np.searchsorted(begin, a), np.searchsorted(begin, b)
        counts = np.maximum(hi - lo, 0)
        at = repeat_each(lo - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
        i, wa, wb = rr[at], repeat_each(a, counts), repeat_each(b, counts)
        x, y = np.maximum(self.lo[i], wa), np.minimum(np.where(self.hi[i] == NONE, wb, self.hi[i]), wb)
        blocked = np.where((wb > wa) & ~self.never[i] & (y > x), y - x, 0)
        full = counts > 0
        firsts = (np.cumsum(counts) - counts)[full]
        sums, last = np.zeros(len(a), np.int64), np.full(len(a), NONE, np.int64)
        if len(i):
            sums[full] = np.add.reduceat(blocked, firsts)
            last[full] = np.maximum.reduceat(self.fin[i], firsts)
        return sums.tolist(), last.tolist(), (hi != lo).tolist()


def _step_windows(t: EventTable, path: list[int], rows: dict[int, list[int]], steps: list[Step],
                  step_of: array) -> tuple[list[Window], int, list[int]]:
    """One window per training step whose traffic is a pipeline iteration: the first stage sends activations
    and gets gradients back, or sends several micro-batches. (A forward-only loop of one micro-batch a period
    repeats per micro-batch: its 'steps' are micro-batches, not iterations.) And the first stage's sends in them,
    and the steps' indexes."""
    if len(steps) < 2:
        return [], 0, []
    head = path[0]
    sends: dict[int, int] = {}
    recvs: dict[int, int] = {}
    for i in rows[head]:
        k = step_of[i]
        if k >= 0:
            sending = t.op[i] == "send"
            if sending and t.peer[i] != path[1]:
                continue  # (an interleaved ring's gradients back to its last rank)
            d = sends if sending else recvs
            d[k] = d.get(k, 0) + 1
    used = sorted(sends)
    if len(used) < 2 or not all(recvs.get(k, 0) or sends[k] >= 2 for k in used):
        return [], 0, []
    by_index = {s.index: s for s in steps}
    return ([((lambda r, s=by_index[k]: s.start_ns), by_index[k].end_ns, None) for k in used], sum(sends.values()),
            used)


def _rows_by_step(path: list[int], rows: dict[int, list[int]], used: list[int], step_of: array
                  ) -> list[tuple[int, dict[int, list[int]]]]:
    """Per step of `used`: (its index, each rank's rows of the pipeline in it)."""
    out = {k: {r: [] for r in path} for k in used}
    for r in path:
        for i in rows[r]:
            per = out.get(step_of[i])
            if per is not None:
                per[r].append(i)
    return list(out.items())


def _rows_in(t: EventTable, path: list[int], rows: dict[int, list[int]], windows: list[Window]
             ) -> list[tuple[int, dict[int, list[int]]]]:
    """Per synchronization window: (its number, each rank's rows of the pipeline that start in it)."""
    starts = {r: [t.start_ns[i] for i in rows[r]] for r in path}
    return [(w, {r: rows[r][bisect_left(starts[r], a_of(r)):bisect_left(starts[r], b)] for r in path})
            for w, (a_of, b, _) in enumerate(windows)]


def _sync_windows(t: EventTable, path: list[int], rows: dict[int, list[int]],
                  by_group: dict[int, list[CollectiveInstance]]) -> list[Window]:
    """Windows between global synchronizations (blocking barriers and N×N collectives over all the pipeline's
    ranks) that hold pipeline traffic: from the opening sync's end on each rank to when the closing one could
    complete."""
    members = set(path)
    syncs = [c for g, grp in enumerate(t.groups) if members <= set(grp.ranks) for c in by_group.get(g, ())
             if not any(t.async_op[i] for i in c.rows) and members <= set(c.ranks)]  # (a damaged one may lack one)
    syncs.sort(key=lambda c: max(c.starts))
    starts = {r: [t.start_ns[i] for i in rows[r]] for r in path}
    out = []
    for open_, close in zip(syncs, syncs[1:]):
        latest = max(close.starts)
        open_end = open_.end_ns
        if any(bisect_left(starts[r], open_end[r]) < bisect_left(starts[r], latest) for r in path):
            out.append((open_end.__getitem__, latest, close))
    return out


SLOW_STAGE = 1.25  # a stage computing this much more than the others' median sets the pipeline's pace


def _slow_stage(per_stage: list[StageStats]) -> tuple[int | None, float]:
    """The stage whose compute (summed over the pipelines) stands out from the others', and by how much."""
    by_stage: dict[int, int] = {}
    for s in per_stage:
        by_stage[s.stage] = by_stage.get(s.stage, 0) + s.compute_ns
    if len(by_stage) < 2:
        return None, 1.0
    worst = max(by_stage, key=by_stage.__getitem__)
    others = median(v for k, v in by_stage.items() if k != worst)
    if others <= 0:
        return None, 1.0
    factor = by_stage[worst] / others
    return (worst, factor) if factor >= SLOW_STAGE else (None, factor)
