"""Why the steps are as slow as they are, and whose doing it is: the ideal step and the attribution of the slowdown
(docs/ANALYSIS.md, "Peers, the ideal step, and attribution"; the published what-if analyses of stragglers in large-model
training define them so: each op against its peers' typical duration, the step replayed).

`Pacing` holds, for each replayed step, every compute span's typical duration: the median of the rank's other peers'
same span (waits/peers.py). Putting a candidate *on pace* shortens its spans to their typical (never lengthens them):
- a rank: its spans;
- a stage: its ranks' compute scaled to the typical other stage's (the median of the other stages' compute in the
  step: every stage computes the same micro-batches);
- an op kind: each op of that kind at the typical communication time of its kind, group and size;
- a span: that span on every rank.
The *ideal* step has every rank on pace, then every stage, and every op at its typical time. The replay
(causal/what_if.py's `_Replay`, on the graph the critical path walks) gives each step's length with a change, so
slowdown S = measured / ideal, and share(X) = (measured - with X on pace) / (measured - ideal).

The verdict follows from the candidates' savings (each a mean over the steps replayed):
- *worker*: a rank whose saving is at least `MIN_SAVING` of the mean step (a single small delay is no straggler;
  `ONE_PEER_SAVING` where the rank has one peer, its pace that rank's alone) and the steps' own spread with it on
  pace (`_left_spread`: docs/ANALYSIS.md's "beyond the noise"), and `DOMINANT` times any other rank's (ranks late
  by turns, as data-dependent imbalance makes them, are no one worker's doing; a span is put on pace only past its
  own noise, so jitter saves next to nothing). Or a rank late
  in some steps only (a fault from step 40 of 60 on; every 5th step), whose mean over all the steps dilutes its
  saving below the steps' spread: its steps that stand out (as *spread* reads them) are at least `RECURRING` and
  `DOMINANT` times any other rank's, and its saving in them passes `SE_NOISE` standard errors of the steps' spread
  over that many steps (`_recurring`);
- *stage*: a pipeline stage whose every rank, at its peers' pace, computes `SLOW_STAGE` times the typical other
  stage, and whose pace saves as much once every rank is at its peers' pace (a slow worker's own excess is the
  worker's): the fix is the layer partition. Of a worker and a stage, the one that saves more;
- *spread*: the ideal saves `MIN_SAVING` of the step, no rank nor stage stands out, and the ranks' steps whose
  excess stands out (OUTLIERS median absolute deviations, and `SPREAD` of a step) are of several ranks:
  data-dependent imbalance, no single culprit;
- *none*: nothing beyond the noise.
Ranks are replayed one by one only where their excess over their peers is among the `MAX_RANKS` largest and past the
noise; the steps, as the what-ifs sample them (`_BUDGET` host intervals a change).
"""

from __future__ import annotations

from statistics import median

import numpy as np

from ...data.table.columns import dense_ids
from ...data.table import NONE, EventTable
from ..core.results import Attribution, PipelineStats, Step, StragglerVerdict, Straggler
from ..waits.peers import Roles, identities, occurrences, others_median, roles_of, spread

MIN_SAVING = 0.02   # of the mean step: what putting a candidate on pace must save to name it
ONE_PEER_SAVING = 0.05  # ... a worker with one peer: its pace is that one other rank's, and two processes sit a few
#                     percent apart for no fault of either (docs/ANALYSIS.md)
DOMINANT = 2.0      # times any other rank's saving: a worker's (ranks late by turns are no one worker)
PERSISTENT = 0.75   # of the steps: a rank off its peers' pace in this many, and in DOMINANT times as many as any other
#                     rank, is a worker even where another rank's one long hiccup saves half as much as it
SLOW_STAGE = 1.2    # every rank of a slow stage computes this many times the typical other stage
MAX_RANKS = 16      # ranks replayed on pace one by one (those with the most excess over their peers)
OUTLIERS = 6.0      # median absolute deviations (as a standard deviation) above the median: a step of a rank stands out
FLOOR = 0.02        # of the median step: the least excess a rank's step must have to be counted
SPREAD = 0.1        # of the median step: the least excess of a rank's step that stands out as imbalance (a busy
#                     machine's scheduling jitter moves a few percent of a step from rank to rank)
RECURRING = 3       # steps: the fewest a worker late in some steps only stands out in (one or two are hiccups)
SE_NOISE = 3.0      # standard errors of the steps' spread over its late steps: what its saving in them passes
MINOR = 0.25        # of the worker's median saving in a step it was late in: below it, the step is not one of those
NOISE = 4.0         # a span's excess over its peers' typical passes this many of its own spreads to be off pace
MIN_NOISE_NS = 50_000
P2P = "send/recv"   # the op kind of sends and recvs together (a message's two ends)


