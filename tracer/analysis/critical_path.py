"""Why a step is as long as it is: its critical path across ranks, the causes of its waits, what a change saves.

Definitions (Scalasca's, for MPI, in PyTorch's words: Schulz, "Extracting critical path graphs from MPI
applications", Cluster 2005; Böhme et al., "Identifying the root causes of wait states in large-scale parallel
applications", ICPP 2010; docs/ARCHITECTURE.md, "The critical path"):

- A rank's host is *blocked* in a synchronous op for its whole call, and in an async op only inside the wait()
  that blocked on it; an async op issued without a wait() from Python (DDP's buckets, FSDP2's) runs beside the
  host, which goes on computing. Between the ops it is blocked in, the host *computes*: a compute span is named by
  the sites of the ops around it, "train.py:40 → train.py:52".
- Inside an op, the part from its arrival to the arrival it needed is *waiting* (waits.py); the rest of the op is
  *communication*.
- The critical path of a step is found walking backwards from the step's end (the op of the step that finished
  last): through an op's communication down to the end of its waiting; where it waited, across to the rank it
  waited for, at that rank's arrival (the edge between ranks); on a host, through compute back to the op before it,
  or into the op it was blocked in. Every instant of the step is on the path once, so its parts add up to the
  step's length. A wait whose cause is not in the trace stays on the path as waiting.
- The *root cause* of a wait: the same walk, from the arrival that was waited for, back over the wait's length:
  what ran on the path meanwhile delayed the waiting rank, through chains (rank 2 waits for rank 1, which waited
  for rank 0: the walk crosses to rank 0 and names its span). A rank's overlapping waits (async ops late for the
  same reason) are counted once, as in its wait total.
- *What if rank R were on time*: each compute span of R on a step's path shortened by its excess over the other
  ranks' median of the same span (the compute before the same collective); the step shortens by that much.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from statistics import median

from ..data.events import NONE, EventTable
from .matching import finished
from .model import CriticalPath, DelayCause, PathPart, Step, StragglerVerdict, WhatIf
from .tables import CollectiveTable, P2PTable

_MAX_MOVES = 1_000_000  # a bound on one walk's moves: a damaged trace must not make it loop


class _Host:
    """One rank's host: the intervals it was blocked in (sync ops, wait() calls; an async op's issue as an
    empty one, which bounds compute spans), sorted by start, with the running maximum of their ends."""

    def __init__(self, t: EventTable, rows: list[int], fin) -> None:
        spans = []
        for i in rows:
            if t.async_op[i]:
                spans.append((t.start_ns[i], t.start_ns[i], i))
                if t.wait_start_ns[i] != NONE and t.wait_end_ns[i] != NONE:
                    spans.append((t.wait_start_ns[i], t.wait_end_ns[i], i))
            else:
                spans.append((t.start_ns[i], fin[i] if fin[i] != NONE else t.start_ns[i], i))
        spans.sort()
        self.a = [s[0] for s in spans]
        self.b = [s[1] for s in spans]
        self.row = [s[2] for s in spans]
        self.maxb: list[int] = []
        m = -(1 << 62)
        for b in self.b:
            m = max(m, b)
            self.maxb.append(m)

    def blocked_at(self, t: int) -> int | None:
        """The interval the host was blocked in at instant t (start < t <= end), by its index."""
        k = bisect_left(self.a, t) - 1
        while k >= 0 and self.maxb[k] >= t:
            if self.b[k] >= t:
                return k
            k -= 1
        return None

    def before(self, t: int) -> int | None:
        """The interval that ended last before instant t (its end < t), by its index."""
        k = bisect_left(self.a, t) - 1
        best = None
        while k >= 0:
            if self.b[k] < t and (best is None or self.b[k] > self.b[best]):
                best = k
            if best is not None and self.maxb[k] <= self.b[best]:
                break
            k -= 1
        return best


class _Walker:
    """The backward walk over the trace's op graph, shared by the critical path and the root causes."""

    def __init__(self, t: EventTable, collectives: CollectiveTable, instance_of, culprits: list, p2p: P2PTable,
                 p2p_of, event_wait_ns) -> None:
        self.t, self.wait = t, event_wait_ns
        self.fin = finished(t)
        self.colls, self.instance_of, self.culprits = collectives, instance_of, culprits
        self.p2p, self.p2p_of = p2p, p2p_of
        by_rank: dict[int, list[int]] = {}
        for i, r in enumerate(t.rank):
            by_rank.setdefault(r, []).append(i)
        self.hosts = {r: _Host(t, rows, self.fin) for r, rows in by_rank.items()}
        self._sites: dict[str, str] = {}
        self.culprit_row = array("q", [-1]) * len(collectives)  # each collective's row of the rank waited for
        for k, culprit in enumerate(culprits):
            ranks = collectives.ranks_of(k)
            if culprit in ranks:
                self.culprit_row[k] = collectives.rows_of(k)[list(ranks).index(culprit)]

    def label(self, i: int) -> str:
        t = self.t
        seq = t.group_seq[i]
        return f"{t.op[i]} {t.groups[t.gid[i]].name}" + (f" #{seq}" if seq != NONE else "")

    def site(self, i: int | None) -> str:
        """Row i's site as "file.py:line" (the path's spans are named by them), made once per distinct site."""
        if i is None:
            return "start"
        full = self.t.site[i]
        short = self._sites.get(full)
        if short is None:
            head = full.partition(" in ")[0]
            path, _, line = head.rpartition(":")
            short = self._sites[full] = f"{path.rsplit('/', 1)[-1]}:{line}" if path else (head or "?")
        return short

    def cause_row(self, i: int) -> int | None:
        """The row of the arrival that row i waited for: the culprit of its collective, or its P2P peer."""
        k = self.instance_of[i]
        if k >= 0:
            j = self.culprit_row[k]
            return None if j < 0 else j
        m = self.p2p_of[i]
        if m >= 0:
            msg = self.p2p[m]
            return msg.recv if i == msg.send else msg.send
        return None

    def walk(self, row: int, t_end: int, floor: int) -> list[PathPart]:
        """The path from inside op `row` at time t_end back to `floor`, latest part first."""
        t = self.t
        parts: list[PathPart] = []
        add = parts.append
        kind, x, r, nxt, now = "op", row, t.rank[row], row, t_end
        seen: set[int] = set()  # the ops crossed to at this instant: a cycle of waits (damage) must not loop
        seen_at = now
        for _ in range(_MAX_MOVES):
            if now <= floor:
                break
            if now != seen_at:
                seen.clear()
                seen_at = now
            if kind == "op":
                st, w = t.start_ns[x], self.wait[x]
                lo = max(st + w, floor)
                if now > lo:
                    add(PathPart(r, "comm", now - lo, lo, op=self.label(x)))
                    now = lo
                if now <= floor:
                    break
                if w > 0:
                    j = self.cause_row(x)
                    if j is not None and j not in seen and t.start_ns[j] <= now:
                        seen.add(x)
                        kind, x, r = "op", j, t.rank[j]
                        continue
                    lo = max(st, floor)
                    add(PathPart(r, "wait", now - lo, lo, op=self.label(x)))
                    now = lo
                kind, nxt = "host", x
                continue
            host = self.hosts[r]
            k = host.blocked_at(now)
            if k is not None:
                y = host.row[k]
                if not t.async_op[y]:
                    kind, x = "op", y
                    continue
                end = self.fin[y]
                lo = max(end, host.a[k]) if end != NONE else host.a[k]
                if now > lo:  # returning from wait() after the op was over
                    add(PathPart(r, "comm", now - max(lo, floor), max(lo, floor), op=self.label(y)))
                    now = lo
                if now > host.a[k]:
                    kind, x = "op", y
                else:
                    nxt = y
                continue
            k = host.before(now)
            prev = host.row[k] if k is not None else None
            lo = max(host.b[k] if k is not None else floor, floor)
            if now > lo:
                add(PathPart(r, "compute", now - lo, lo, span=f"{self.site(prev)} → {self.site(nxt)}"))
                now = lo
            if prev is None:
                break
            nxt = prev
        return parts


