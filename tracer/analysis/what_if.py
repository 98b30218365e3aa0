"""What a change would save: the steps re-timed with it, by replaying the graph the critical path walks.

Each step is replayed from its start (critical_path.py holds the graph and its definitions):
- a rank's host runs its intervals in order (a synchronous op's call, an async op's issue, a wait() call); the
  compute between two of them keeps its length unless the change shortens it;
- an op finishes after the arrivals it needs (all of a collective's ranks; for a recv its send; for a send that
  waited for its recv, that recv) plus its measured communication time, which a change of bandwidth shortens; and
  never sooner than its own arrival plus its own time in the op less its wait;
- a synchronous op returns when it finishes; a wait() once its op has finished, and as long after as it did.
Replaying an unchanged step gives back its measured length exactly (tests/test_critical_path.py). Ranks enter each
step where they really did, so a prediction is per step; the mean is over the steady steps (a seeded sample of
them when they hold more than `_BUDGET` host intervals).

The changes (`parse_change` reads them from `report --what-if`):
- `rank:R`, rank R on time: each compute span of R before a collective shortened by its excess over the median of
  the other ranks' spans before the same collective (the straggler's own delay, not the job's pace); before a send
  or a recv, which nobody else runs, by its excess over the median of its own spans between the same two sites;
- `span:SITE=N%`, a span N% faster on every rank: the compute spans ending at SITE ("train.py:52"), or one span by
  its whole name ("train.py:40 → train.py:52");
- `bandwidth=Kx` (or `bandwidth:OP=Kx`, one op kind): each op's time less β·volume·(1 − 1/K), with β the α–β model
  fitted for its op kind (theory.py), and never below its latency α.
Without --what-if the report re-times "rank R on time" for the named straggler, the compute span that holds most
of the steady critical paths 50% faster, and communication at 2x bandwidth.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from statistics import median
from typing import Callable

import numpy as np

from ..data.columns import groups_of, to_list
from ..data.events import NONE, EventTable
from .critical_path import ISSUE, SPAN_ARROW, SYNC, WAIT
from .model import AlphaBeta, CriticalPath, Step, StragglerVerdict, WhatIf
from .tables import CollectiveTable, P2PTable

_BUDGET = 20_000  # host intervals replayed per change (a sample of the steps beyond it)


@dataclass(frozen=True)
class ChangeSpec:
    """A change to re-time, as the user says it (`parse_change`) or the analysis picks it."""

    kind: str                  # "rank", "span" or "bandwidth"
    rank: int = -1             # rank: the rank put on time
    span: str = ""             # span: "train.py:52" (the spans ending there) or "train.py:40 → train.py:52"
    percent: float = 0.0       # span: how much faster
    factor: float = 1.0        # bandwidth: how many times the bandwidth
    op: str = ""               # bandwidth: one op kind ("": every op)

    def __str__(self) -> str:
        if self.kind == "rank":
            return f"rank {self.rank} on time"
        if self.kind == "span":
            what = f"span {self.span}" if SPAN_ARROW in self.span else f"the spans ending at {self.span}"
            return f"{what} {self.percent:g}% faster"
        return f"{self.op or 'communication'} at {self.factor:g}x bandwidth"


def parse_change(spec: str) -> ChangeSpec:
    """`rank:R`, `span:SITE=N%` or `bandwidth[:OP]=Kx` (ValueError with the reason otherwise)."""
    head, _, rest = spec.strip().partition(":")
    try:
        if head == "rank" and rest.strip().isdigit():
            return ChangeSpec("rank", rank=int(rest))
        if head == "span" and "=" in rest:
            span, _, pct = rest.rpartition("=")
            percent = float(pct.strip().rstrip("%"))
            if span.strip() and 0 < percent <= 100:
                return ChangeSpec("span", span=" ".join(span.split()).replace("->", "→"), percent=percent)
        head, _, factor = spec.strip().partition("=")
        kind, _, op = head.partition(":")
        if kind == "bandwidth" and factor:
            k = float(factor.strip().rstrip("x"))
            if k > 0:
                return ChangeSpec("bandwidth", factor=k, op=op.strip())
    except ValueError:
        pass
    raise ValueError(f"--what-if {spec!r}: expected rank:R, span:FILE.py:LINE=N% or bandwidth=Kx "
                     "(bandwidth:all_reduce=Kx for one op kind)")


class _Replay:
    """The re-timing of steps: each op's dependencies and measured times, and each step's host intervals."""

    def __init__(self, t: EventTable, walker, collectives: CollectiveTable, instance_of, p2p: P2PTable, p2p_of,
                 event_wait_ns, models: dict[str, AlphaBeta], steps: list[Step], step_of, windows: set[int]) -> None:
        self.t, self.w, self.wait, self.fin = t, walker, event_wait_ns, walker.fin
        self.colls, self.instance_of, self.p2p, self.p2p_of = collectives, instance_of, p2p, p2p_of
        self.models = models
        # step index -> rank -> its host intervals in the step (indexes into walker.hosts[rank]), in time order;
        # found in numpy (a loop over every interval took ~0.4 s at 1M events)
        self.items: dict[int, dict[int, list[int]]] = {k: {} for k in windows}
        step_col = np.frombuffer(step_of, np.int32) if steps else None
        wanted = np.array(sorted(windows), np.int64)
        for r, host in walker.hosts.items():
            rows = np.frombuffer(host.row, np.int64)
            ks = step_col[rows].astype(np.int64) if step_col is not None else np.zeros(len(rows), np.int64)
            idxs = np.flatnonzero(np.isin(ks, wanted))
            for k, part in groups_of(ks[idxs]):
                self.items[k][r] = idxs[part].tolist()
        self.start = {s.index: s.start_ns for s in steps} if steps else {0: min(t.start_ns) if len(t) else 0}
        self._ops: dict[int, tuple | None] = {}        # op_times, by row
        self._timelines: dict[int, tuple] = {}         # timeline, by step

    def deps(self, i: int) -> list[int]:
        """The rows whose arrival op i needed to finish."""
        k = self.instance_of[i]
        if k >= 0:
            return [j for j in self.colls.rows_of(k) if j != i]
        m = self.p2p_of[i]
        if m >= 0:
            msg = self.p2p[m]
            if i == msg.recv and msg.send is not None:
                return [msg.send]
            if i == msg.send and msg.recv is not None and self.wait[i] > 0:
                return [msg.recv]
        return []

    def volume(self, i: int) -> int:
        k = self.instance_of[i]
        if k >= 0:
            return self.colls.volume_bytes[k]
        m = self.p2p_of[i]
        return self.p2p.bytes[m] if m >= 0 else 0

    def model_of(self, i: int) -> AlphaBeta | None:
        return self.models.get(self.t.op[i] if self.instance_of[i] >= 0 else "send")

    def op_times(self, i: int) -> tuple[list[int], int, int] | None:
        """What op i's replayed end is made of, the same under every change (None: it never ended): the rows whose
        arrival it needs, its communication time (its end less the last measured arrival), and its own time in the
        op less its wait."""
        if i in self._ops:
            return self._ops[i]
        f, start = self.fin[i], self.t.start_ns
        if f == NONE:
            out = None
        else:
            deps = self.deps(i)
            a_old = max([start[i]] + [start[j] for j in deps])
            out = (deps, f - a_old, f - start[i] - self.wait[i])
        self._ops[i] = out
        return out

    def timeline(self, k: int) -> tuple[list[tuple[int, int, int, int]], dict[int, list], list[int], int | None]:
        """Step k's host intervals as the replay meets them, the same under every change: (each interval's start
        and the end of each that blocks, as (time, is_end, rank, index), in that order; each rank's state at the
        step's start; the rows of its ops; its measured length, None when none of its ops ended)."""
        if k in self._timelines:
            return self._timelines[k]
        fin, hosts, t0 = self.fin, self.w.hosts, self.start[k]
        # sorted in numpy (a list's sort holds the GIL, ~100 ms for a step of a 10M-event trace)
        times, is_ends, ranks, indexes = [], [], [], []  # (numpy parts, a rank's at a time)
        state = {}  # rank -> [host free at (measured), host free at (replayed), row of the interval before]
        for r, idxs in self.items[k].items():
            host = hosts[r]
            first = idxs[0]
            free = host.maxb[first - 1] if first > 0 else min(host.a[first], t0)
            state[r] = [free, free, host.row[first - 1] if first > 0 else -1]
            i = np.array(idxs, np.int64)
            blocks = i[np.asarray(host.kind)[i] != ISSUE]
            times += [np.asarray(host.a)[i], np.asarray(host.b)[blocks]]
            is_ends += [np.zeros(len(i), np.int64), np.ones(len(blocks), np.int64)]
            ranks.append(np.full(len(i) + len(blocks), r, np.int64))
            indexes += [i, blocks]
        events = []
        if state:
            cols = [np.concatenate(c) for c in (times, is_ends, ranks, indexes)]
            order = np.lexsort(cols[::-1])  # (by time, then is_end, rank, index: as the tuples sort)
            events = list(zip(*(to_list(c[order]) for c in cols)))
        rows = [hosts[r].row[idx] for r, idxs in self.items[k].items() for idx in idxs
                if hosts[r].kind[idx] != WAIT]
        ends_old = [fin[i] for i in rows if fin[i] != NONE]
        out = self._timelines[k] = (events, state, rows, max(ends_old) - t0 if ends_old else None)
        return out

    def step(self, k: int, gap: Callable | None, saved: Callable | None) -> tuple[int, int]:
        """Step k's measured length and its length replayed with the change."""
        fin, start, hosts = self.fin, self.t.start_ns, self.w.hosts
        events, state0, rows, before = self.timeline(k)
        if before is None:
            return 0, 0
        state = {r: list(st) for r, st in state0.items()}
        arrival: dict[int, int] = {}   # row -> replayed arrival
        began: dict[tuple[int, int], int] = {}
        done: dict[int, int | None] = {}
        op_times = self.op_times

        def finish(i: int) -> int | None:
            """Op i's replayed end (None: it never ended)."""
            if i in done:
                return done[i]
            ot = op_times(i)
            if ot is None:
                done[i] = None
                return None
            deps, comm, own = ot
            a_new = arrival.get(i, start[i])
            need = max([a_new] + [arrival.get(j, start[j]) for j in deps])
            s = saved(i, own) if saved is not None else 0
            done[i] = out = max(need + comm - s, a_new + own - s)
            return out

        for time, is_end, r, idx in events:
            host, st = hosts[r], state[r]
            row, kind = host.row[idx], host.kind[idx]
            if not is_end:
                g = time - st[0]
                if g > 0 and gap is not None:
                    g = gap(r, st[2], row, g)
                b = began[(r, idx)] = st[1] + g
                if kind != WAIT:
                    arrival[row] = b
                if kind == ISSUE:
                    st[0], st[1] = max(st[0], time), max(st[1], b)
                st[2] = row
                continue
            b = began[(r, idx)]
            f = finish(row)
            if kind == SYNC:
                end = b + (time - host.a[idx]) if f is None else f + (time - fin[row])
            else:
                end = b + (time - host.a[idx]) if f is None else max(b, f) + max(0, time - max(host.a[idx], fin[row]))
            st[0], st[1] = max(st[0], time), max(st[1], end)
        ends_new = [e for e in map(finish, rows) if e is not None]
        return before, max(ends_new) - self.start[k]


