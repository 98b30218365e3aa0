"""What a change would save: the steps re-timed with it, by replaying the graph the critical path walks.

The steady steps are replayed one after another (causal/critical_path.py holds the graph and its definitions; causal/what_if_loop.py
the replay's loop):
- a rank's host runs its intervals in order (a synchronous op's call, an async op's issue, a wait() call, DDP's
  reducer's wait inside backward()); the compute between two of them keeps its length unless the change shortens
  it;
- an op finishes after the arrivals it needs (all of a collective's ranks; for a recv its send; for a send that
  waited for its recv, that recv) plus its measured communication time, which a change shortens; and never sooner
  than its own arrival plus its own time in the op less its wait;
- a synchronous op returns when it finishes; a wait() once its op has finished, and as long after as it did;
- a rank goes on into the next step from where the replay left it (late out of a step, late into the next; on pace,
  on time), so a step's length with a change is its last replayed end less its start, moved as its earliest rank's
  entry moved.
Replaying unchanged steps gives back their measured lengths exactly (tests/analysis/causal/test_critical_path.py). The mean is over
the steady steps (a seeded sample of them when they hold more than `_BUDGET` host intervals: sampled steps are
replayed each from where its ranks really entered it).

The changes (`parse_change` reads them from `report --what-if`); "on pace" and "typical" are causal/attribution.py's
(docs/ANALYSIS.md, "Peers, the ideal step, and attribution"):
- `rank:R`, rank R at its peers' pace: each of its compute spans that is off its peers' typical beyond the noise
  cut to that typical; `ranks`: every rank so;
- `stage:S`, every rank of pipeline stage S at the pace of the typical other stage;
- `op:KIND`, every op of that kind (all_reduce, send/recv, ...) at the typical communication time of its kind,
  group size and size;
- `ideal`: every span and op at its typical duration, every stage at the typical stage's pace (the ideal step);
- `span:SITE=N%`, a span N% faster on every rank: the compute spans ending at SITE ("train.py:52"), or one span by
  its whole name ("train.py:40 → train.py:52");
- `bandwidth=Kx` (or `bandwidth:OP=Kx`, one op kind): each op's time less β·volume·(1 − 1/K), with β the α–β model
  fitted for its op kind (comms/alpha_beta.py), and never below its latency α; it cannot be predicted where no β was fitted
  (every message of the kind has one size), and says so.
Without --what-if the report re-times the named straggler at its peers' pace, the slow stage at the typical
stage's, the compute span that holds most of the steady critical paths 50% faster, communication at 2x bandwidth
and the ideal step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...data.table.columns import groups_of, order_by, to_list
from ...data.table import NONE, EventTable
from . import what_if_loop
from .critical_path import ISSUE, SPAN_ARROW, WAIT
from .attribution import P2P
from ..core.results import AlphaBeta, Attribution, CriticalPath, Step, StragglerVerdict, WhatIf
from ..core.tables import CollectiveTable, P2PTable

_BUDGET = 20_000  # host intervals replayed per change (a sample of the steps beyond it)


@dataclass(frozen=True)
class ChangeSpec:
    """A change to re-time, as the user says it (`parse_change`) or the analysis picks it."""

    kind: str                  # "rank", "ranks", "stage", "op", "ideal", "span" or "bandwidth"
    rank: int = -1             # rank: the rank put at its peers' pace; stage: the stage
    span: str = ""             # span: "train.py:52" (the spans ending there) or "train.py:40 → train.py:52"
    percent: float = 0.0       # span: how much faster
    factor: float = 1.0        # bandwidth: how many times the bandwidth
    op: str = ""               # bandwidth: one op kind ("": every op); op: the op kind put at its typical time

    def __str__(self) -> str:
        if self.kind == "rank":
            return f"rank {self.rank} at its peers' pace"
        if self.kind == "stage":
            return f"stage {self.rank} at the typical other stage's pace"
        if self.kind == "op":
            return f"{self.op} at its typical time"
        if self.kind == "ranks":
            return "every rank at its peers' pace"
        if self.kind == "ideal":
            return "every span and op at its typical duration (the ideal step)"
        if self.kind == "span":
            what = f"span {self.span}" if SPAN_ARROW in self.span else f"the spans ending at {self.span}"
            return f"{what} {self.percent:g}% faster"
        return f"{self.op or 'communication'} at {self.factor:g}x bandwidth"


_OP_NAMES = {"send": P2P, "recv": P2P, "p2p": P2P, P2P: P2P}


def parse_change(spec: str) -> ChangeSpec:
    """`rank:R`, `ranks`, `stage:S`, `op:KIND`, `ideal`, `span:SITE=N%` or `bandwidth[:OP]=Kx` (ValueError with
    the reason otherwise)."""
    head, _, rest = spec.strip().partition(":")
    try:
        if head == "rank" and rest.strip().isdigit():
            return ChangeSpec("rank", rank=int(rest))
        if head == "stage" and rest.strip().isdigit():
            return ChangeSpec("stage", rank=int(rest))
        if head == "op" and rest.strip() and "=" not in rest:
            op = rest.strip()
            return ChangeSpec("op", op=_OP_NAMES.get(op, op))
        if spec.strip() in ("ideal", "ranks"):
            return ChangeSpec(spec.strip())
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
    raise ValueError(f"--what-if {spec!r}: expected rank:R, ranks, stage:S, op:KIND (all_reduce, send/recv, ...), "
                     "ideal, span:FILE.py:LINE=N% or bandwidth=Kx (bandwidth:all_reduce=Kx for one op kind)")


class _Replay:
    """The re-timing of steps: each step's host intervals as causal/what_if_loop.py's events, measured once, replayed per
    change."""

    def __init__(self, t: EventTable, walker, collectives: CollectiveTable, instance_of, p2p: P2PTable, p2p_of,
                 event_wait_ns, models: dict[str, AlphaBeta], steps: list[Step], step_of, windows: set[int]) -> None:
        self.t, self.w = t, walker
        self.colls, self.instance_of, self.p2p = collectives, instance_of, p2p
        self.models = models
        self.step_of = step_of if steps else None
        # step index -> rank -> its host intervals in the step (indexes into walker.hosts[rank]), in time order;
        # found in numpy (not a Python loop over every interval)
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
        self.base = dict(zip(walker.hosts, walker.off.tolist()))  # rank -> its host's first interval's index
        # what what_if_loop.replay_loop reads, as the columns are (no copy)
        i32, i64 = (lambda c: np.frombuffer(c, np.int32)), (lambda c: np.frombuffer(c, np.int64))
        # each op row's end, start, wait, instance and message as numpy columns (the bandwidth change reads them)
        # (an op's start as its host issued it: no earlier than the end of the op it was blocked in before, however
        # the clocks' reads interleave: critical_path._after_blocking)
        self.ops = (i64(walker.fin), walker.arrival, i64(event_wait_ns), i32(instance_of), i32(p2p_of))
        fin, start, wait, inst, msg = self.ops
        a, _, hrow, hkind, _ = walker.columns
        # the ops whose end is their wait()'s return (gloo's send and recv have no completion of their own): the
        # wait's start, where the replay counts their time from (-1 for the others)
        ws, we, asy = i64(t.wait_start_ns), i64(t.wait_end_ns), np.frombuffer(t.async_op, np.uint8) != 0
        gate = np.where(asy & (ws != NONE) & (we != NONE) & (fin != NONE) & (np.abs(fin - we) <= 1_000), ws, -1)
        # the replays' work: a step replayed once a rank, at least (each rank's what-if), over the trace's events
        self.size = (len(t), len(t) * max(1, len(t.ranks)))
        self.graph = what_if_loop.read_as(self.size, (
            a, hrow, hkind, fin, start, wait, inst, np.asarray(collectives.offset, np.int64),
            np.asarray(collectives.rows, np.int32), msg, i32(p2p.send), i32(p2p.recv), gate))
        self._timelines: dict[int, tuple] = {}  # timeline, by step
        self._chains: dict[tuple, tuple] = {}  # the events of runs of consecutive steps

    def timeline(self, k: int) -> tuple:
        """Step k as the replay meets it, the same under every change: its events (causal/what_if_loop.py: time, is_end, slot,
        h), each slot's rank and its host's state at the step's start (free from, the row before), the rows of its
        ops, its measured length (None when none of its ops ended), and each event's measured gap and row before
        (what_if_loop.measure_loop)."""
        if k in self._timelines:
            return self._timelines[k]
        t0 = self.start[k]
        a, b, hrow, hkind, maxb = self.w.columns
        ranks, free0, prev0, starts, blocks = [], [], [], [], []
        for r, idxs in self.items[k].items():
            h = np.array(idxs, np.int64) + self.base[r]  # (global indexes: ordered as (rank, index) are)
            first = int(h[0])
            free = int(maxb[first - 1]) if idxs[0] > 0 else min(int(a[first]), t0)
            ranks.append(r)
            free0.append(free)
            prev0.append(int(hrow[first - 1]) if idxs[0] > 0 else -1)
            starts.append(h)
            blocks.append(h[hkind[h] != ISSUE])
        slot_of = [np.full(len(x) + len(y), s, np.int64) for s, (x, y) in enumerate(zip(starts, blocks))]
        h = np.concatenate([c for x, y in zip(starts, blocks) for c in (x, y)])
        is_end = np.concatenate([c for x, y in zip(starts, blocks) for c in (np.zeros(len(x), np.int64),
                                                                           np.ones(len(y), np.int64))])
        time = np.where(is_end == 0, a[h], b[h])
        order = order_by(time, h, is_end)  # (by time, then rank and index: an interval ending as the next begins first)
        events = (time[order], is_end[order], np.concatenate(slot_of)[order], h[order])
        free0, prev0 = np.array(free0, np.int64), np.array(prev0, np.int64)
        op_h = np.concatenate(starts)
        rows = hrow[op_h[hkind[op_h] != WAIT]]
        fins = self.ops[0][rows]
        ended = fins[fins != NONE]
        gap, before = what_if_loop.measure(self.size, *events, *self.graph[1:3], free0, prev0)  # (hrow, hkind)
        out = self._timelines[k] = (events, np.array(ranks, np.int64), free0, rows,
                                    int(ended.max()) - t0 if len(ended) else None, gap, before)
        return out

    def gaps_of(self, k: int, gap: "Gap") -> np.ndarray:
        """Step k's gaps with a Gap's rule (as Python, for the events it may change)."""
        events, ranks, _, _, _, measured, prev = self.timeline(k)
        _, is_end, slot, h = events
        op = self.w.columns[2][h]  # each event's op row
        changed = np.flatnonzero((is_end == 0) & (measured > 0) & gap.may(ranks[slot], op))
        if not len(changed):
            return measured
        gaps = measured.copy()
        gaps[changed] = [gap.fn(*x) for x in zip(*(to_list(c[changed]) for c in (ranks[slot], prev, op, measured)))]
        return gaps

    def step(self, k: int, gaps=None, saved: Callable | None = None) -> tuple[int, int]:
        """Step k's measured length and its length replayed alone with a change (its hosts entering it as they
        did): `gaps`, each event's compute gap with it (a numpy column as `timeline`'s, or a `Gap`; None: as
        measured), and `saved`, the time it takes off each op (rows -> ns)."""
        before = self.timeline(k)[4]
        if before is None:
            return 0, 0
        if isinstance(gaps, Gap):
            gaps = self.gaps_of(k, gaps)
        return before, self.lengths([k], {k: gaps}, saved)[k]

    def lengths(self, ks: list[int], gaps: dict, saved: Callable | None = None) -> dict[int, int]:
        """Each of the steps ks replayed with a change (gaps: step -> its gaps, or None as measured; saved: rows ->
        the time each op saves), the steps of a run of consecutive ones one after another: a host late out of a
        step enters the next one late, and on pace, on time. A step's length is its latest replayed end less its
        start, moved as its earliest host's entry moved (0 for a step none of whose ops ended)."""
        out = {}
        run: list[int] = []
        for k in sorted(ks) + [None]:
            if run and (k is None or k != run[-1] + 1):
                out.update(self._run(run, gaps, saved))
                run = []
            if k is not None:
                if self.timeline(k)[4] is None:
                    out[k] = 0
                else:
                    run.append(k)
        return out

    def _run(self, ks: list[int], gaps: dict, saved: Callable | None) -> dict[int, int]:
        chain = self._chain(tuple(ks))
        events, step_ix, rows, rows_ix, free0, entry0 = chain
        op = self.w.columns[2][events[3]]
        gap = np.concatenate([self.timeline(k)[5] if gaps.get(k) is None else gaps[k] for k in ks])
        cut, rows_cut = np.zeros(len(op), np.int64), np.zeros(len(rows), np.int64)
        if saved is not None:  # what it takes off each op that ends in the steps
            ends = np.flatnonzero(events[1])
            cut[ends] = saved(op[ends])
            rows_cut = saved(rows)
        ends, entry = what_if_loop.replay(self.size, *events, step_ix, gap, cut, rows, rows_ix, rows_cut, free0,
                                     len(ks), *self.graph)
        return {k: int(ends[j]) - (self.start[k] + int(entry[j]) - entry0[j]) for j, k in enumerate(ks)}

    def _chain(self, ks: tuple) -> tuple:
        """The events of consecutive steps ks one after another (each step's in its timeline's order), their slots
        the ranks' over the run, each event's step in the run, each step's op rows and their step, each slot's host
        free from at its first step, and each step's earliest measured entry."""
        got = self._chains.get(ks)
        if got is not None:
            return got
        slot_of_rank: dict[int, int] = {}
        free0: list[int] = []
        parts, step_ix, rows, rows_ix, entry0 = [], [], [], [], []
        for j, k in enumerate(ks):
            (time, is_end, slot, h), ranks, free, rows_k, _, _, _ = self.timeline(k)
            for s, r in enumerate(ranks.tolist()):
                if r not in slot_of_rank:
                    slot_of_rank[r] = len(free0)
                    free0.append(int(free[s]))
            mapped = np.array([slot_of_rank[r] for r in ranks.tolist()], np.int64)
            parts.append((time, is_end, mapped[slot], h))
            step_ix.append(np.full(len(time), j, np.int64))
            rows.append(rows_k)
            rows_ix.append(np.full(len(rows_k), j, np.int64))
            entry0.append(int(free.min()) if len(free) else self.start[k])
        events = tuple(np.concatenate([p[c] for p in parts]) for c in range(4))
        out = self._chains[ks] = (events, np.concatenate(step_ix), np.concatenate(rows), np.concatenate(rows_ix),
                                  np.array(free0, np.int64), entry0)
        return out