def critical_paths(t: EventTable, collectives: CollectiveTable, instance_of, culprits, p2p: P2PTable, p2p_of,
                   event_wait_ns, steps: list[Step], step_of, straggler: StragglerVerdict | None
                   ) -> tuple[list[CriticalPath], list[DelayCause], list[WhatIf]]:
    if not len(t):
        return [], [], []
    w = _Walker(t, collectives, instance_of, culprits, p2p, p2p_of, event_wait_ns)
    windows = _windows(t, w.fin, steps, step_of)
    paths, raw = [], {}
    for index, (start, end, last) in windows.items():
        raw[index] = w.walk(last, end, start)
        paths.append(CriticalPath(index, end - start, _merged(raw[index])))
    causes = _causes(t, w, event_wait_ns)
    return paths, causes, _what_if(t, w, paths, raw, steps, straggler, collectives)


def _windows(t: EventTable, fin, steps: list[Step], step_of) -> dict[int, tuple[int, int, int]]:
    """step index -> (its start, its end, the row that finished last in it); without steps, the whole trace as
    step 0."""
    last: dict[int, int] = {}
    for i, k in enumerate(step_of if steps else [0] * len(t)):
        # the last to finish; of those finishing together, the last to arrive (the others' ops end by waiting)
        if k >= 0 and fin[i] != NONE and (k not in last or (fin[i], t.start_ns[i]) > (fin[last[k]],
                                                                                   t.start_ns[last[k]])):
            last[k] = i
    if steps:
        return {s.index: (s.start_ns, fin[last[s.index]], last[s.index]) for s in steps if s.index in last}
    return {0: (min(t.start_ns), fin[last[0]], last[0])} if last else {}


