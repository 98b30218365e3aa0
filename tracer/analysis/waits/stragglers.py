"""Who made the others wait, per rank and per step, and the straggler verdict (docs/ANALYSIS.md, "Stragglers").

Every wait (waits/wait_states.py) has a cause: the last arrival of an N×N op, the root of a Late Broadcast, the last sender of
an Early Reduce, the sender of a late message, the receiver a send waited for. Where that rank was itself waiting
at the time, the cause is carried back along the chain to the rank that was not (`propagated`). A rank's delay
cost is the waiting it caused: per waiting rank the union of the intervals it spent waiting for it (DDP's buckets
wait for the same late arrival at once: counted once), summed over the waiting ranks.

The verdict names a straggler only when its cost stands out from the job's own jitter. The units compared are the
steady steps (warm-up and set-up left out) or, with fewer than `MIN_UNITS` of them, the collectives and messages.
In each unit the rank the others waited for most leads it. A rank is named when
- it led nearly every unit (`PERSISTENT`), each time by more than a floor (`FLOOR` of the median step, and the
  clocks' uncertainty), causing `DOMINANT` times the waiting all the others caused (from `MEDIAN_WORLD` ranks on,
  the median other rank caused), or `DOMINANT_STEADY` times theirs by about the same amount each time (`STEADY`):
  a persistently slow rank. (Both counted over the units of ordinary size, those `CLEAN` leaves in: another
  rank's start-up hiccup is not the jitter.) Or
- its cost led units as an outlier, over the median unit's largest cost by `OUTLIERS` median absolute deviations
  (the jitter, measured without the units far above it: `CLEAN`, again
  over the ones left until it settles), twice as much as all the other ranks' outliers
  together (random hiccups of the machine strike ranks alike), in at least `MIN_OUTLIERS` units or in fewer that
  hold `SINGLE` of the steady time: an occasional or periodic straggler.
Its late units are those past the jitter and at least `MINOR` of its median late unit; where the smallest of them
fall under `MINOR` of the next larger and hold under `MINOR_SHARE` of its cost, they are said apart (`split_minor`).
Otherwise no rank is named. In a
pipeline the waits between its stages are the schedule's bubble, not straggling: they are left out (pipeline/stages.py
names a slower stage), and no chain is followed through them.
"""

from __future__ import annotations

from array import array
from collections import Counter
from statistics import median
from typing import TYPE_CHECKING

import numpy as np

from ...data.table.columns import extend_from_numpy, groups_of, link_in, order_by, repeat_each, run_starts, to_list
from ...data.table import NONE, EventTable
from . import propagation
from ..core.results import PipelineStats, Step, Straggler, StragglerVerdict
from .wait_states import reach_before, union_by

if TYPE_CHECKING:
    from ..core.tables import CollectiveTable, P2PTable

MIN_UNITS = 3       # steady steps needed to compare steps (else collectives and messages are compared)
PERSISTENT = 0.8    # of the units
DOMINANT = 10       # times the waiting all the others caused
DOMINANT_STEADY = 3  # times theirs, for a rank late by about the same each time:
STEADY = 0.25       # the median absolute deviation of its lateness, over its median
OUTLIERS = 6.0      # median absolute deviations (scaled to a standard deviation) above the median
CLEAN = 5.0         # units above this many are left out when the median and deviation are measured
MINOR = 0.25        # of the named rank's median late unit: a late unit below is not one of its late units
MINOR_SHARE = 0.25  # of its cost: late units under MINOR of the next larger that together hold less are said apart
MIN_OUTLIERS = 3    # outlier units
SINGLE = 0.2        # of the steady time: fewer outliers than MIN_OUTLIERS name a rank only if they cost this much
FLOOR = 0.02        # of the median unit's length
MEDIAN_WORLD = 8    # ranks from which a rank's cost is compared with the median rank's, not all the others' sum
MIN_FLOOR_NS = 50_000