@dataclass(frozen=True)
class Gap:
    """A change's gap function: fn(rank, row before, row, measured gap) -> the gap with the change, and `may`, which
    of (ranks, rows) it may change (numpy columns -> a mask; fn is asked only about those)."""

    fn: Callable[[int, int, int, int], int]
    may: Callable


def _span_faster(replay: _Replay, span: str, percent: float) -> Gap:
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

    ending = np.zeros(len(t.site.values) + 1, bool)  # by site code
    ending[list(ends)] = True
    return Gap(gap, lambda ranks, rows: ending[np.asarray(sites)[rows]])


def _more_bandwidth(replay: _Replay, factor: float, op: str) -> Callable:
    """The saved-time function, of ops' rows (a numpy column) -> the time each saves: its β·volume·(1 − 1/factor),
    leaving at least its latency α; 0 without a model, or for an op not of kind `op` (when given). In numpy, a
    model at a time (a collective's of its op kind, "send" for the others'), as Python's floats would do it."""
    t = replay.t
    fin, start, wait, instance_of, p2p_of = replay.ops
    codes = np.asarray(t.op.codes)
    volume = np.concatenate((np.asarray(replay.colls.volume_bytes, np.int64), [0]))  # (index -1: none)
    nbytes = np.concatenate((np.asarray(replay.p2p.bytes, np.int64), [0]))
    keep = 1 - 1 / factor

    def saved(rows) -> "np.ndarray":
        out = np.zeros(len(rows), np.int64)
        k, m, code = instance_of[rows], p2p_of[rows], codes[rows]
        own = fin[rows] - start[rows] - wait[rows]
        vol = np.where(k >= 0, volume[k], nbytes[m])
        for c in np.unique(code).tolist():
            name = t.op.values[c]
            if op and name != op:
                continue
            for model, which in ((replay.models.get(name), k >= 0), (replay.models.get("send"), k < 0)):
                if model is None:
                    continue
                sel = np.flatnonzero((code == c) & which & (model.beta_ns_per_byte > 0) & (own > 0))
                s = model.beta_ns_per_byte * vol[sel].astype(np.float64) * keep
                x = own[sel] - model.alpha_ns
                x = np.where(x < s, x, s)  # (min(s, x) and max(0.0, x), NaN and all)
                out[sel] = np.where(x > 0.0, x, 0.0).astype(np.int64)
        return out

    return saved


