"""Why a step is as long as it is: its critical path across ranks, the causes of its waits, what a change saves.

Definitions (Scalasca's, for MPI, in PyTorch's words: Schulz, "Extracting critical path graphs from MPI
applications", Cluster 2005; Böhme et al., "Identifying the root causes of wait states in large-scale parallel
applications", ICPP 2010; docs/ARCHITECTURE.md, "The critical path"):

- A rank's host is *blocked* in a synchronous op for its whole call, and in an async op only inside the wait()
  that blocked on it (DDP's, in C++ on a CPU backend: its reducer's at the end of backward(), its broadcasts' at
  once: `reducer_waits`); an async op issued without a wait() (FSDP2's) runs beside the host, which goes on
  computing. Between the ops it is blocked in, the host *computes*: a compute span is named by the sites of the ops
  around it, "train.py:40 → train.py:52".
- Inside an op, the part from its arrival to the arrival it needed is *waiting* (waits/wait_states.py); the rest of the op is
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

import re
from bisect import bisect_left

from ...data.table.columns import as_int64, groups_of, order_by, repeat_each, run_starts, stable_order, unique_inverse
from ...data.table import NONE, EventTable
from ..core.matching import finished
from ..core.results import CriticalPath, DelayCause, PathPart, Step
from ..core.tables import CollectiveTable, P2PTable
from ..waits.wait_states import reach_before
from . import backward_walk
from .backward_walk import KINDS as _KINDS, run

SPAN_ARROW = " → "  # between the sites of a compute span's name: "train.py:40 → train.py:52" (causal/what_if.py reads it)
SYNC, ISSUE, WAIT = 0, 1, 2  # a host interval: a synchronous op's call, an async op's issue (empty), a wait() call


class _Host:
    """One rank's host: the intervals it was blocked in (sync ops, wait() calls; an async op's issue as an
    empty one, which bounds compute spans), sorted by start, with the running maximum of their ends (slices of
    _hosts' columns)."""

    def __init__(self, a, b, row, kind, maxb) -> None:
        # views of the columns, not lists nor copies: read one by one (bisect, indexing) at C speed, Python ints out,
        # and no second copy of every interval (tens of bytes an event)
        self.a, self.b, self.row, self.kind, self.maxb = map(memoryview, (a, b, row, kind, maxb))

    def before(self, t: int) -> int | None:
        """The interval that ended last before instant t (its end < t), by its index (causal/backward_walk.py finds it so)."""
        k = bisect_left(self.a, t) - 1
        best = None
        while k >= 0:
            if self.b[k] < t and (best is None or self.b[k] > self.b[best]):
                best = k
            if best is not None and self.maxb[k] <= self.b[best]:
                break
            k -= 1
        return best


def _hosts(t: EventTable, fin):
    """Every rank's host intervals as columns (a, b, row, kind, maxb), ranks one after another (each rank's
    sorted as tuples (a, b, row, kind) sort), their ranks in order, where each rank's begin (len + 1), and each
    row's rank's index among them."""
    import numpy as np

    st, f = np.frombuffer(t.start_ns, np.int64), np.frombuffer(fin, np.int64)
    is_async = np.frombuffer(t.async_op, np.uint8) != 0
    ws, we = reducer_waits(t, st, f, is_async)
    waited = is_async & (ws != NONE) & (we != NONE)
    sync = ~is_async
    rows = np.arange(len(t), dtype=np.int64)
    # (an end before its start is damage: the interval is made empty)
    a = np.concatenate((st[is_async], ws[waited], st[sync]))
    b = np.concatenate((st[is_async], np.maximum(ws[waited], we[waited]),
                        np.where(f[sync] != NONE, np.maximum(st[sync], f[sync]), st[sync])))
    row = np.concatenate((rows[is_async], rows[waited], rows[sync]))
    kind = np.concatenate((np.full(int(is_async.sum()), ISSUE, np.uint8), np.full(int(waited.sum()), WAIT, np.uint8),
                           np.full(int(sync.sum()), SYNC, np.uint8)))
    ranks, hid = unique_inverse(np.frombuffer(t.rank, np.int32))
    hid = hid.astype(np.int64).ravel()
    order = order_by(hid[row], a, b, row, kind)
    a, b, row, kind = a[order], b[order], row[order], kind[order]
    device = _device_timed(t)[row]
    a, b = _after_blocking(hid[row], a, b, kind, device)
    if device.any() and not device.all():  # (a host's start moved past a kernel's that it preceded: sorted again)
        order = order_by(hid[row], a, b, row, kind)
        a, b, row, kind = a[order], b[order], row[order], kind[order]
    off = np.searchsorted(hid[row], np.arange(len(ranks) + 1))
    maxb = np.empty_like(b)
    for h in range(len(ranks)):
        maxb[off[h]:off[h + 1]] = np.maximum.accumulate(b[off[h]:off[h + 1]])
    return (a, b, row, kind, maxb), ranks, off, hid


def _after_blocking(host, a, b, kind, device) -> tuple:
    """The intervals (each host's sorted by start) with each start no earlier than the end of the host's blocking
    intervals (sync ops, wait() calls) that started before it: its op was issued once the host was back. A
    synchronous op's start recorded a few µs before the previous one's end (each is its own clock read: a
    reduce-scatter's end and the next all-reduce's start) is a clock read order, not an overlap; left as read, the
    compute before it would be measured from the op before the previous one, and that whole op, its wait included,
    read as compute. Intervals that start together (DDP's reducer waits for its buckets at once) are not pushed
    after one another; an async op's issue is not blocking, so its end after the next issue stays an overlap; nor
    is an interval the device timed (`device`: a profiler's kernel, _device_timed), whose overlaps with the next
    are real (a batch's send and recv kernels run at once on their streams). Where no interval is the device's, the
    order stays the same (each start moves no further than the ends before it)."""
    import numpy as np

    low = np.iinfo(np.int64).min
    reach = reach_before(np.where((kind != ISSUE) & ~device, b, low), run_starts(host))
    first = np.flatnonzero(run_starts(host, a))  # (intervals that start together share the ends before them)
    reach = repeat_each(reach[first], np.diff(np.append(first, len(a))))
    a = np.where(device, a, np.maximum(a, reach))
    return a, np.maximum(b, a)


_DEVICE_TIMED = re.compile(rb'"host_start_ns"')


def _device_timed(t: EventTable):
    """Per row, whether its interval is the device's, not its host's call: an op that keeps its host's issue
    beside it (`host_start_ns`, docs/FORMAT.md: a profiler trace's kernel)."""
    import numpy as np

    out = np.zeros(len(t), bool)
    rows = [i for i, v in t.extra.items(maybe=_DEVICE_TIMED)
            if isinstance(v, dict) and v.get("host_start_ns") is not None]
    out[rows] = True
    return out


REDUCER_API = "ddp.reducer_allreduce"  # DDP's gradient all-reduces (record/capture.py names them so)
DDP_API = "ddp."  # the api of an op DDP issued from C++ (no torch.distributed call on the stack: record/callsite.py)


def reducer_waits(t: EventTable, st, f, is_async) -> tuple:
    """Each row's wait() as the host model sees it (start, end; NONE: none), as numpy columns: the job's own, and
    DDP's reducer's. At the end of backward() the reducer waits in C++ for every bucket it issued (no Python wait()
    shows it) and backward() returns once they are done; on a CPU backend that blocks the host, so a waiting rank's
    `backward()` is a wait, not compute. Each of a backward's buckets (a run of reducer all-reduces on a rank, with
    no other op between them, each issued before the ones before it all ended) is taken as waited from the run's
    last issue to its end. On NCCL the reducer only makes the stream wait: nothing is added there.

    A bucket's recorded end is its future's callback, which needs the GIL and can come milliseconds after the C++
    wait returned: after the rank's next backward issued its first bucket (2-rank gloo DDP jobs, a few steps in
    15; on a busy machine, four backwards in a row). So a run is cut into backwards of the rank's bucket count
    (`_whole_backwards`), and the wait ends no later than the rank's next op's issue (its host was back by then).

    DDP's other collectives (its start-up's broadcasts and shape check, each forward's broadcast of the buffers and
    the second forward's of the rebuilt buckets: `_broadcast_coalesced`, the reducer's bucket sync) are issued from
    C++ too, and waited for there at once: each is waited from its issue to its end, no later than the rank's next
    issue. Read as issued only, a relay rank's wait in gloo's broadcast tree for a late rank would be its compute."""
    import numpy as np

    ws, we = (np.frombuffer(c, np.int64) for c in (t.wait_start_ns, t.wait_end_ns))
    ddp = [i for i, v in enumerate(t.api.values) if v.startswith(DDP_API)]
    if not ddp:
        return ws, we
    rank = np.frombuffer(t.rank, np.int32)
    blocking = np.array([r not in t.ranks or "nccl" not in t.ranks[r].backend for r in range(int(rank.max()) + 1)])
    unwaited = is_async & (ws == NONE) & (f != NONE) & blocking[rank]
    api = np.asarray(t.api.codes)
    red = unwaited & (api == (t.api.values.index(REDUCER_API) if REDUCER_API in t.api.values else -1))
    at_once = unwaited & ~red & np.isin(api, ddp)
    if not (red.any() or at_once.any()):
        return ws, we
    order = stable_order(rank)  # each rank's rows in table (issue) order
    # each row's rank's next issue: its host was back from a wait by then
    next_issue = np.full(len(order), np.iinfo(np.int64).max)
    same = rank[order[1:]] == rank[order[:-1]]
    next_issue[order[:-1][same]] = st[order[1:][same]]
    ws, we = ws.copy(), we.copy()
    ws[at_once] = st[at_once]
    we[at_once] = np.maximum(st[at_once], np.minimum(f[at_once], next_issue[at_once]))
    if not red.any():
        return ws, we
    r, mine = rank[order], red[order]
    after = np.concatenate(([False], mine[:-1] & (r[1:] == r[:-1])))  # the rank's row before is one too
    rows = order[mine]
    # ... and issued before the rank's earlier buckets all ended (else the backward before had returned)
    ended = reach_before(f[rows], run_starts(rank[rows]))
    first = _whole_backwards(np.flatnonzero(~after[mine] | (st[rows] >= ended)), rank[rows],
                             as_int64(t.bytes)[rows])  # each run's first, among the reducer rows
    counts = np.diff(np.append(first, len(rows)))
    last_issue = np.maximum.reduceat(st[rows], first)
    ws[rows] = repeat_each(last_issue, counts)
    # (until the rank's next issue after the run's last bucket)
    we[rows] = np.maximum(ws[rows], np.minimum(f[rows], repeat_each(next_issue[rows[first + counts - 1]], counts)))
    return ws, we


def _whole_backwards(first, rank, nbytes):
    """The runs' firsts (indexes into a rank-ordered column of reducer rows), with each run longer than its rank's
    backward cut into backwards. A backward's bucket count is the shortest of the rank's run lengths (after its first
    backward: DDP rebuilds its buckets once, then all-reduces each once a backward, in one order) by which its
    bucket sizes repeat; where every bucket has one size, the most common run length. Sizes that repeat by none
    (a backward that skipped a bucket) leave the runs as they are."""
    import numpy as np

    counts = np.diff(np.append(first, len(rank)))
    cuts = []
    for r in np.unique(rank[first]).tolist():
        mine = np.flatnonzero(rank[first] == r)[1:]  # (after the first backward)
        if not len(mine):
            continue
        sizes = nbytes[int(first[mine[0]]):int(first[mine[-1]] + counts[mine[-1]])]
        lengths, seen = np.unique(counts[mine], return_counts=True)
        if (sizes == sizes[0]).all():
            period = int(lengths[np.argmax(seen)])
        else:
            period = next((p for p in lengths.tolist()[:16] if np.array_equal(sizes[:-p], sizes[p:])), 0)
        long = mine[counts[mine] > period] if period else mine[:0]
        for a, n in zip(first[long].tolist(), counts[long].tolist()):
            cuts.extend(range(a + period, a + n, period))
    return np.union1d(first, np.array(cuts, np.int64)) if cuts else first


class _Walker:
    """What the walks (causal/backward_walk.py) read, prepared: the ops' ends, each rank's host, each collective's row of the
    rank waited for; and the names of the parts they find."""

    def __init__(self, t: EventTable, collectives: CollectiveTable, instance_of, culprits: list, p2p: P2PTable,
                 p2p_of) -> None:
        import numpy as np

        self.t = t
        self.fin = finished(t)
        self.instance_of, self.p2p, self.p2p_of = instance_of, p2p, p2p_of
        self.columns, ranks, self.off, self.hid = _hosts(t, self.fin)
        self.hosts = {int(r): _Host(*(c[self.off[h]:self.off[h + 1]] for c in self.columns))
                      for h, r in enumerate(ranks.tolist())}
        a, _, row, kind, _ = self.columns
        issued = kind != WAIT
        self.arrival = np.frombuffer(t.start_ns, np.int64).copy()  # each op's issue as its host ran it (_hosts)
        self.arrival[row[issued]] = a[issued]
        self._sites: dict[str, str] = {}
        self._spans: dict[tuple[int, int], str] = {}
        self.floor = int(np.frombuffer(t.start_ns, np.int64).min()) if len(t) else 0  # (no walk goes before it)
        self.culprit_row = collectives.culprit_rows(culprits)

    def label(self, i: int) -> str:
        """Row i's op as a path part names it: "all_reduce world #12"."""
        t = self.t
        seq = t.group_seq[i]
        return f"{t.op[i]} {t.groups[t.gid[i]].name}" + (f" #{seq}" if seq != NONE else "")

    def site_of(self, full: str) -> str:
        """A site as "file.py:line", made once per distinct site."""
        short = self._sites.get(full)
        if short is None:
            head = full.partition(" in ")[0]
            path, _, line = head.rpartition(":")
            short = self._sites[full] = f"{path.rsplit('/', 1)[-1]}:{line}" if path else (head or "?")
        return short

    def cause_rows(self, rows) -> "object":
        """The row of the arrival each of rows (a numpy array) waited for: its collective's culprit's, or its
        message's other end; -1 for none."""
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

    def span(self, prev: int, nxt: int) -> str:
        """A compute span's name: the sites of the ops around it (prev -1: none, "start"), "train.py:40 →
        train.py:52"; made once per pair of sites."""
        codes = self.t.site.codes
        key = (codes[prev] if prev >= 0 else -1, codes[nxt])
        name = self._spans.get(key)
        if name is None:
            values = self.t.site.values
            name = self._spans[key] = SPAN_ARROW.join(
                (self.site_of(values[key[0]]) if prev >= 0 else "start", self.site_of(values[key[1]])))
        return name

    def part(self, raw: tuple) -> PathPart:
        r, kind, lo, ns, x, y = raw
        if kind == "compute":
            return PathPart(r, kind, ns, lo, span=self.span(x, y), row=y)
        return PathPart(r, kind, ns, lo, op=self.label(x), row=x)


def critical_paths(t: EventTable, collectives: CollectiveTable, instance_of, culprits, p2p: P2PTable, p2p_of,
                   event_wait_ns, windows: dict, step_of) -> tuple[list[CriticalPath], list[DelayCause], "_Walker"]:
    """Each step's critical path (`windows`: step_windows'), the waits' root causes, and the walker (the hosts'
    intervals, which the what-if re-times). The causes are those of the steady steps' waits, ranked among
    themselves, then each rank's start-up apart (`_startup`): the waits of the warm-up steps and outside the steps
    are walked only for what start-up caused (ARCHITECTURE.md, "The critical path")."""
    import numpy as np

    w = _Walker(t, collectives, instance_of, culprits, p2p, p2p_of)
    if not len(t):
        return [], [], w
    index = list(windows)
    s_floor, s_end, s_row = (np.array([windows[k][c] for k in index], np.int64).reshape(-1) for c in range(3))
    alone, found = _waits(t, w, event_wait_ns)
    steady = _steady_rows(step_of, windows, len(t))
    in_steady = steady[found[4]]  # (by the waiting op's step)
    walk = _walk_with(t, w, event_wait_ns, p2p)
    parts, off, keys, sums, bits = walk(*_only(found[:4], in_steady), s_row, s_end, s_floor)
    raw = [(r, _KINDS[c], lo, ns, x, y) for r, c, lo, ns, x, y in parts.tolist()]
    paths = [CriticalPath(k, windows[k][1] - windows[k][0], _merged([w.part(p) for p in raw[off[i]:off[i + 1]]]))
             for i, k in enumerate(index)]
    ops, gids = as_int64(t.op.codes), as_int64(t.gid)
    keys, sums, bits = _with_alone(keys, sums, bits, _only(alone, steady[alone[1]]), ops, gids)
    start = (keys[:, 1] == backward_walk.COMPUTE) & (keys[:, 2] < 0)  # ("start → ...": a rank's compute before its first op)
    early = [(keys[start], sums[start], bits[start])]
    if not in_steady.all():  # the other waits, walked for what start-up caused them only
        none = np.zeros(0, np.int64)
        _, _, k2, s2, b2 = walk(*_only(found[:4], ~in_steady), none, none, none)
        mine = (k2[:, 1] == backward_walk.COMPUTE) & (k2[:, 2] < 0)
        early.append((k2[mine], s2[mine], b2[mine]))
    return paths, (_causes(t, w, keys[~start], sums[~start], bits[~start]) + _startup(t, w, *map(
        np.concatenate, zip(*early)))), w


def _with_alone(keys, sums, bits, alone, ops, gids) -> tuple:
    """The walks' causes (keys, sums, bits: backward_walk.walk_loop's) with the waits that have no arrival to walk back
    from: each is its own rank's waiting in its op kind and group."""
    import numpy as np

    rank, row, lo, hi = alone
    if not len(row):
        return keys, sums, bits
    more = np.zeros((len(row), bits.shape[1]), np.uint64)
    more[np.arange(len(row)), rank >> 6] = np.left_shift(np.uint64(1), (rank & 63).astype(np.uint64))
    keys = np.concatenate((keys, np.stack((rank, np.full(len(row), backward_walk.WAIT), ops[row], gids[row]), 1)))
    keys, which = np.unique(keys, axis=0, return_inverse=True)
    which = which.ravel()
    total = np.zeros(len(keys), np.int64)
    np.add.at(total, which, np.concatenate((sums, hi - lo)))
    ranks = np.zeros((len(keys), bits.shape[1]), np.uint64)
    np.bitwise_or.at(ranks, which, np.concatenate((bits, more)))
    return keys, total, ranks


def _steady_rows(step_of, windows: dict, n: int):
    """Which event rows are in a steady step (step_windows' windows say which steps are warm-up); without steps,
    every row. Rows outside the steps (set-up before the first, the end) are not."""
    import numpy as np

    k = np.frombuffer(step_of, np.int32) if len(step_of) == n else np.full(n, -1, np.int32)
    if not (k >= 0).any():
        return np.ones(n, bool)
    steady = np.zeros(int(k.max()) + 2, bool)  # (index -1, outside the steps, reads the last: False)
    steady[[i for i, win in windows.items() if not win[3]]] = True
    return steady[k]


def _only(cols: tuple, keep) -> tuple:
    """The waits' columns (_waits') where keep is true."""
    return tuple(c[keep] for c in cols)


def _walk_with(t: EventTable, w: "_Walker", event_wait_ns, p2p: P2PTable):
    """walk(wj, whi, wr, wlo, s_row, s_end, s_floor) -> backward_walk.walk_loop's (parts, part_off, keys, sums, bits): the
    steps' paths and the causes of the waits given, over the trace's columns (read once)."""
    import numpy as np

    a, b, row, _kind, maxb = w.columns
    words = int(np.frombuffer(t.rank, np.int32).max()) // 64 + 1
    cols = (np.frombuffer(t.start_ns, np.int64), np.frombuffer(event_wait_ns, np.int64),
            np.frombuffer(w.fin, np.int64), np.frombuffer(t.async_op, np.uint8), np.frombuffer(t.rank, np.int32),
            w.hid, np.frombuffer(w.instance_of, np.int32), w.culprit_row, np.frombuffer(w.p2p_of, np.int32),
            np.frombuffer(p2p.send, np.int32), np.frombuffer(p2p.recv, np.int32),
            a, b, row, maxb, w.off.astype(np.int64), w.floor)
    sites, ops, gids = as_int64(t.site.codes), as_int64(t.op.codes), as_int64(t.gid)

    def walk(wj, whi, wr, wlo, s_row, s_end, s_floor):
        g0s, g1s = _walks(wj, whi, wr, wlo)
        return run(len(t), *cols, s_row, s_end, s_floor, wj, whi, wr, wlo, g0s, g1s, sites, ops, gids, words)

    return walk


def step_windows(t: EventTable, steps: list[Step], step_of) -> dict[int, tuple[int, int, int, bool]]:
    """step index -> (its start, its end, the row that finished last in it, whether it is warm-up); without steps,
    the whole trace as step 0. In numpy: the last to finish; of those finishing together, the last to arrive (the
    others' ops end by waiting); of those, the first row. (What critical_paths walks back from: taken from the
    steps before later stages fill their waits in, so that it can run beside them.)"""
    import numpy as np

    fin = finished(t)
    n = len(t)
    k = np.frombuffer(step_of, np.int32).astype(np.int64) if steps else np.zeros(n, np.int64)
    f, st = np.frombuffer(fin, np.int64), np.frombuffer(t.start_ns, np.int64)
    rows = np.flatnonzero((k >= 0) & (f != NONE))
    order = rows[order_by(k[rows], f[rows], st[rows], -rows)]
    ks = k[order]
    ends = np.flatnonzero(np.append(ks[1:] != ks[:-1], True)) if len(order) else order
    last = dict(zip(ks[ends].tolist(), order[ends].tolist()))
    if steps:
        return {s.index: (s.start_ns, fin[last[s.index]], last[s.index], s.warmup) for s in steps if s.index in last}
    return {0: (min(t.start_ns), fin[last[0]], last[0], False)} if last else {}


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


def _walks(wj, whi, wr, wlo) -> tuple:
    """The waits (columns: the row waited for, the instant it was waited for until, the waiting rank, the wait's
    start), put in order in place: those of one walk (the same row and instant) together, each walk's by start,
    latest first. Returns each walk's [g0, g1) as two columns, walks in time order (one after another, the walks
    read the nodes and the columns near the last ones, which the cache still holds, as the waits' order would not)."""
    import numpy as np

    if not len(wj):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cols = (wj, whi, wr, wlo)
    order = order_by(wj, whi, -wlo)  # (stable: equal starts keep their order)
    for c in cols:
        c[:] = c[order]
    starts = np.flatnonzero(run_starts(wj, whi))
    ends = np.append(starts[1:], len(order))
    visit = order_by(whi[starts], wj[starts])
    return starts[visit].astype(np.int64), ends[visit].astype(np.int64)


def _waits(t: EventTable, w: _Walker, event_wait_ns) -> tuple[tuple, tuple]:
    """Every wait as a walk's start (the arrival waited for: row j at instant hi) and its own (rank r from lo): a
    rank's waits in table order (by start), each from where its earlier ones reached. Returns the waits with no
    arrival to walk back from (columns: rank, row, lo, hi) and the others (row waited for, hi, rank, lo, the
    waiting row)."""
    import numpy as np

    waits = np.frombuffer(event_wait_ns, np.int64)
    starts = np.frombuffer(t.start_ns, np.int64)
    alone, found = [], []
    for r, rows in groups_of(np.frombuffer(t.rank, np.int32)):  # (each rank's rows in table order)
        rows = rows[waits[rows] > 0]
        st = starts[rows]
        hi = st + waits[rows]
        reach = np.maximum.accumulate(hi)  # (a wait that adds nothing reaches no further than the ones before)
        lo = np.maximum(st, np.concatenate(([-(1 << 62)], reach[:-1])))
        keep = hi > lo
        rows, lo, hi = rows[keep], lo[keep], hi[keep]
        j = w.cause_rows(rows)
        one = (j < 0) | (j == rows)
        alone.append((np.full(int(one.sum()), r, np.int64), rows[one], lo[one], hi[one]))
        found.append((j[~one], hi[~one], np.full(int((~one).sum()), r, np.int64), lo[~one], rows[~one]))

    def cat(parts, c):
        return np.concatenate([f[c] for f in parts]).astype(np.int64) if parts else np.zeros(0, np.int64)

    return tuple(cat(alone, c) for c in range(4)), tuple(cat(found, c) for c in range(5))


def _causes(t: EventTable, w: _Walker, keys, sums, bits) -> list[DelayCause]:
    """The waits' root causes from the walks' totals (causal/backward_walk.py), worst first. A cause is a rank's compute span,
    or its communication or unexplained waiting in an op kind and group."""
    import numpy as np

    causes, order = [], []
    for (rank, kind, x, y), ns, b in zip(keys.tolist(), sums.tolist(), bits):
        if ns <= 0:  # a node made by a walk but past every wait's start
            continue
        if kind == backward_walk.COMPUTE:
            what = SPAN_ARROW.join((w.site_of(t.site.values[x]) if x >= 0 else "start", w.site_of(t.site.values[y])))
        else:
            what = f"{t.op.values[x]} {t.groups[y].name}"
        ranks = np.flatnonzero(np.unpackbits(b.view(np.uint8), bitorder="little")).tolist()
        causes.append(DelayCause(rank, _KINDS[kind], what, ns, ranks))
        order.append((-ns, rank, _KINDS[kind], what, x, y))  # (two sites can be named alike: then by their codes)
    return [causes[i] for i in sorted(range(len(causes)), key=order.__getitem__)]


def _startup(t: EventTable, w: _Walker, keys, sums, bits) -> list[DelayCause]:
    """Each rank's start-up, kept apart from the steps' causes: its compute before its first op ("start → the
    first op's site"), the time from the trace's first op to its own first (startup_ns: what the others can wait
    for: imports, loading, building the model) and the waiting the walks found it caused (keys, sums, bits: the
    walks' totals for the "start" spans). Every rank that started after the trace's first op or caused waiting,
    the costliest first."""
    import numpy as np

    firsts = w.columns[2][w.off[:-1]]  # each host's first interval's op (a host's are sorted by start)
    out = []
    for r, first in zip(np.frombuffer(t.rank, np.int32)[firsts].tolist(), firsts.tolist()):
        mine = keys[:, 0] == r
        late = t.start_ns[first] - w.floor
        caused = int(sums[mine].sum())
        if late <= 0 and caused <= 0:
            continue
        b = np.bitwise_or.reduce(bits[mine], axis=0) if mine.any() else np.zeros(bits.shape[1], np.uint64)
        ranks = np.flatnonzero(np.unpackbits(b.view(np.uint8), bitorder="little")).tolist()
        out.append(DelayCause(r, "compute", w.span(-1, first), caused, ranks, startup=True, startup_ns=late))
    return sorted(out, key=lambda c: (-c.caused_wait_ns, -c.startup_ns, c.rank))


__all__ = ["critical_paths", "step_windows"]