class WaitRecord:
    """The waits of a trace as parallel lists: waiting rank, causing rank, interval, the waiting rank's event row
    and the causing rank's (its arrival), unit (the wait's instance: collective k, or message m as -(m + 1)), and
    whether it counts for the verdict (not a pipeline's bubble)."""

    def __init__(self) -> None:
        # typed arrays, not lists: a list of times holds an int object and a pointer per wait, and
        # a large trace has millions of waits
        self.waiter = array("i")
        self.culprit = array("i")
        self.a = array("q")
        self.b = array("q")
        self.row = array("q")
        self.culprit_row = array("q")
        self.unit = array("q")
        self.counts = array("b")

    def view(self, name: str):
        """Column `name` as a numpy array over the same bytes (no copy)."""
        col = getattr(self, name)
        return np.frombuffer(col, dtype=col.typecode)

    def add(self, waiter: int, culprit: int, a: int, w: int, row: int, culprit_row: int, unit: int,
            counts: bool) -> None:
        self.waiter.append(waiter)
        self.culprit.append(culprit)
        self.a.append(a)
        self.b.append(a + w)
        self.row.append(row)
        self.culprit_row.append(culprit_row)
        self.unit.append(unit)
        self.counts.append(counts)


def wait_records(t: EventTable, collectives: CollectiveTable, culprits: list[int | None], p2p: P2PTable,
                 pipeline: PipelineStats | None) -> WaitRecord:
    """Every wait of the trace, in numpy: in each collective, every rank that waited for its culprit (instances in
    order, ranks in the instance's order); then each message's late sender's and late receiver's waits."""
    out = WaitRecord()
    pipelines = [set(p) for p in pipeline.pipelines] if pipeline else []
    # a group or a message between stages of one pipeline: the schedule's bubble
    in_pipe = np.array([any(len(g.ranks) > 1 and p.issuperset(g.ranks) for p in pipelines) for g in t.groups]
                       + [False], bool)
    pipe_pairs = {(a, b) for p in pipelines for a in p for b in p}
    rank, start = np.frombuffer(t.rank, np.int32), np.frombuffer(t.start_ns, np.int64)

    sizes = np.diff(np.frombuffer(collectives.offset, np.int64))
    inst = repeat_each(np.arange(len(sizes)), sizes)  # each member's instance
    rows = np.frombuffer(collectives.rows, np.int32).astype(np.int64)
    waits = np.frombuffer(collectives.waits, np.int64)
    culprit = np.array([-1 if c is None else c for c in culprits] + [-1], np.int64)[inst]
    member_rank = rank[rows]
    is_culprit = member_rank == culprit
    culprit_row = collectives.culprit_rows(culprits)
    waited = (culprit >= 0) & (waits > 0) & ~is_culprit
    k = inst[waited]
    crow = culprit_row[k]
    _extend(out, member_rank[waited], culprit[waited], start[rows[waited]], waits[waited], rows[waited],
            np.where(crow >= 0, crow, rows[waited]), k,
            ~in_pipe[np.frombuffer(collectives.gid, np.int32)[k]])

    src, dst = np.frombuffer(p2p.src, np.int32), np.frombuffer(p2p.dst, np.int32)
    send, recv = np.frombuffer(p2p.send, np.int32), np.frombuffer(p2p.recv, np.int32)
    ls, lr = np.frombuffer(p2p.late_sender_ns, np.int64), np.frombuffer(p2p.late_receiver_ns, np.int64)
    counts = ~link_in(src, dst, pipe_pairs)
    late_sender = (ls != 0) & (recv != NONE)      # the receiver waited for the sender
    late_receiver = (lr != 0) & (send != NONE)    # the sender waited for the receiver
    both = np.concatenate((np.flatnonzero(late_sender) * 2, np.flatnonzero(late_receiver) * 2 + 1))
    order = np.sort(both)  # each message's two waits in turn, as the messages come
    j, second = order // 2, (order % 2).astype(bool)
    waiter = np.where(second, src[j], dst[j])
    cause = np.where(second, dst[j], src[j])
    row = np.where(second, send[j], recv[j]).astype(np.int64)
    other = np.where(second, recv[j], send[j]).astype(np.int64)
    _extend(out, waiter, cause, start[row], np.where(second, lr[j], ls[j]), row, other, -(j + 1), counts[j])
    return propagated(out)