def _rank_on_time(replay: _Replay, rank: int) -> Callable:
    """The gap function: rank's compute before a collective shortened by its excess over the median of the other
    ranks' compute before the same collective; before any other op (a send, a recv: nobody else runs that span), by
    its excess over the median of its own spans between the same two sites, its usual time."""
    w, colls, instance_of, sites = replay.w, replay.colls, replay.instance_of, replay.t.site.codes
    excess: dict[int, int] = {}
    usual: dict[tuple[int, int], list[int] | int] = {}
    host = w.hosts.get(rank)
    for idx in range(1, len(host.a) if host else 0):
        g = host.a[idx] - host.maxb[idx - 1]
        if g >= 0:
            usual.setdefault((sites[host.row[idx - 1]], sites[host.row[idx]]), []).append(g)
    usual = {k: int(median(v)) for k, v in usual.items()}

    def gap(r: int, prev: int, row: int, g: int) -> int:
        if r != rank:
            return g
        if instance_of[row] < 0:
            u = usual.get((sites[prev] if prev >= 0 else -1, sites[row]))
            return g if u is None else min(g, u)
        x = excess.get(row)
        if x is None:
            others = [d for j in colls.rows_of(instance_of[row]) if j != row
                      and (d := w.compute_before(j)) is not None]
            x = excess[row] = max(0, g - int(median(others))) if others else 0
        return g - x

    return gap