class Pacing:
    """Each replayed step's spans with their typical durations, and the ops' typical communication times."""

    def __init__(self, replay, roles: Roles, windows: list[int]) -> None:
        self.replay, self.roles, self.windows = replay, roles, windows
        t = replay.t
        self.ident = identities(t, roles)
        self._steps = _StepPace.all(replay, roles, self.ident, windows)
        _flag_past_noise(list(self._steps.values()))
        self._ops = _OpPace(replay, windows)
        self._after: dict[tuple, dict[int, int]] = {}
        codes = t.op.codes
        self.kinds = sorted({_kind(t.op.values[c]) for c in np.unique(np.asarray(codes, np.int64)[
            self._ops.rows]).tolist()}) if len(self._ops.rows) else []

    def step(self, k: int) -> "_StepPace":
        return self._steps[k]

    def measured(self) -> dict[int, int]:
        """Each replayed step's measured length."""
        return {k: self.replay.timeline(k)[4] or 0 for k in self.windows}

    def after(self, key: tuple, gaps_of=None, kinds=False) -> dict[int, int]:
        """Each replayed step's length with a change, made once per `key` (the what-ifs ask for what the
        attribution replayed): gaps_of(step pace) -> its gaps (None: as measured), and `kinds`, the op kinds at
        their typical time (a set; None: every kind; False: none). A step the change leaves as it is is not
        replayed."""
        out = self._after.get(key)
        if out is None:
            saved = None if kinds is False else self.op_saved(kinds)
            gaps = {k: None if gaps_of is None else gaps_of(self.step(k)) for k in self.windows}
            same = all(g is None or np.array_equal(g, self.step(k).gap) for k, g in gaps.items()) and (
                saved is None or not any(saved(self.replay.timeline(k)[3]).any() for k in self.windows))
            out = self._after[key] = self.measured() if same else self.replay.lengths(self.windows, gaps, saved)
        return out

    def op_saved(self, kinds: set[str] | None):
        """The saved-time function (rows -> ns each saves) of the ops of `kinds` (None: all) at their typical
        communication time."""
        return self._ops.saved(kinds)


def _kind(op: str) -> str:
    return P2P if op in ("send", "recv") else op