def _extend(rec: WaitRecord, waiter, culprit, a, w, row, culprit_row, unit, counts) -> None:
    """WaitRecord.add of numpy columns, in their order."""
    for name, col in (("waiter", waiter), ("culprit", culprit), ("a", a), ("b", a + w), ("row", row),
                      ("culprit_row", culprit_row), ("unit", unit), ("counts", counts)):
        arr = getattr(rec, name)
        extend_from_numpy(arr, col)


def _stretches(rec: WaitRecord):
    """Every waiting rank's counted waits as disjoint stretches in time order: (slot, off, start, end, culprit,
    culprit row), rank r's at [off[slot[r]], off[slot[r] + 1]) (slot -1: it never waited), a wait overlapping
    the rank's earlier ones keeping only what lies past them. In numpy (a tuple per wait would make
    an object of every wait, millions on a large trace)."""
    counted = np.flatnonzero(rec.view("counts"))  # (a pipeline's bubble: nothing to carry)
    waiter = rec.view("waiter")[counted]
    a = rec.view("a")[counted]
    order = counted[order_by(waiter, a)]  # by rank, then start (stable: equal starts in record order)
    waiter = rec.view("waiter")[order]
    a, b = rec.view("a")[order], rec.view("b")[order]
    low = np.iinfo(np.int64).min
    start = np.maximum(a, reach_before(np.where(b > a, b, low), run_starts(waiter)))
    keep = b > start
    waiter = waiter[keep]
    ranks, first = np.unique(waiter, return_index=True)
    slot = np.full(int(ranks.max()) + 1 if len(ranks) else 0, -1, np.int64)
    slot[ranks] = np.arange(len(ranks))
    off = np.append(first, len(waiter)).astype(np.int64)
    return (slot, off) + tuple(np.ascontiguousarray(c[keep]) for c in
                               (start, b, rec.view("culprit")[order], rec.view("culprit_row")[order]))


def propagated(rec: WaitRecord) -> WaitRecord:
    """The waits with their causes carried back along chains (Scalasca's propagation of wait states): while rank a
    waited for rank b, if b was itself waiting for c, that stretch of a's wait was caused by c (and so on back:
    c may have been waiting too; waits/propagation.py follows them). A ring exchange passes one rank's delay on from
    neighbour to neighbour; without this the ranks that passed it on would share the blame. A chain that comes
    back to a rank already on it (a cycle) stops there. Each stretch keeps its waiter, event and unit; its culprit
    row is the root's arrival."""
    counted = rec.view("counts") != 0
    if len(np.unique(rec.view("waiter")[counted])) < 2:
        return rec
    stretches = _stretches(rec)
    # most waits are for a rank that was not waiting itself meanwhile: they stay as they are, found in numpy; the
    # others are followed back
    chained = np.flatnonzero(_waiting_meanwhile(rec, *stretches[:4]))
    parts, counts = propagation.follow(len(rec.waiter), *(rec.view(name)[chained] for name in
                                                     ("waiter", "culprit", "culprit_row", "a", "b")),
                                  *stretches, propagation.MAX_CHAIN)
    times = np.ones(len(rec.waiter), np.int64)  # each record's records out, in its place
    times[chained] = counts
    at = np.cumsum(times) - times
    where = repeat_each(at[chained] - (np.cumsum(counts) - counts), counts) + np.arange(len(parts))
    del at
    out = WaitRecord()
    # a column at a time (all of them at once would raise the analysis' peak memory by their size)
    for name in ("waiter", "culprit", "a", "b", "row", "culprit_row", "unit", "counts"):
        col = repeat_each(rec.view(name), times)
        if name in _FROM_PARTS:
            col[where] = parts[:, _FROM_PARTS[name]]
        extend_from_numpy(getattr(out, name), col)
        del col
    return out


_FROM_PARTS = {"culprit": 0, "culprit_row": 1, "a": 2, "b": 3}  # propagated: a stretch's columns in chains' parts