def _span_faster(replay: _Replay, span: str, percent: float) -> Callable:
    """The gap function: the compute spans so named (or ending at that site), on every rank, percent shorter."""
    t, w = replay.t, replay.w
    before, _, after = span.rpartition(SPAN_ARROW)
    codes = {w.site_of(v): c for c, v in enumerate(t.site.values)}
    ends = {c for s, c in codes.items() if s == after}
    starts = None if not before else ({codes[before]} if before in codes else set()) | (
        {-1} if before == "start" else set())
    sites, keep = t.site.codes, 1 - percent / 100

    def gap(r: int, prev: int, row: int, g: int) -> int:
        if sites[row] in ends and (starts is None or (sites[prev] if prev >= 0 else -1) in starts):
            return int(g * keep)
        return g

    return gap


def _more_bandwidth(replay: _Replay, factor: float, op: str) -> Callable:
    """The saved-time function: an op's β·volume·(1 − 1/factor), leaving at least its latency α."""
    t = replay.t

    def saved(i: int, own: int) -> int:
        if op and t.op[i] != op:
            return 0
        m = replay.model_of(i)
        if m is None or m.beta_ns_per_byte <= 0 or own <= 0:
            return 0
        s = m.beta_ns_per_byte * replay.volume(i) * (1 - 1 / factor)
        return int(max(0.0, min(s, own - m.alpha_ns)))

    return saved