class _OpPace:
    """Per op row of the replayed steps: its communication (its end less the last arrival it needed) and the
    typical one of its op, kind of group and size (the median over those rows)."""

    def __init__(self, replay, windows: list[int]) -> None:
        t = replay.t
        fin, start, wait, inst, msg = replay.ops
        step_of = np.frombuffer(replay.step_of, np.int32) if replay.step_of is not None else None
        n = len(t)
        rows = np.flatnonzero(np.isin(step_of, np.array(windows, np.int64))) if step_of is not None else np.arange(n)
        rows = rows[fin[rows] != NONE]
        self.rows = rows
        need = start[rows].copy()
        k = inst[rows]
        coll = k >= 0
        if coll.any():
            off = np.asarray(replay.colls.offset, np.int64)
            crow = np.asarray(replay.colls.rows, np.int64)
            sizes = np.diff(off)
            last = np.full(len(sizes), np.iinfo(np.int64).min)
            full = sizes > 0
            last[full] = np.maximum.reduceat(start[crow], off[:-1][full])
            need[coll] = np.maximum(need[coll], last[k[coll]])
        m = msg[rows]
        p2p = (m >= 0) & ~coll
        if p2p.any():
            send, recv = np.asarray(replay.p2p.send, np.int64), np.asarray(replay.p2p.recv, np.int64)
            other = np.where(rows[p2p] == send[m[p2p]], recv[m[p2p]], send[m[p2p]])
            need[p2p] = np.where(other >= 0, np.maximum(need[p2p], start[np.maximum(other, 0)]), need[p2p])
        self.comm = np.full(n, 0, np.int64)
        self.comm[rows] = np.maximum(fin[rows] - need, 0)
        key = dense_ids(np.asarray(t.op.codes, np.int64)[rows], _group_size(t)[rows],
                        np.asarray(t.bytes, np.int64)[rows])
        typical = np.full(len(rows), np.nan)
        if len(rows):
            order = np.argsort(key, kind="stable")
            first = np.flatnonzero(np.diff(key[order], prepend=-1))
            counts = np.diff(np.append(first, len(rows)))
            meds = [float(np.median(self.comm[rows[order[a:a + c]]])) for a, c in zip(first.tolist(), counts.tolist())]
            typical[order] = np.repeat(np.array(meds), counts)
        self.typical = np.full(n, np.nan)
        self.typical[rows] = typical
        names = np.array([_kind(v) for v in t.op.values] + [""], object)
        self.kind_of = names[np.asarray(t.op.codes, np.int64)] if n else np.zeros(0, object)

    def saved(self, kinds: set[str] | None):
        comm, typical, kind_of = self.comm, self.typical, self.kind_of

        def saved(rows) -> np.ndarray:
            rows = np.asarray(rows, np.int64)
            x = comm[rows] - typical[rows]
            x = np.where(np.isnan(x) | (x < 0), 0, x).astype(np.int64)
            if kinds is not None:
                x[~np.isin(kind_of[rows], list(kinds))] = 0
            return x

        return saved


def _group_size(t: EventTable) -> np.ndarray:
    """Per row, its group's size (two groups of one size move the same bytes alike)."""
    sizes = np.array([len(g.ranks) for g in t.groups] + [0], np.int64)
    return sizes[np.asarray(t.gid, np.int64)]