def _waiting_meanwhile(rec: WaitRecord, slot, off, starts, ends) -> "np.ndarray":
    """Per wait record, whether its culprit has a counted stretch of waiting that overlaps it, or it is empty (the
    records `propagated` must follow back). A rank's stretches are disjoint and in time order: the first that ends
    after the record's start is the only one that can begin before its end."""
    culprit, a, b = rec.view("culprit"), rec.view("a"), rec.view("b")
    out = b <= a
    for c, part in groups_of(culprit):
        s = slot[c] if 0 <= c < len(slot) else -1
        if s < 0:
            continue
        mine_starts, mine_ends = starts[off[s]:off[s + 1]], ends[off[s]:off[s + 1]]
        k = np.searchsorted(mine_ends, a[part], side="right")
        inside = k < len(mine_ends)
        out[part[inside]] = mine_starts[k[inside]] < b[part[inside]]
    return out


def wait_totals(rec: WaitRecord, ranks: list[int]) -> dict[int, int]:
    """Per rank, the time it spent waiting for peers: the union of its waits' intervals."""
    (waiter,), ns = union_by([rec.waiter], rec.a, rec.b)
    out = dict.fromkeys(ranks, 0)
    out.update(zip(waiter.tolist(), ns.tolist()))
    return out


def _caused_per(rec: WaitRecord, units, keep=None) -> dict[int, dict[int, int]]:
    """unit -> culprit -> the waiting it caused in that unit: per waiting rank the union of the intervals it waited
    for it, summed over the waiting ranks. units: each record's unit (a numpy int array); keep: which records
    count (a numpy bool array; None: all)."""
    culprit, waiter = rec.view("culprit"), rec.view("waiter")
    a, b = rec.view("a"), rec.view("b")
    if keep is not None:
        units, culprit, waiter, a, b = units[keep], culprit[keep], waiter[keep], a[keep], b[keep]
    (u, c, _), ns = union_by([units, culprit, waiter], a, b)
    # summed over the waiting ranks: (unit, culprit) pairs are runs of the sorted rows
    first = np.flatnonzero(run_starts(u, c))
    out: dict[int, dict[int, int]] = {}
    for u, c, ns in zip(u[first].tolist(), c[first].tolist(), np.add.reduceat(ns, first).tolist() if len(u) else []):
        caused = out.get(u)
        if caused is None:
            caused = out[u] = {}
        caused[c] = ns
    return out


def stragglers_of(rec: WaitRecord, culprits: list[int | None], ranks: list[int]) -> list[Straggler]:
    """Per rank, the waiting it caused others (its delay cost) and how often it arrived last; worst first."""
    cost = dict.fromkeys(ranks, 0)
    cost.update(_caused_per(rec, np.zeros(len(rec.a), dtype=np.int64)).get(0, {}))
    # the instances waited in (not set() nor np.unique, whose hashing is one C loop over every wait)
    units = np.frombuffer(rec.unit, np.int64)
    seen = np.zeros(len(culprits), bool)
    seen[units[units >= 0]] = True
    late = Counter(culprits[u] for u in to_list(np.flatnonzero(seen)))
    out = [Straggler(r, cost[r], late.get(r, 0)) for r in cost]
    out.sort(key=lambda s: (-s.delay_cost_ns, -s.late_count, s.rank))
    return out


def _steps_of(rec: WaitRecord, step_of: array):
    """Each wait's step (its event's; -1: none), as a numpy array."""
    return np.frombuffer(step_of, dtype=step_of.typecode)[rec.view("row")].astype(np.int64)


def fill_steps(rec: WaitRecord, steps: list[Step], step_of: array) -> None:
    """Each step's waits per rank and the waiting each rank caused in it."""
    units = _steps_of(rec, step_of)
    stepped = units >= 0
    (k, w), ns = union_by([units[stepped], rec.view("waiter")[stepped]], rec.view("a")[stepped], rec.view("b")[stepped])
    waits: dict[int, dict[int, int]] = {}
    for k, w, ns in zip(k.tolist(), w.tolist(), ns.tolist()):  # (in order of step, then rank)
        waits.setdefault(k, {})[w] = ns
    caused = _caused_per(rec, units, stepped)
    for s in steps:
        s.wait_ns = waits.get(s.index, {})
        s.caused_ns = dict(sorted(caused.get(s.index, {}).items()))