def _merged(parts: list[PathPart]) -> list[PathPart]:
    """The path from the step's start on, neighbouring parts of the same rank, kind and span or op made one."""
    out: list[PathPart] = []
    for p in reversed(parts):
        q = out[-1] if out else None
        if q is not None and (q.rank, q.kind, q.span, q.op) == (p.rank, p.kind, p.span, p.op):
            q.ns += p.ns
        elif p.ns > 0:
            out.append(PathPart(p.rank, p.kind, p.ns, p.start_ns, span=p.span, op=p.op))
    return out


def _causes(t: EventTable, w: _Walker, event_wait_ns) -> list[DelayCause]:
    """Every wait's root causes, a rank's overlapping waits counted once, worst first."""
    by_rank: dict[int, list[int]] = {}
    for i, x in enumerate(event_wait_ns):
        if x > 0:
            by_rank.setdefault(t.rank[i], []).append(i)
    total: dict[tuple[int, str, str], list] = {}
    for r, rows in by_rank.items():
        covered = -(1 << 62)
        for i in sorted(rows, key=t.start_ns.__getitem__):
            st = t.start_ns[i]
            lo, hi = max(st, covered), st + event_wait_ns[i]
            if hi <= lo:
                continue
            covered = hi
            j = w.cause_row(i)
            if j is None or j == i or t.start_ns[j] > hi:
                parts = [PathPart(r, "wait", hi - lo, lo, op=w.label(i))]
            else:
                parts = w.walk(j, hi, lo)
            for p in parts:
                key = (p.rank, p.kind, p.span or p.op or "")
                acc = total.setdefault(key, [0, set()])
                acc[0] += p.ns
                acc[1].add(r)
    causes = [DelayCause(rank, kind, what, ns, sorted(ranks)) for (rank, kind, what), (ns, ranks) in total.items()]
    causes.sort(key=lambda c: -c.caused_wait_ns)
    return causes


def _what_if(t: EventTable, w: _Walker, paths: list[CriticalPath], raw: dict[int, list[PathPart]],
             steps: list[Step], straggler: StragglerVerdict | None, collectives: CollectiveTable) -> list[WhatIf]:
    """'Rank R on time' for the named straggler."""
    if not paths or straggler is None:
        return []
    ranks = [straggler.rank]
    warm = {s.index for s in steps if s.warmup}
    steady = [p for p in paths if p.index not in warm] or paths
    before = sum(p.length_ns for p in steady) // len(steady)
    out = []
    for rank in ranks:
        excess = _compute_excess(t, w, rank, collectives)
        after = 0
        for p in steady:  # each compute part of the rank on the path ends at its arrival at the op after it
            saved = sum(min(part.ns, excess.get(part.start_ns + part.ns, 0)) for part in raw[p.index]
                        if part.rank == rank and part.kind == "compute")
            after += p.length_ns - saved
        out.append(WhatIf(f"rank {rank} on time", before, after // len(steady)))
    return out


def _compute_excess(t: EventTable, w: _Walker, rank: int, collectives: CollectiveTable) -> dict:
    """For each collective the rank entered: (the end of the rank's compute before it, i.e. its arrival) -> how
    much longer that compute was than the median of the other ranks' compute before the same collective."""
    out: dict[int, int] = {}
    for k in range(len(collectives)):
        rows = collectives[k].events
        mine = rows.get(rank)
        if mine is None or len(rows) < 2:
            continue
        spans = {r: _compute_before(t, w, i) for r, i in rows.items()}
        others = [d for r, d in spans.items() if r != rank and d is not None]
        if spans[rank] is None or not others:
            continue
        out[t.start_ns[mine]] = max(0, spans[rank] - int(median(others)))
    return out


def _compute_before(t: EventTable, w: _Walker, i: int) -> int | None:
    """How long row i's rank computed before issuing it: since the host was last blocked or issued an op."""
    host = w.hosts[t.rank[i]]
    k = host.before(t.start_ns[i])
    return None if k is None else t.start_ns[i] - host.b[k]


__all__ = ["critical_paths"]
