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
from itertools import accumulate

from ..data.columns import from_numpy
from ..data.events import NONE, EventTable
from .matching import finished
from .model import CriticalPath, DelayCause, PathPart, Step
from .tables import CollectiveTable, P2PTable

_MAX_MOVES = 1_000_000  # a bound on one walk's moves: a damaged trace must not make it loop


SPAN_ARROW = " → "  # between the sites of a compute span's name: "train.py:40 → train.py:52" (what_if.py reads it)
SYNC, ISSUE, WAIT = 0, 1, 2  # a host interval: a synchronous op's call, an async op's issue (empty), a wait() call
_KINDS = ("compute", "comm", "wait")  # a part's kind, by its code in the walk's nodes
_KIND_CODE = {k: c for c, k in enumerate(_KINDS)}
_PENDING = -2


_KEY_MASK = (1 << 33) - 1  # a state's key: its row and whether it is on the host


def _op_state(row: int, now: int) -> int:
    """The walk inside op `row` at instant `now`, as one int (a memo key without a tuple; rows < 2^32)."""
    return (now << 33) | (row << 1)


def _host_state(nxt: int, now: int) -> int:
    """The walk on the host of op `nxt`'s rank at instant `now`, in the compute before that op."""
    return (now << 33) | (nxt << 1) | 1


def _rows_by_rank(t: EventTable, as_lists: bool = True):
    """(rank, its rows in table order) for each rank, one rank's at a time (lists of every rank's rows at once
    would hold an int object per event); the rows as a list, or (as_lists=False) a numpy array."""
    import numpy as np

    rank = np.frombuffer(t.rank, dtype=np.int32)
    order = np.argsort(rank, kind="stable")
    edges = np.flatnonzero(np.diff(rank[order])) + 1
    for part in np.split(order, edges) if len(order) else ():
        yield int(rank[part[0]]), part.tolist() if as_lists else part