def verdict(t: EventTable, rec: WaitRecord, steps: list[Step], step_of: array) -> StragglerVerdict | None:
    """The straggler, or None when no rank's delays stand out from the jitter (the module docstring's rules).
    Sets each step's late_rank."""
    steady = {s.index for s in steps if not s.warmup}
    by_step = len(steady) >= MIN_UNITS
    # cost[unit][rank]: the waiting each rank caused in each unit, pipeline bubbles left out
    counts = rec.view("counts") != 0
    if by_step:
        unit_of = _steps_of(rec, step_of)
        counts &= np.isin(unit_of, np.fromiter(steady, dtype=np.int64, count=len(steady)))
    else:
        unit_of = rec.view("unit")
    cost = _caused_per(rec, unit_of, counts)
    per_step = cost if by_step else {s.index: s.caused_ns for s in steps}
    if by_step:
        units = sorted(steady)
        span = {s.index: s.end_ns - s.start_ns for s in steps}
        steady_ns = sum(span[u] for u in units)
        typical = median(span[u] for u in units)
    else:
        units = sorted(cost)
        steady_ns = max(t.end_ns, default=0) - min(t.start_ns, default=0)
        typical = 0
    total: dict[int, int] = {}
    for c in cost.values():
        for r, v in c.items():
            total[r] = total.get(r, 0) + v
    everyone = sum(total.values())
    if not units or not everyone:
        _set_late_ranks(steps, per_step, float("inf"))
        return None
    tops = [max(cost.get(u, {}).values(), default=0) for u in units]
    med, mad = _center(tops)
    unc = max((info.clock_uncertainty_ns for info in t.ranks.values()), default=0)
    floor = max(MIN_FLOOR_NS, 4 * unc, FLOOR * typical)
    # the jitter is measured without the units far above it: a straggler late in a third of the steps would
    # otherwise widen the very spread its delays are measured against. When no rank is named, a step's late rank
    # is only one past the jitter measured over all the steps (a balanced job's steps are not marked late by it)
    plain = max(floor, med + OUTLIERS * mad)
    ordinary_top, clean = _ordinary(tops, med, mad)
    ordinary = total
    if len(clean) * 2 > len(tops):
        # the ranks' costs that the persistent rule compares: those of the units of ordinary size. A start-up
        # hiccup is no measure of the jitter: one rank's large delay in the first step would outweigh a rank
        # late in every other step, and no straggler would be named
        ordinary = {}
        for u, top in zip(units, tops):
            if top <= ordinary_top:
                for r, v in cost.get(u, {}).items():
                    ordinary[r] = ordinary.get(r, 0) + v
        med, mad = _center(clean)
    outlier = max(floor, med + OUTLIERS * mad)
    leader = {u: max(c, key=lambda r: (c[r], -r)) for u in units if (c := cost.get(u))}
    # a persistently slow rank: the one the others waited for in nearly every unit, by more than the floor
    leads = Counter(r for u, r in leader.items() if cost[u][r] > floor)
    if leads:
        rank, n = max(leads.items(), key=lambda x: (x[1], total[x[0]], -x[0]))
        late = [u for u in units if leader.get(u) == rank and cost[u][rank] > floor]
        # and by far: the waiting the others caused is the jitter. A rank that merely tends to come last by the
        # jitter (a process scheduled a little worse) causes a few times theirs, and by amounts as scattered as
        # the jitter; a slow rank causes tens of times theirs, or several times and by about the same each time
        # (its own extra work), however much a start-up hiccup of another rank adds to theirs (left out above)
        mine = [cost[u][rank] for u in late]
        level = median(mine)
        even = median(abs(x - level) for x in mine) <= STEADY * level
        ratio = ordinary.get(rank, 0) / max(1, _jitter_cost(ordinary, rank, t.ranks))
        if len(units) >= MIN_UNITS and n >= PERSISTENT * len(units) and (
                ratio >= DOMINANT or (even and ratio >= DOMINANT_STEADY)):
            return _named(t, rec, steps, step_of, cost, per_step, by_step, rank, late, floor, total, everyone)
    # an occasional or periodic straggler: its delays are outliers against the jitter, and cost at least twice
    # everyone else's outliers together (random hiccups of the machine strike ranks alike); fewer than
    # MIN_OUTLIERS only if they hold a fifth of the run
    outliers: dict[int, list[int]] = {}
    for u, r in leader.items():
        if cost[u][r] > outlier:
            outliers.setdefault(r, []).append(u)
    _set_late_ranks(steps, per_step, plain)
    if not outliers:
        return None
    weight = {r: sum(cost[u][r] for u in us) for r, us in outliers.items()}
    rank = max(weight, key=lambda r: (weight[r], -r))
    late = outliers[rank]
    others = sum(weight.values()) - weight[rank]
    if weight[rank] < 2 * others or not (len(late) >= MIN_OUTLIERS or weight[rank] >= SINGLE * steady_ns):
        return None
    return _named(t, rec, steps, step_of, cost, per_step, by_step, rank, late, outlier, total, everyone)