class _StepPace:
    """Step k's compute spans (the replay's start events) with their typical durations. Made for every step at once
    (`all`): a trace of many short steps would otherwise pay numpy's per-call cost for each of them."""

    def __init__(self, gap, ev, rank, key, typical, span, span_sites, nth, kinds) -> None:
        self.gap, self.ev, self.rank, self.key, self.typical = gap, ev, rank, key, typical
        # every span at its typical (the ideal's), what each span's rank spent past its peers, and the spans on pace
        # (set by _flag_past_noise: only what stands out from the noise)
        self.ideal = self.excess = self.paced = None
        self.span, self.span_sites, self.nth, self.kinds = span, span_sites, nth, kinds

    @classmethod
    def all(cls, replay, roles: Roles, ident, windows: list[int]) -> dict[int, "_StepPace"]:
        """Each step's spans. Keys: a span is the same on every peer in its step (role, the op identities around
        it, the kind of its interval, its occurrence); `span`, its sites, numbered within the step by first
        appearance; each key made per step by putting the step's index first."""
        _, _, hrow, hkind, _ = replay.w.columns
        sites = np.asarray(replay.t.site.codes, np.int64)
        parts = []
        for k in windows:
            events, ranks, _, _, _, gap, prev = replay.timeline(k)
            _, is_end, slot, h = events
            ev = np.flatnonzero(is_end == 0)
            parts.append((gap, ev, ranks[slot[ev]], slot[ev], hrow[h[ev]], hkind[h[ev]].astype(np.int64), prev[ev]))
        sizes = np.array([len(p[1]) for p in parts], np.int64)
        at = np.concatenate(([0], np.cumsum(sizes)))
        step = np.repeat(np.arange(len(parts), dtype=np.int64), sizes)

        def cat(i: int, dtype=np.int64) -> np.ndarray:
            return np.concatenate([np.asarray(p[i], dtype) for p in parts]) if parts else np.zeros(0, dtype)
        rank, slot, row, kind, before = cat(2), cat(3), cat(4), cat(5), cat(6)
        g = np.concatenate([np.asarray(p[0])[p[1]] for p in parts]).astype(np.float64) if parts else np.zeros(0)
        id_before = np.where(before >= 0, ident[np.maximum(before, 0)], -1)
        id_row = ident[row]
        occ = occurrences(step, slot, id_before, id_row, kind)
        key = np.stack((roles.role[rank], id_before, id_row, kind, occ), 1)
        typical = others_median(dense_ids(step, *key.T), g)
        site_before = np.where(before >= 0, sites[np.maximum(before, 0)], -1)
        span = dense_ids(step, site_before, sites[row])
        nth = occurrences(step, slot, span)
        out = {}
        for i, k in enumerate(windows):
            a, b = int(at[i]), int(at[i + 1])
            sp = span[a:b] - (span[a] if b > a else 0)  # (numbered from 0 within the step)
            out[k] = cls(parts[i][0], parts[i][1], rank[a:b], key[a:b], typical[a:b], sp,
                         (np.where(before[a:b] >= 0, before[a:b], -1), row[a:b]), nth[a:b], kind[a:b])
        return out

    def gaps(self, ranks=None, span: int | None = None, ideal: bool = False) -> np.ndarray:
        """The step's gaps with the spans of `ranks` (a set; None: every rank) on pace, or only `span` (an id of
        `self.span`; -1: none here) on every rank; `ideal`: every span at its typical, past the noise or not."""
        out = self.gap.copy()
        if span is not None:
            sel = self.span == span
        elif ranks is None:
            sel = np.ones(len(self.ev), bool)
        elif len(ranks) == 1:
            sel = self.rank == next(iter(ranks))  # (np.isin's own cost, paid per step, is many times this)
        else:
            sel = np.isin(self.rank, list(ranks))
        out[self.ev[sel]] = (self.ideal if ideal else self.paced)[sel]
        return out

    def compute(self, gaps) -> dict[int, int]:
        """Each rank's compute in the step (the sum of its gaps)."""
        ranks, inverse = np.unique(self.rank, return_inverse=True)
        sums = np.bincount(inverse.ravel(), weights=gaps[self.ev], minlength=len(ranks))
        return dict(zip(ranks.tolist(), _ints(sums)))

    def stage_paced(self, gaps, roles: Roles, stages) -> np.ndarray:
        """`gaps` with each rank of `stages` computing no longer than the typical other stage: the median over the
        other stages of their ranks' median compute in the step."""
        if len(roles.stage_ranks) < 2:
            return gaps.copy()  # (no other stage to pace by)
        compute = self.compute(gaps)
        per_stage = {s: median(compute[r] for r in rs if r in compute) for s, rs in enumerate(roles.stage_ranks)
                     if any(r in compute for r in rs)}
        out = gaps.copy()
        for s in stages:
            others = [v for x, v in per_stage.items() if x != s]
            if not others or s >= len(roles.stage_ranks):
                continue
            typical = median(others)
            for r in roles.stage_ranks[s]:
                if compute.get(r, 0) > typical > 0:
                    sel = self.ev[self.rank == r]
                    out[sel] = (gaps[sel] * (typical / compute[r])).astype(np.int64)
        return out


def _flag_past_noise(steps: list[_StepPace]) -> None:
    """Which spans are off their peers' pace beyond the noise: a span is put on pace only where its excess over
    its peers' typical passes NOISE times its rank's own spread for it over the steps (the median absolute
    deviation of its durations, as a standard deviation; at least the job's median such spread): a re-run has
    its jitter too, and a change that removed it would promise a saving no fix can make.

    A rank with no peers for a span (a pipeline of one replica: each stage alone) is measured against its own
    span in the other steps instead: a delay in some steps shows; a rank slow in every step is its stage's pace,
    which the stage's pacing measures."""
    if not steps:
        return
    keys = np.concatenate([np.column_stack((sp.rank, sp.key)) for sp in steps])
    gaps = np.concatenate([sp.gap[sp.ev] for sp in steps]).astype(np.float64)
    which = dense_ids(*keys.T)  # a rank's span, over the steps
    own = others_median(which, gaps)
    at = 0
    for sp in steps:
        n = len(sp.ev)
        alone = np.isnan(sp.typical)
        sp.typical = np.where(alone, own[at:at + n], sp.typical)
        g = sp.gap[sp.ev]
        known = ~np.isnan(sp.typical)
        sp.ideal = np.where(known, np.minimum(g, np.where(known, sp.typical, 0)), g).astype(np.int64)
        at += n
    order = np.argsort(which, kind="stable")
    first = np.flatnonzero(np.diff(which[order], prepend=-1))
    counts = np.diff(np.append(first, len(order)))
    spreads = np.array([spread(gaps[order[a:a + c]]) for a, c in zip(first.tolist(), counts.tolist())])
    typical_spread = float(np.median(spreads[counts >= 3])) if (counts >= 3).any() else 0.0
    noise_of = np.empty(len(which))
    noise_of[order] = np.repeat(NOISE * np.maximum(spreads, typical_spread), counts)
    at = 0
    for sp in steps:
        n = len(sp.ev)
        g = sp.gap[sp.ev]
        off = (g - sp.ideal) > np.maximum(noise_of[at:at + n], MIN_NOISE_NS)
        sp.paced = np.where(off, sp.ideal, g).astype(np.int64)
        sp.excess = (g - sp.paced).astype(np.int64)
        at += n