class _Host:
    """One rank's host: the intervals it was blocked in (sync ops, wait() calls; an async op's issue as an
    empty one, which bounds compute spans), sorted by start, with the running maximum of their ends."""

    def __init__(self, t: EventTable, rows, fin) -> None:
        import numpy as np

        rows = np.asarray(rows, np.int64)
        st = np.frombuffer(t.start_ns, np.int64)[rows]
        f = np.frombuffer(fin, np.int64)[rows]
        is_async = np.frombuffer(t.async_op, np.uint8)[rows] != 0
        ws, we = (np.frombuffer(c, np.int64)[rows] for c in (t.wait_start_ns, t.wait_end_ns))
        waited = is_async & (ws != NONE) & (we != NONE)
        sync = ~is_async
        # (an end before its start is damage: the interval is made empty)
        a = np.concatenate((st[is_async], ws[waited], st[sync]))
        b = np.concatenate((st[is_async], np.maximum(ws[waited], we[waited]),
                            np.where(f[sync] != NONE, np.maximum(st[sync], f[sync]), st[sync])))
        row = np.concatenate((rows[is_async], rows[waited], rows[sync]))
        kind = np.concatenate((np.full(int(is_async.sum()), ISSUE, np.uint8), np.full(int(waited.sum()), WAIT, np.uint8),
                               np.full(int(sync.sum()), SYNC, np.uint8)))
        order = np.lexsort((kind, row, b, a))  # (as tuples (a, b, row, kind) sort)
        # typed arrays, not lists: a list of a 1M-event trace's times holds as many int objects (32 bytes each)
        self.a, self.b, self.row = from_numpy(a[order]), from_numpy(b[order]), from_numpy(row[order])
        self.kind = kind[order].tobytes()
        self.maxb = from_numpy(np.maximum.accumulate(b[order]))

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
        self.hosts = {r: _Host(t, rows, self.fin) for r, rows in _rows_by_rank(t, as_lists=False)}
        self._sites: dict[str, str] = {}
        self._floor = min(t.start_ns) if len(t) else 0  # no walk goes before the trace's first op
        # the walk's nodes, a column each: their parts' rank, kind, start, end and rows (as in `raw`), and what
        # comes after each: a node, -1 (none) or _PENDING (not made yet: the state to find it from is
        # `_pend_now` and `_pend_key`, a state's two halves)
        self.rank_of, self.kind_of = array("i"), bytearray()
        self.lo_of, self.end_of, self.x_of, self.y_of = array("q"), array("q"), array("q"), array("q")
        self.after, self._pend_now, self._pend_key = array("q"), array("q"), array("q")
        # state -> its node, in columns by the state's key (op or host, row): nearly every key is met at one
        # instant only, and a dict of a 10M-event trace's states would take ~1 GB (an int key, an int value and
        # a slot each); a key met at a second instant goes to `_memo_more`
        self._memo_now = array("q", [-1]) * (2 * len(t))
        self._memo_node = array("q", [-1]) * (2 * len(t))
        self._memo_more: dict[int, int] = {}
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
        """Row i's site as "file.py:line" (the path's spans are named by them)."""
        return "start" if i is None else self.site_of(self.t.site[i])

    def site_of(self, full: str) -> str:
        """A site as "file.py:line", made once per distinct site."""
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

    def cause_rows(self, rows) -> "object":
        """cause_row of each of rows (a numpy array), -1 for none, in numpy."""
        import numpy as np

        out = np.full(len(rows), -1, np.int64)
        k = np.frombuffer(self.instance_of, np.int32)[rows]
        coll = k >= 0
        out[coll] = np.frombuffer(self.culprit_row, np.int64)[k[coll]]
        m = np.frombuffer(self.p2p_of, np.int32)[rows]
        msg = ~coll & (m >= 0)
        send = np.frombuffer(self.p2p.send, np.int32)[m[msg]]
        recv = np.frombuffer(self.p2p.recv, np.int32)[m[msg]]
        out[msg] = np.where(rows[msg] == send, recv, send)
        return out

    # The walk is made of nodes, one per part, made on demand and shared: a part's successor depends only on the
    # state the walk is in after it (an op at an instant, or a rank's host at an instant before an op), never on
    # where the walk began or how far back it goes, so the walks of many waits go on along the same nodes.

    def node(self, state: int) -> int:
        """The node of the first part the walk emits from `state` (-1: the walk ends there)."""
        now, key = state >> 33, state & _KEY_MASK
        if self._memo_now[key] == now:
            return self._memo_node[key]
        n = self._memo_more.get(state) if self._memo_now[key] != -1 else None
        if n is not None:
            return n
        part, after = self._advance(state)
        if part is None:
            n = -1
        else:
            n = len(self.end_of)
            r, kind, lo, ns, x, y = part
            self.rank_of.append(r)
            self.kind_of.append(_KIND_CODE[kind])
            self.lo_of.append(lo)
            self.end_of.append(lo + ns)
            self.x_of.append(x)
            self.y_of.append(y)
            if after is None:
                self.after.append(-1)
                self._pend_now.append(-1)
                self._pend_key.append(-1)
            else:
                self.after.append(_PENDING)
                self._pend_now.append(after >> 33)
                self._pend_key.append(after & _KEY_MASK)
        if self._memo_now[key] == -1:
            self._memo_now[key] = now
            self._memo_node[key] = n
        else:
            self._memo_more[state] = n
        return n

    def next(self, n: int) -> int:
        """The node after node n, back in time (-1: none)."""
        after = self.after[n]
        if after == _PENDING:
            after = self.after[n] = self.node((self._pend_now[n] << 33) | self._pend_key[n])
        return after

    def raw(self, n: int) -> tuple:
        """Node n's part as (rank, kind, start, ns, x, y)."""
        lo = self.lo_of[n]
        return (self.rank_of[n], _KINDS[self.kind_of[n]], lo, self.end_of[n] - lo, self.x_of[n], self.y_of[n])

    def walk(self, row: int, t_end: int, floor: int) -> list[tuple]:
        """The path from inside op `row` at time t_end back to `floor`, latest part first, as raw parts
        (rank, kind, start, ns, x, y): x the op's row for "comm" and "wait"; for "compute" x the row of the op
        before the span (-1: none) and y the row of the op after it (`part` makes a PathPart of one)."""
        out = []
        n = self.node(_op_state(row, t_end))
        while n >= 0:
            r, kind, lo, ns, x, y = p = self.raw(n)
            if lo + ns <= floor:
                break
            if lo < floor:
                out.append((r, kind, floor, lo + ns - floor, x, y))
                break
            out.append(p)
            n = self.next(n)
        return out

    def _advance(self, state: int) -> tuple[tuple | None, int | None]:
        """From a state (`_op_state`: inside an op at an instant; `_host_state`: on a rank's host at an instant,
        before an op of it), the walk's next part and the state after it; (None, None) where the walk ends (the
        trace's start, or nothing before)."""
        t, floor = self.t, self._floor
        start, wait, fin, async_op, rank_of = t.start_ns, self.wait, self.fin, t.async_op, t.rank
        now, row = state >> 33, (state >> 1) & 0xFFFFFFFF
        if state & 1:
            kind, nxt, r, x = "host", row, rank_of[row], None
        else:
            kind, x, r, nxt = "op", row, None, None
        # the ops visited at this instant (the walk's moves here do not change it): waits that lead back to one of
        # them (a ring of sends each waiting for its peer's recv, or damage) are a cycle, not a cause to follow
        seen = None
        for _ in range(_MAX_MOVES):
            if now <= floor:
                return None, None
            if kind == "op":
                if seen is None:
                    seen = {x}
                else:
                    seen.add(x)
                r = rank_of[x]
                st, w = start[x], wait[x]
                if now < st:  # an arrival after the wait it ended: the clocks' error; its rank computed till now
                    kind, nxt = "host", x
                    continue
                lo = max(st + w, floor)
                if now > lo:
                    return (r, "comm", lo, now - lo, x, -1), _op_state(x, lo)
                if w > 0:
                    j = self.cause_row(x)
                    if j is not None and j not in seen:
                        x = j
                        continue
                    lo = max(st, floor)
                    if now > lo:
                        return (r, "wait", lo, now - lo, x, -1), _host_state(x, lo)
                kind, nxt = "host", x
                continue
            host = self.hosts[r]
            k = host.blocked_at(now)
            if k is not None:
                y = host.row[k]
                if not async_op[y]:
                    kind, x = "op", y
                    continue
                end = fin[y]
                lo = max(end, host.a[k]) if end != NONE else host.a[k]
                if now > lo:  # returning from wait() after the op was over
                    lo2 = max(lo, floor)
                    after = _op_state(y, lo) if lo > host.a[k] else _host_state(y, lo)
                    return (r, "comm", lo2, now - lo2, y, -1), after
                if now > host.a[k]:
                    kind, x = "op", y
                else:
                    nxt = y
                continue
            k = host.before(now)
            prev = host.row[k] if k is not None else -1
            lo = max(host.b[k] if k is not None else floor, floor)
            if now > lo:
                return (r, "compute", lo, now - lo, prev, nxt), (_host_state(prev, lo) if prev >= 0 else None)
            if prev < 0:
                return None, None
            nxt = prev
        return None, None

    def span(self, prev: int, nxt: int) -> str:
        """A compute span's name: the sites of the ops around it, "train.py:40 → train.py:52"."""
        return SPAN_ARROW.join((self.site(prev if prev >= 0 else None), self.site(nxt)))

    def part(self, raw: tuple) -> PathPart:
        r, kind, lo, ns, x, y = raw
        if kind == "compute":
            return PathPart(r, kind, ns, lo, span=self.span(x, y), row=y)
        return PathPart(r, kind, ns, lo, op=self.label(x), row=x)

    def compute_before(self, i: int) -> int | None:
        """How long row i's rank computed before issuing it: since the host was last blocked or issued an op."""
        host = self.hosts[self.t.rank[i]]
        k = host.before(self.t.start_ns[i])
        return None if k is None else self.t.start_ns[i] - host.b[k]