def _jitter_cost(total: dict[int, int], rank: int, ranks) -> float:
    """What the jitter made the others cost, for comparing `rank`'s cost with: in a world of fewer than
    `MEDIAN_WORLD` ranks, all the others' cost together; in a larger one, the cost of the median other rank.
    There, the others' total grows with the ranks the jitter strikes (a thousand ranks' hiccups) while a slow
    rank only delays the groups it is in: against the sum, the
    steady straggler of a thousand-rank job, far above the median rank's cost, would be named by no rule."""
    others = [total.get(r, 0) for r in ranks if r != rank]  # (a rank that caused no waiting counts, as 0)
    if len(others) + 1 < MEDIAN_WORLD:
        return sum(others)
    return median(others)


def _ordinary(tops: list[int], med: float, mad: float) -> tuple[float, list[int]]:
    """The units of ordinary size, and the top of them: those within CLEAN deviations of the center, the center and
    the deviation measured again over the ones left until no more is left out (while they are most units). A
    straggler late in a third of the steps widens the first deviation so far that most of its own delays are within
    it (measured once, such a straggler was named late in only a few of its late steps)."""
    top = med + CLEAN * mad
    clean = [x for x in tops if x <= top]
    while len(clean) * 2 > len(tops):
        m, d = _center(clean)
        tighter = [x for x in tops if x <= m + CLEAN * d]
        if len(tighter) >= len(clean) or len(tighter) * 2 <= len(tops):
            break
        top, clean = m + CLEAN * d, tighter
    return top, clean


def _center(xs: list[int]) -> tuple[float, float]:
    """(median, median absolute deviation scaled to a standard deviation)."""
    med = median(xs)
    return med, median(abs(x - med) for x in xs) * 1.4826