def attribute(t: EventTable, replay, pipeline: PipelineStats | None, steps: list[Step], candidate,
              stragglers: list[Straggler]) -> tuple[Attribution, "Pacing | None", StragglerVerdict | None]:
    """The attribution over the replayed steps (what_if.replay_steps'), the pacing the what-ifs re-time with, and
    the straggler verdict that follows from it (`candidate`: stragglers.verdict's, kept when it names the same
    rank)."""
    roles = roles_of(t, pipeline)
    if pipeline is not None:
        pipeline.stage_ranks = roles.stage_ranks
        pipeline.slow_stage = None
    if replay is None or not replay.windows:
        return Attribution(roles=roles.found()), None, None
    windows = replay.windows
    pacing = Pacing(replay, roles, windows)
    out = Attribution(roles=roles.found(), steps=len(windows), note=replay.note)
    measured = pacing.measured()
    ideal = pacing.after(("ideal",), lambda sp: sp.stage_paced(sp.gaps(ideal=True), roles,
                                                               range(len(roles.stage_ranks))), None)
    k_used = [k for k in windows if measured[k] > 0]
    if not k_used:
        return out, pacing, None
    mean = sum(measured[k] for k in k_used) / len(k_used)
    mean_ideal = sum(ideal[k] for k in k_used) / len(k_used)
    out.step_ns, out.ideal_step_ns = int(mean), int(mean_ideal)
    out.slowdown = mean / mean_ideal if mean_ideal > 0 else 1.0
    gain = mean - mean_ideal

    def share(after: dict[int, int]) -> float:
        return (mean - sum(after[k] for k in k_used) / len(k_used)) / gain if gain > 0 else 0.0

    # the ranks: those whose excess over their peers stands out, the most first
    excess = {}
    units: dict[tuple[int, int], int] = {}
    for k, r, x in _sums_per_step(pacing, k_used, lambda sp: sp.rank, lambda sp: sp.excess):
        excess[r] = excess.get(r, 0) + x
        units[(k, r)] = x
    med_step = median(measured[k] for k in k_used)
    floor = max(50_000, FLOOR * med_step)
    cands = sorted((r for r, x in excess.items() if x > floor), key=lambda r: -excess[r])[:MAX_RANKS]
    if len([r for r, x in excess.items() if x > floor]) > MAX_RANKS:
        out.note = _join(out.note, f"the {MAX_RANKS} ranks furthest from their peers' pace replayed one by one")
    by_rank = {r: pacing.after(("rank", r), lambda sp, r=r: sp.gaps({r})) for r in cands}
    out.ranks = {r: round(share(v), 4) for r, v in sorted(by_rank.items())}
    by_stage = {s: pacing.after(("stage", s), lambda sp, s=s: sp.stage_paced(sp.gap, roles, [s]))
                for s in range(len(roles.stage_ranks))}
    out.stages = {s: round(share(v), 4) for s, v in by_stage.items()}
    by_op = {kind: pacing.after(("op", kind), kinds={kind}) for kind in pacing.kinds}
    out.ops = {kind: round(share(v), 4) for kind, v in by_op.items()}
    spans = _top_spans(pacing, k_used, floor)
    by_span = {name: pacing.after(("span", name), lambda sp, ids=ids: sp.gaps(span=ids.get(sp, -1)))
               for name, ids in spans}
    out.spans = {name: round(share(v), 4) for name, v in by_span.items()}

    # the verdict
    threshold = MIN_SAVING * mean

    def saving(after: dict[int, int]) -> float:
        return mean - sum(after[k] for k in k_used) / len(k_used)

    found = []
    late_in: dict[int, int] = {}
    savings = sorted(((saving(after), r) for r, after in by_rank.items()), reverse=True)
    if savings:
        save, r = savings[0]
        second = savings[1][0] if len(savings) > 1 else 0.0
        late_in = {x: sum(measured[k] - after[k] >= floor for k in k_used) for x, after in by_rank.items()}
        steady = (late_in[r] >= PERSISTENT * len(k_used)
                  and all(DOMINANT * n <= late_in[r] for x, n in late_in.items() if x != r))
        left = _left_spread(by_rank[r], ideal, k_used)
        one_peer = len(roles.peers_of(r)) <= 2  # (peers_of counts the rank itself)
        if save >= (ONE_PEER_SAVING * mean if one_peer else threshold) and (
                (save >= left and (save >= DOMINANT * max(second, 0.0) or steady))
                or _recurring(r, _standing_out(units, max(floor, SPREAD * med_step)), measured, by_rank[r], left)):
            found.append((save, "worker", r))
    # a stage's own imbalance: what pacing it saves once every rank is at its peers' pace (a slow worker's excess,
    # which the stage's pace would also remove, is the worker's), if every rank of it computes SLOW_STAGE times
    # the typical other stage at its peers' pace
    compute = _mean_compute(pacing, k_used, paced=True)
    slow = [s for s in range(len(roles.stage_ranks)) if _stage_ratio(compute, roles, s) >= SLOW_STAGE]
    if slow:
        all_paced = pacing.after(("ranks",), lambda sp: sp.gaps())
        base = sum(all_paced[k] for k in k_used) / len(k_used)
        for s in slow:
            after = pacing.after(("stage of paced ranks", s), lambda sp, s=s: sp.stage_paced(sp.gaps(), roles, [s]))
            save = saving(after) - (mean - base)
            if save >= threshold:
                found.append((save, "stage", s))
    if found:
        save, out.kind, who = max(found)
        if out.kind == "worker":
            out.rank = who
            second = savings[1] if len(savings) > 1 else None
            out.reason = (f"rank {who} at its peers' pace saves {_ms(save)} a step ({save / mean:.0%})"
                          + (f", {save / max(second[0], 1):.1f}x the next rank's (rank {second[1]})" if second and
                             second[0] >= MIN_NOISE_NS else "; no other rank saves anything")
                          + f"; off its peers' pace in {late_in[who]} of {len(k_used)} steps")
        else:
            out.stage = who
            out.reason = (f"every rank of stage {who} ({', '.join(map(str, roles.stage_ranks[who]))}) computes "
                          f"{_stage_ratio(compute, roles, who):.2f}x the typical other stage; at its pace the step "
                          f"is {_ms(save)} shorter")
    else:
        late_ranks = _outlier_ranks(units, max(floor, SPREAD * med_step))
        if gain >= threshold and len(late_ranks) >= 2:
            out.kind = "spread"
            out.reason = (f"the ideal step is {_ms(gain)} shorter ({gain / mean:.0%}), but no rank nor stage "
                          f"stands out: ranks {', '.join(map(str, sorted(late_ranks)))} are each late in some "
                          "steps")
        else:
            out.reason = f"the ideal step is {_ms(gain)} shorter, within the noise"
    verdict = None
    if out.kind == "worker":
        verdict = _worker_verdict(t, out.rank, candidate, stragglers, measured, by_rank[out.rank], floor, pacing,
                                  k_used)
    if pipeline is not None:
        pipeline.slow_stage = out.stage
        stages = range(len(roles.stage_ranks))
        pipeline.slow_factor = (_stage_ratio(compute, roles, out.stage) if out.stage is not None else
                                max((_stage_ratio(compute, roles, s) for s in stages), default=1.0))
    return out, pacing, verdict