def critical_paths(t: EventTable, collectives: CollectiveTable, instance_of, culprits, p2p: P2PTable, p2p_of,
                   event_wait_ns, steps: list[Step], step_of) -> tuple[list[CriticalPath], list[DelayCause], "_Walker"]:
    """Each step's critical path, the waits' root causes, and the walker (the hosts' intervals, which the what-if
    re-times)."""
    w = _Walker(t, collectives, instance_of, culprits, p2p, p2p_of, event_wait_ns)
    if not len(t):
        return [], [], w
    paths = []
    for index, (start, end, last) in _windows(t, w.fin, steps, step_of).items():
        paths.append(CriticalPath(index, end - start, _merged([w.part(p) for p in w.walk(last, end, start)])))
    return paths, _causes(t, w, event_wait_ns), w


def _windows(t: EventTable, fin, steps: list[Step], step_of) -> dict[int, tuple[int, int, int]]:
    """step index -> (its start, its end, the row that finished last in it); without steps, the whole trace as
    step 0. In numpy: the last to finish; of those finishing together, the last to arrive (the others' ops end by
    waiting); of those, the first row."""
    import numpy as np

    n = len(t)
    k = np.frombuffer(step_of, np.int32).astype(np.int64) if steps else np.zeros(n, np.int64)
    f, st = np.frombuffer(fin, np.int64), np.frombuffer(t.start_ns, np.int64)
    rows = np.flatnonzero((k >= 0) & (f != NONE))
    order = rows[np.lexsort((-rows, st[rows], f[rows], k[rows]))]
    ks = k[order]
    ends = np.flatnonzero(np.append(ks[1:] != ks[:-1], True)) if len(order) else order
    last = dict(zip(ks[ends].tolist(), order[ends].tolist()))
    if steps:
        return {s.index: (s.start_ns, fin[last[s.index]], last[s.index]) for s in steps if s.index in last}
    return {0: (min(t.start_ns), fin[last[0]], last[0])} if last else {}