def replay_steps(t: EventTable, walker, collectives: CollectiveTable, instance_of, p2p: P2PTable, p2p_of,
                 event_wait_ns, models: dict[str, AlphaBeta], steps: list[Step], step_of,
                 paths: list[CriticalPath]) -> "_Replay | None":
    """The steady steps made ready to replay (the steps of the critical paths, warm-up left out unless it is all
    there is); a seeded sample of them when they hold more than `_BUDGET` host intervals (its `note` says so)."""
    if not paths:
        return None
    warm = {s.index for s in steps if s.warmup}
    windows = [p.index for p in paths if p.index not in warm] or [p.index for p in paths]
    # a step's events: about its host intervals (bincount, not Counter: one C loop over every row)
    size = np.bincount(np.frombuffer(step_of, np.int32) + 1).tolist()[1:] if steps else [len(t)]
    note = ""
    if sum(size[k] for k in windows) > _BUDGET:
        every = len(windows)
        random.Random(0).shuffle(windows)
        kept, n = [], 0
        for k in windows:
            if kept and n >= _BUDGET:
                break
            kept.append(k)
            n += size[k]
        windows = sorted(kept)
        note = f"{len(windows)} of the {every} steady steps replayed (a seeded sample)"
    replay = _Replay(t, walker, collectives, instance_of, p2p, p2p_of, event_wait_ns, models, steps, step_of,
                     set(windows))
    replay.windows = [k for k in windows if replay.items[k]]
    replay.note = note
    return replay