def _left_spread(after: dict[int, int], ideal: dict[int, int], ks: list[int]) -> float:
    """The steps' own spread with a candidate on pace: how much what is left of each step beyond the ideal
    (after - ideal) varies over the steps (the median absolute deviation, as a standard deviation). A saving below
    it is the job's jitter: a re-run moves the steps as much (a balanced job's few hiccups on one rank would
    otherwise name it). Taking the candidate's own saving out first keeps a worker late in some
    steps from widening it, and the ideal's steps out keeps the steps' structure (a pipeline's, a job whose
    steps differ by design) from counting as spread."""
    return spread([after[k] - ideal[k] for k in ks])


def _stage_ratio(compute: dict[int, float], roles: Roles, s: int) -> float:
    """The least compute of stage s's ranks over the typical other stage's (the median of the other stages' median
    rank): every rank of s computes at least this many times as much."""
    others = [median(compute[r] for r in rs if r in compute) for x, rs in enumerate(roles.stage_ranks)
              if x != s and any(r in compute for r in rs)]
    mine = [compute[r] for r in roles.stage_ranks[s] if r in compute]
    if not others or not mine or median(others) <= 0:
        return 1.0
    return min(mine) / median(others)


def _sums_per_step(pacing: Pacing, ks: list[int], keys_of, values_of) -> list[tuple[int, int, int]]:
    """[(k, key, sum)]: each step's values summed per key (keys ascending within a step, each sum made an int),
    for all the steps in one pass."""
    steps = [pacing.step(k) for k in ks]
    sizes = np.array([len(sp.ev) for sp in steps], np.int64)
    if not sizes.sum():
        return []
    step = np.repeat(np.arange(len(steps), dtype=np.int64), sizes)
    keys = np.concatenate([np.asarray(keys_of(sp), np.int64) for sp in steps])
    values = np.concatenate([np.asarray(values_of(sp), np.float64) for sp in steps])
    pair = dense_ids(step, keys)
    first = np.unique(pair, return_index=True)[1]  # (ids number pairs by first appearance: one index each)
    order = np.lexsort((keys[first], step[first]))
    sums = _ints(np.bincount(pair, weights=values, minlength=len(first))[order])
    return list(zip([ks[i] for i in step[first][order].tolist()], keys[first][order].tolist(), sums))