def _merged(parts: list[PathPart]) -> list[PathPart]:
    """The path from the step's start on (parts come latest first), neighbouring parts of the same rank, kind and
    span or op made one."""
    out: list[PathPart] = []
    for p in reversed(parts):
        q = out[-1] if out else None
        if q is not None and (q.rank, q.kind, q.span, q.op) == (p.rank, p.kind, p.span, p.op):
            q.ns += p.ns
        elif p.ns > 0:
            out.append(p)
    return out


def _walks(wj: array, whi: array, wr: array, wlo: array) -> list[tuple[int, int]]:
    """The waits (columns: the row waited for, the instant it was waited for until, the waiting rank, the wait's
    start), put in order in place: those of one walk (the same row and instant) together, each walk's by start,
    latest first. Returns each walk's [g0, g1), walks in the order of their first wait (the order the causes are
    first met in, which orders causes of equal cost)."""
    import numpy as np

    if not len(wj):
        return []
    cols = [np.frombuffer(c, dtype=np.int64) for c in (wj, whi, wr, wlo)]
    order = np.lexsort((-cols[3], cols[1], cols[0]))  # (stable: equal starts keep their order)
    for c in cols:
        c[:] = c[order]
    j, hi = cols[0], cols[1]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (j[1:] != j[:-1]) | (hi[1:] != hi[:-1])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(order))
    visit = np.argsort(np.minimum.reduceat(order, starts), kind="stable")
    return list(zip(starts[visit].tolist(), ends[visit].tolist()))