def _default_changes(paths: list[CriticalPath], warm: set[int], straggler: StragglerVerdict | None,
                     attribution: Attribution, models: dict[str, AlphaBeta]) -> list[ChangeSpec]:
    out = []
    if straggler is not None:
        out.append(ChangeSpec("rank", rank=straggler.rank))
    if attribution.stage is not None:
        out.append(ChangeSpec("stage", rank=attribution.stage))
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
    if attribution.kind != "none":
        out.append(ChangeSpec("ideal"))
    return out


def _after(c: ChangeSpec, replay: "_Replay", pacing, models: dict[str, AlphaBeta]) -> tuple[dict | None, str]:
    """Each replayed step's length with change c (None: it cannot be predicted), and a note on it."""
    t, walker, roles = replay.t, replay.w, pacing.roles
    note = ""
    if c.kind == "rank":
        if c.rank not in walker.hosts:
            note = f"rank {c.rank} has no ops in the trace"
        elif len(roles.peers_of(c.rank)) < 2:
            note = f"rank {c.rank} has no peers doing the same work: it is measured against its own other steps"
        return pacing.after(("rank", c.rank), lambda sp: sp.gaps({c.rank})), note
    if c.kind == "ranks":
        return pacing.after(("ranks",), lambda sp: sp.gaps()), note
    if c.kind == "stage":
        if c.rank >= len(roles.stage_ranks):
            note = f"the trace has no pipeline stage {c.rank}" if roles.stage_ranks else "the trace holds no pipeline"
        return pacing.after(("stage", c.rank), lambda sp: sp.stage_paced(sp.gap, roles, [c.rank])), note
    if c.kind == "op":
        if c.op not in pacing.kinds:
            note = f"no {c.op} in the steps replayed (their ops: {', '.join(pacing.kinds) or 'none'})"
        return pacing.after(("op", c.op), kinds={c.op}), note
    if c.kind == "ideal":
        return pacing.after(("ideal",), lambda sp: sp.stage_paced(sp.gaps(ideal=True), roles,
                                                                  range(len(roles.stage_ranks))), None), note
    if c.kind == "span":
        gap = _span_faster(replay, c.span, c.percent)
        site = c.span.rpartition(SPAN_ARROW)[2]
        if not any(walker.site_of(v) == site for v in t.site.values):
            note = f"no op of the trace was called at {site}"
        return replay.lengths(replay.windows, {k: replay.gaps_of(k, gap) for k in replay.windows}), note
    if not any(m.beta_ns_per_byte > 0 for op, m in models.items() if not c.op or op == c.op):
        return None, ("cannot be predicted: no bandwidth was fitted, the trace's messages of that kind have one "
                      "size (the time of a message of another size is not known)")
    saved = _more_bandwidth(replay, c.factor, c.op)
    return replay.lengths(replay.windows, {}, saved), note


def what_ifs(replay: "_Replay | None", pacing, attribution: Attribution, paths: list[CriticalPath],
             steps: list[Step], models: dict[str, AlphaBeta], straggler: StragglerVerdict | None,
             changes: tuple[ChangeSpec, ...]) -> list[WhatIf]:
    """Each change (the defaults when none is asked for) re-timed over the steady steps."""
    if replay is None or not replay.windows:
        return []
    windows = replay.windows
    warm = {s.index for s in steps if s.warmup}
    out = []
    for c in changes or _default_changes(paths, warm, straggler, attribution, models):
        after, note = _after(c, replay, pacing, models)
        measured = pacing.measured()
        n = len(windows)
        before = sum(measured.values()) // n
        out.append(WhatIf(str(c), before, None if after is None else sum(after.values()) // n, n, note,
                          {} if after is None else {k: (measured[k], after[k]) for k in windows}))
    return out


__all__ = ["ChangeSpec", "parse_change", "replay_steps", "what_ifs"]