def _ints(sums) -> list[int]:
    """Float sums of nanoseconds as ints: a damaged trace's clamped times add up past int64 (and to inf)."""
    return np.nan_to_num(np.clip(sums, -2.0 ** 62, 2.0 ** 62)).astype(np.int64).tolist()


def _mean_compute(pacing: Pacing, ks: list[int], paced: bool) -> dict[int, float]:
    """Each rank's compute a step, as measured or with its spans at its peers' pace."""
    total: dict[int, int] = {}
    for _k, r, c in _sums_per_step(pacing, ks, lambda sp: sp.rank,
                                   (lambda sp: sp.paced) if paced else (lambda sp: sp.gap[sp.ev])):
        total[r] = total.get(r, 0) + c
    return {r: c / len(ks) for r, c in total.items()}


def _top_spans(pacing: Pacing, ks: list[int], floor: float, most: int = 4) -> list[tuple[str, dict]]:
    """The compute spans with the most excess over their peers' (past the noise), each with its id per step."""
    w = pacing.replay.w
    by_name: dict[str, int] = {}
    ids: dict[str, dict] = {}
    for k, s, x in _sums_per_step(pacing, ks, lambda sp: sp.span, lambda sp: sp.excess):
        sp = pacing.step(k)
        e = int(np.argmax(sp.span == s))  # the span's first interval in the step
        name = w.span(int(sp.span_sites[0][e]), int(sp.span_sites[1][e]))
        by_name[name] = by_name.get(name, 0) + x
        ids.setdefault(name, {})[sp] = s
    top = sorted((n for n, x in by_name.items() if x > floor and "?" not in n),  # (a trace without call sites:
                 key=lambda n: -by_name[n])[:most]                                  # its spans have no names)
    return [(n, ids[n]) for n in top]


def _outlier_ranks(units: dict[tuple[int, int], int], floor: float) -> set[int]:
    """The ranks with a step whose excess over their peers stands out from the others'."""
    return set(_standing_out(units, floor))