def _default_changes(paths: list[CriticalPath], warm: set[int], straggler: StragglerVerdict | None,
                     models: dict[str, AlphaBeta]) -> list[ChangeSpec]:
    out = []
    if straggler is not None:
        out.append(ChangeSpec("rank", rank=straggler.rank))
    spans: dict[str, int] = {}
    comm = 0
    for p in paths:
        if p.index in warm:
            continue
        for part in p.parts:
            if part.kind == "compute" and not part.span.startswith("start "):
                spans[part.span] = spans.get(part.span, 0) + part.ns
            elif part.kind == "comm":
                comm += part.ns
    if spans:
        out.append(ChangeSpec("span", span=max(spans, key=spans.__getitem__), percent=50))
    if comm and any(m.beta_ns_per_byte > 0 for m in models.values()):
        out.append(ChangeSpec("bandwidth", factor=2))
    return out


def what_ifs(t: EventTable, walker, collectives: CollectiveTable, instance_of, p2p: P2PTable, p2p_of,
             event_wait_ns, models: dict[str, AlphaBeta], steps: list[Step], step_of, paths: list[CriticalPath],
             straggler: StragglerVerdict | None, changes: tuple[ChangeSpec, ...]) -> list[WhatIf]:
    """Each change (the defaults when none is asked for) re-timed over the steady steps."""
    if not paths:
        return []
    warm = {s.index for s in steps if s.warmup}
    windows = [p.index for p in paths if p.index not in warm] or [p.index for p in paths]
    # a step's events: about its host intervals (bincount, not Counter: one C loop over every row)
    size = np.bincount(np.frombuffer(step_of, np.int32) + 1).tolist()[1:] if steps else [len(t)]
    if sum(size[k] for k in windows) > _BUDGET:
        random.Random(0).shuffle(windows)
        kept, n = [], 0
        for k in windows:
            if kept and n >= _BUDGET:
                break
            kept.append(k)
            n += size[k]
        windows = kept
    replay = _Replay(t, walker, collectives, instance_of, p2p, p2p_of, event_wait_ns, models, steps, step_of,
                     set(windows))
    windows = [k for k in windows if replay.items[k]]
    if not windows:
        return []
    out = []
    for c in changes or _default_changes(paths, warm, straggler, models):
        gap = saved = None
        note = ""
        if c.kind == "rank":
            gap = _rank_on_time(replay, c.rank)
            if c.rank not in walker.hosts:
                note = f"rank {c.rank} has no ops in the trace"
        elif c.kind == "span":
            gap = _span_faster(replay, c.span, c.percent)
            site = c.span.rpartition(SPAN_ARROW)[2]
            if not any(walker.site_of(v) == site for v in t.site.values):
                note = f"no op of the trace was called at {site}"
        else:
            saved = _more_bandwidth(replay, c.factor, c.op)
            if not any(m.beta_ns_per_byte > 0 for op, m in models.items() if not c.op or op == c.op):
                note = "no bandwidth was fitted: the trace's messages of that kind have one size"
        before = after = 0
        for k in windows:
            b, a = replay.step(k, gap, saved)
            before, after = before + b, after + a
        out.append(WhatIf(str(c), before // len(windows), after // len(windows), len(windows), note))
    return out


__all__ = ["ChangeSpec", "parse_change", "what_ifs"]