def _named(t: EventTable, rec: WaitRecord, steps: list[Step], step_of: array, cost: dict, per_step: dict,
           by_step: bool, rank: int, late: list[int], threshold: float, total: dict[int, int], everyone: int
           ) -> StragglerVerdict:
    # its late units: past the jitter, and of its delays proper, not the few ms of a machine's hiccup that came
    # on top of much larger ones (a step of those is no step the user needs to look at; nor any other rank's).
    # Measured against its typical (median) late unit, not its costliest: one delay costs more in a step where
    # more ranks wait for it (a world barrier), and against that step a many-rank job's steady straggler read as
    # "late" in under half the steps it was late in
    worst = max(late, key=lambda u: cost[u][rank])
    cut = max(threshold, MINOR * median(cost[u][rank] for u in late))
    late = [u for u in late if cost[u][rank] >= cut]
    _set_late_ranks(steps, per_step, cut)
    # (steps only: a minor late collective would leave the count of "late N times" unsaid)
    late, minor = split_minor(late, {u: cost[u][rank] for u in late}) if by_step else (late, [])
    late_cost = sum(cost[u][rank] for u in late)
    before, here = _sites(t, rec, rank, worst, step_of if by_step else None)
    return StragglerVerdict(
        rank=rank, delay_cost_ns=total[rank], steps=late if by_step else [], period=period_of(late) if by_step else None,
        site=f"{before} → {here}" if here else None, from_site=before, to_site=here,
        per_step_ns=late_cost // len(late), noise_ns=int(threshold), late_count=len(late), share=total[rank] / everyone,
        minor_steps=minor, minor_ns=sum(cost[u][rank] for u in minor) // len(minor) if minor else 0)


def split_minor(late: list[int], cost: dict[int, int]) -> tuple[list[int], list[int]]:
    """(its late units proper, the minor ones), each sorted. Sorted by cost, where one falls under `MINOR` of the next
    larger and it and all below hold under `MINOR_SHARE` of the cost, those are minor (the most units kept that
    allow it). A rank late by 30 ms every third step and by 1 ms in every other step: its late
    steps are every third, not every step, whose period hid the 30 ms; a rank late by 5 ms every step and by 50 ms
    once keeps every step (the 5 ms hold nearly half its cost)."""
    order = sorted(late, key=lambda u: (-cost[u], u))
    limit = MINOR_SHARE * sum(cost[u] for u in order)
    below = 0
    for k in range(len(order) - 1, 0, -1):  # (from the smallest up: the first split found keeps the most)
        below += cost[order[k]]
        if below >= limit:
            break
        if cost[order[k]] < MINOR * cost[order[k - 1]]:
            return sorted(order[:k]), sorted(order[k:])
    return sorted(late), []


def _set_late_ranks(steps: list[Step], cost: dict[int, dict[int, int]], threshold: float) -> None:
    """Each steady step's late rank: the one the others waited for most (cost: step -> rank -> waiting caused), if
    by more than the threshold (the floor, for a persistently slow rank)."""
    for s in steps:
        c = cost.get(s.index)
        s.late_rank = None
        if c and not s.warmup:
            r = max(c, key=lambda r: (c[r], -r))
            if c[r] > threshold:
                s.late_rank = r


def period_of(late: list[int]) -> int | None:
    """d when the units come every d-th: at least three in one row d apart (u % d the same), and the row's units at
    least three quarters of its places and the units off it together. One stray unit (a loaded machine's hiccup
    that crossed the threshold) or one missed place does not hide the period; units at random have none."""
    if len(late) < 3:
        return None
    d = Counter(b - a for a, b in zip(late, late[1:])).most_common(1)[0][0]
    if d <= 0:
        return None
    phase, n = Counter(u % d for u in late).most_common(1)[0]
    row = [u for u in late if u % d == phase]
    places = (row[-1] - row[0]) // d + 1
    return d if n >= 3 and n >= 0.75 * (places + len(late) - n) else None


def _sites(t: EventTable, rec: WaitRecord, rank: int, unit: int, step_of) -> tuple[str | None, str | None]:
    """(previous op's site, arrival site) of the rank's costliest late arrival in `unit` (a step, or without steps an
    instance): the code between them is what it ran while the others waited."""
    units = _steps_of(rec, step_of) if step_of is not None else rec.view("unit")
    mine = np.flatnonzero((rec.view("culprit") == rank) & (units == unit))
    lengths = rec.view("b")[mine] - rec.view("a")[mine]
    k = int(np.argmax(lengths)) if len(mine) else -1  # (the first of the costliest, in the records' order)
    arrival = int(rec.view("culprit_row")[mine[k]]) if k >= 0 and lengths[k] >= 0 else -1
    if arrival < 0 or t.rank[arrival] != rank or not t.site[arrival]:  # (a trace without call sites: Kineto's)
        return None, None
    # the late rank's op before its arrival (table order is issue order per rank)
    earlier = np.flatnonzero(np.frombuffer(t.rank, np.int32)[:arrival] == rank)
    prev = int(earlier[-1]) if len(earlier) else None
    here = t.site[arrival]
    before = t.site[prev] if prev is not None and t.site[prev] else "its start"
    return before, here