def _standing_out(units: dict[tuple[int, int], int], floor: float) -> dict[int, list[int]]:
    """Per rank, its steps whose excess over their peers stands out from the others' (median + OUTLIERS median
    absolute deviations, and past the floor)."""
    xs = list(units.values())
    if not xs:
        return {}
    med = median(xs)
    mad = median(abs(x - med) for x in xs) * 1.4826
    cut = max(floor, med + OUTLIERS * mad)
    out: dict[int, list[int]] = {}
    for (k, r), x in units.items():
        if x > cut:
            out.setdefault(r, []).append(k)
    return out


def _recurring(r: int, standing: dict[int, list[int]], measured: dict[int, int], after: dict[int, int],
               left: float) -> bool:
    """Whether rank r is a worker late in some steps only: its steps that stand out are at least RECURRING and
    DOMINANT times any other rank's, and putting it on pace saves in them (their mean) SE_NOISE standard errors of
    the steps' spread over that many steps (the spread is each step's, the saving their mean: a fault in a third
    of the steps, averaged over all of them, fell below the spread, and the verdict was "none")."""
    mine = standing.get(r, [])
    n = len(mine)
    if n < RECURRING or any(DOMINANT * len(ks) > n for x, ks in standing.items() if x != r):
        return False
    return sum(measured[k] - after[k] for k in mine) / n >= SE_NOISE * left / n ** 0.5


def _worker_verdict(t: EventTable, rank: int, candidate: StragglerVerdict | None, stragglers: list[Straggler],
                    measured: dict[int, int], on_pace: dict[int, int], floor: float, pacing: Pacing,
                    ks: list[int]) -> StragglerVerdict:
    """The straggler verdict for the worker the attribution names: the stragglers rule's steps, period and cost
    when it names the same rank (from the waiting it caused), else the steps where putting it on pace saves past the
    noise; its site is, either way, its span with the most excess over its peers over the steps (the costliest late
    arrival's span flipped from run to run between the delay's and the code between two gradient buckets, whose
    waits it also caused)."""
    from dataclasses import replace

    from ..waits.stragglers import period_of, split_minor  # (the one rule for a period, and for minor late steps)

    # (site code before, site code, its n-th such span in a step) -> its excess over the steps
    excess: dict[tuple[int, int, int], int] = {}
    sites = t.site.codes
    for k in ks:
        sp = pacing.step(k)
        mine = np.flatnonzero((sp.rank == rank) & (sp.excess > 0))
        for e in mine.tolist():
            before, row = int(sp.span_sites[0][e]), int(sp.span_sites[1][e])
            key = (sites[before] if before >= 0 else -1, sites[row], int(sp.nth[e]))
            excess[key] = excess.get(key, 0) + int(sp.excess[e])
    before = here = nth = None
    if excess:
        b, r, nth = max(excess, key=excess.__getitem__)
        here = t.site.values[r] or None
        before = t.site.values[b] if b >= 0 and t.site.values[b] else "its start"
    where = dict(site=f"{before} → {here}" if here else None, from_site=before if here else None, to_site=here,
                 site_nth=nth if here else None)
    if candidate is not None and candidate.rank == rank:
        return replace(candidate, **where) if here else candidate
    saved = {k: measured[k] - on_pace[k] for k in ks}
    big = [v for v in saved.values() if v > floor]
    cut = max(floor, MINOR * median(big)) if big else floor
    late, minor = split_minor(sorted(k for k, v in saved.items() if v >= cut), saved)
    cost = {s.rank: s.delay_cost_ns for s in stragglers}
    mine = cost.get(rank, 0)
    # its cost shared between its late and minor steps as the saving is
    part = sum(saved[k] for k in late) / (sum(saved[k] for k in late + minor) or 1)
    return StragglerVerdict(rank=rank, delay_cost_ns=mine, steps=late, period=period_of(late), **where,
                            per_step_ns=int(mine * part) // max(1, len(late)), noise_ns=int(cut),
                            late_count=len(late), share=mine / (sum(cost.values()) or 1), minor_steps=minor,
                            minor_ns=int(mine * (1 - part)) // len(minor) if minor else 0)


def _ms(ns: float) -> str:
    from ...units import fmt_ns

    return fmt_ns(ns)


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


__all__ = ["Pacing", "attribute"]