def _causes(t: EventTable, w: _Walker, event_wait_ns) -> list[DelayCause]:
    """Every wait's root causes, a rank's overlapping waits counted once, worst first. A cause is a rank's compute
    span, or its communication or unexplained waiting in an op kind and group.

    The ranks that waited for the same arrival (a collective's culprit) share one walk back from it: the walk
    does not depend on how far back it goes, so each wait takes the part of it down to its own start."""
    sites, ops, gids, start = t.site.codes, t.op.codes, t.gid, t.start_ns
    # the totals by cause, each cause a small int (its key's index into the lists): the walks' loop below runs
    # once per node of every wait's walk (~500k on a 200k-event trace)
    index: dict[tuple, int] = {}  # (rank, kind, x, y) -> its slot
    sums: list[int] = []
    delayed: list[set[int]] = []
    seen: list[int] = []  # slot -> the token of the ranks it holds already (see below)

    def slot(r: int, kind: str, x: int, y: int) -> int:
        # a compute span by the sites around it; communication or waiting by its op kind and group
        k = (r, kind, sites[x] if x >= 0 else -1, sites[y]) if kind == "compute" else (r, kind, ops[x], gids[x])
        i = index.get(k)
        if i is None:
            i = index[k] = len(sums)
            sums.append(0)
            delayed.append(set())
            seen.append(-1)
        return i

    # each wait as its walk's start (the arrival waited for: row j at instant hi) and its own (rank r from lo): a
    # rank's waits in table order (by start), each from where its earlier ones reached
    import numpy as np

    waits = np.frombuffer(event_wait_ns, np.int64)
    starts = np.frombuffer(start, np.int64)
    found = []
    for r, rows in _rows_by_rank(t, as_lists=False):
        rows = rows[waits[rows] > 0]
        st = starts[rows]
        hi = st + waits[rows]
        reach = np.maximum.accumulate(hi)  # (a wait that adds nothing reaches no further than the ones before)
        lo = np.maximum(st, np.concatenate(([-(1 << 62)], reach[:-1])))
        keep = hi > lo
        rows, lo, hi = rows[keep], lo[keep], hi[keep]
        j = w.cause_rows(rows)
        alone = (j < 0) | (j == rows)
        for i, a, b in zip(rows[alone].tolist(), lo[alone].tolist(), hi[alone].tolist()):
            k = slot(r, "wait", i, -1)
            sums[k] += b - a
            delayed[k].add(r)
        found.append((j[~alone], hi[~alone], np.full(int((~alone).sum()), r, np.int64), lo[~alone]))
    wj, whi, wr, wlo = (from_numpy(np.concatenate([f[c] for f in found]) if found else np.zeros(0, np.int64))
                        for c in range(4))
    kidx = array("i")  # node -> its cause's slot
    after, lo_of, end_of = w.after, w.lo_of, w.end_of
    token = 0  # names the set of ranks still covered down a walk (a new one each time it shrinks)
    for g0, g1 in _walks(wj, whi, wr, wlo):
        # one walk for all the waits of this arrival (a collective's 63 waiting ranks): down it, a node is
        # covered whole by the waits that began before it, in part by those that began inside it (each wait
        # only in one node, its last), and by none below their start: O(nodes + waits), not their product.
        # The waits g0..g1 are by start, latest first: the shortest drops out first
        p = g0
        ranks = None
        n = w.node(_op_state(wj[g0], whi[g0]))
        while n >= 0:
            end = end_of[n]
            while p < g1 and wlo[p] >= end:
                p += 1
                ranks = None
            if p == g1:
                break
            while n >= len(kidx):
                q = len(kidx)
                kidx.append(slot(w.rank_of[q], _KINDS[w.kind_of[q]], w.x_of[q], w.y_of[q]))
            k = kidx[n]
            a = lo_of[n]
            q, ns = p, 0
            while q < g1 and wlo[q] > a:
                ns += end - wlo[q]
                q += 1
            sums[k] += ns + (g1 - q) * (end - a)
            if ranks is None:
                token += 1
                ranks = set(wr[p:g1])
            if seen[k] != token:
                seen[k] = token
                delayed[k] |= ranks
            nxt = after[n]
            n = nxt if nxt != _PENDING else w.next(n)
    causes = []
    for (rank, kind, x, y), i in index.items():
        ns, ranks = sums[i], delayed[i]
        if ns <= 0:  # a node made by a walk but past every wait's start
            continue
        if kind == "compute":
            what = SPAN_ARROW.join((w.site_of(t.site.values[x]) if x >= 0 else "start", w.site_of(t.site.values[y])))
        else:
            what = f"{t.op.values[x]} {t.groups[y].name}"
        causes.append(DelayCause(rank, kind, what, ns, sorted(ranks)))
    causes.sort(key=lambda c: (-c.caused_wait_ns, c.rank, c.kind, c.span))  # (ties in a fixed order)
    return causes


__all__ = ["critical_paths"]
