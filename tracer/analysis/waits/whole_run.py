"""The whole run over the black box's aggregates (data/importers/aggregates.py): time per window and rank in
collectives, time and bytes per op kind, the windows aligned across ranks, and a straggler that began at some step.

The rings hold a rank's last ops only; the aggregates hold every window of the run, per (group, op, size bucket):
count, total and max duration, bytes. A window is aligned across ranks by its steps where the job marks them (its
first marker n ends step n - 1: the window holds steps first - 1 .. last - 1), else by time: each rank's windows
are mapped to the reference rank's (the one with the most windows) by their midpoints on rank 0's clock, as the
ops are aligned. Per aligned window and rank, the time in collectives is taken per unit: per step with markers,
per second of the window without.

The straggler (docs/ANALYSIS.md, "The whole run's straggler"): a rank slower than its peers makes them wait for it
inside every collective, so that it spends the least time in collectives of them all. In each aligned window, each
rank's *gap* is its peers' median time in collectives per unit minus its own. A rank is named when, from an onset
window on to the end of the run, it has the largest gap and a gap past the threshold in at least PERSISTENT of the
windows, the onset window and the MIN_WINDOWS - 1 after it included. The threshold is the largest of NOISE times
the ranks' jitter (the spread of the window-to-window changes of each rank's gap, over √2, the median rank's: the
swings all ranks share, a time window that holds one step more, cancel in the gap; each rank's first window, the
run's warm-up, where gloo connects its pairs, left out), FLOOR of the unit's time (the
median step, or the second) and MIN_NS. Its excess (ms a step) is the median gap over the windows
past the onset one; the onset step inside the onset window (or the window before it, where the rank led by more
than twice the jitter already) is where that window's gap, as a share of the excess, says the excess began.
Windows whose ring overran (lost ops: their counts are lower bounds) are left out of the rule.

Constants, and why:
- NOISE = 5: a balanced run's largest gap of a window is 1-3 jitters (the max over the ranks of the differences of
  near-normal values), 5 is past it; on the real 2-rank job of tests/jobs/bb_straggler.py (a busy 2-core machine)
  the threshold came to 12-21 ms beside its 40 ms straggler.
- FLOOR = 0.05: a rank 5% of a step ahead of its peers in every window is steady straggling, below that a constant
  small difference (a logging rank 0) is not worth naming.
- PERSISTENT = 0.8 and MIN_WINDOWS = 2: from its onset on, the straggler leads nearly every window (a window of
  jitter may hide one), and one window alone is no persistence: its onset starts two windows it led in a row (the
  first window of a real job, where gloo connects its pairs, passed alone, with a window that did not after it).
- MIN_NS = 50 µs: a floor for traces without jitter (synthetic, or windows of identical sums).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...data.table.event_table import P2P_OPS
from ...format import AGG_DAY_BUDGET, AGG_HEADROOM, AGG_ROW_BYTES
from .peers import others_median, spread

if TYPE_CHECKING:
    from ...data.importers.aggregates import Aggregates

NOISE = 5.0
FLOOR = 0.05
PERSISTENT = 0.8
MIN_WINDOWS = 2
MIN_NS = 50_000
SECOND = 1_000_000_000
DAY_S = 86_400
# The most aligned windows `report --json` writes: a run of weeks has hundreds of thousands (a window every 10 steps
# of a second), each a row per rank; beyond this they are merged, consecutive ones together (coarsened)
JSON_WINDOWS = 2000
PACE_MIN_WINDOWS = 10    # windows a run needs before its pace is extrapolated to a day


@dataclass
class RankWindows:
    """One rank's windows, as columns in window order: aligned start and end ns, first and last step marker's
    numbers (-1: none), ops ended, lost (the ring overran: lower bounds), time in collectives (ns, summed over
    their ops), and `aligned`: the index of the aligned window it is in (-1: none)."""
    start_ns: list[int]
    end_ns: list[int]
    first_step: list[int]
    last_step: list[int]
    ops: list[int]
    lost: list[bool]
    collective_ns: list[int]
    aligned: list[int]


@dataclass
class OpTotal:
    """An op kind (or one key: group, op, size bucket [lo, hi) bytes) over the whole run and every rank."""
    op: str
    count: int
    total_ns: int
    max_ns: int
    bytes: int
    group: str = ""
    lo: int = 0
    hi: int = 0


@dataclass
class RunStraggler:
    """The rank its peers waited for from `onset_step` (time windows: `onset_ns`) on, `extra_ns` a unit (a step,
    or a second without step markers) beyond its own time in collectives."""
    rank: int
    onset_step: int | None
    onset_ns: int
    onset_window: int                # the aligned window it began in
    extra_ns: int
    unit: str                        # "step" or "second"
    windows: int                     # aligned windows from the onset on, and of those it led past the threshold
    led: int
    threshold_ns: int
    peers: list[int]


@dataclass
class WholeRun:
    """The whole run over the aggregates. `aligned_*`: the aligned windows (first step, or start ns without steps;
    steps in it; per rank, its time in collectives per unit, None where it has no window there or lost ops)."""
    by: str                          # "steps" (aligned by steps) or "seconds"
    every: float
    unit: str                        # "step" or "second"
    ranks: list[int]
    windows: dict[int, RankWindows]
    aligned_first_step: list[int]
    aligned_start_ns: list[int]
    aligned_steps: list[int]
    per_unit_ns: dict[int, list[int | None]]
    ops: list[OpTotal]
    keys: list[OpTotal]
    straggler: RunStraggler | None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def whole_run(agg: "Aggregates") -> WholeRun:
    """The whole run's analysis of the aggregates of one run (docs/ANALYSIS.md, "The whole run's straggler")."""
    collective = np.array([k.op not in P2P_OPS and len(k.group_ranks) != 1 for k in agg.keys], bool)
    coll_ns = np.bincount(agg.cell_window, weights=agg.cell_total * collective[agg.cell_key],
                          minlength=len(agg.w_rank)).astype(np.int64) if len(agg.keys) else \
        np.zeros(len(agg.w_rank), np.int64)
    marked = bool(len(agg.w_rank)) and bool((agg.w_last_step >= 0).any()) and agg.window_by != "seconds"
    if marked:
        at, firsts, starts, units = _by_steps(agg)
    else:
        at, firsts, starts, units = _by_time(agg)
    per_unit = _per_unit(agg, coll_ns, at, len(units), marked)
    windows = {r: _rank_windows(agg, coll_ns, at, r) for r in agg.ranks}
    unit = "step" if marked else "second"
    step_ns = _unit_ns(agg, marked)
    peers = _peer_sets(agg, collective)
    found = [s for ranks in peers if (s := straggler(per_unit[[agg.ranks.index(r) for r in ranks]], ranks, units,
                                                     firsts, starts, unit, step_ns))]
    notes = []
    if agg.w_lost.any():
        notes.append(f"{int(agg.w_lost.sum())} window(s) lost ops (the ring overran between two reads of the "
                     "aggregator): their counts are lower bounds, and the straggler rule leaves them out")
    notes += [n for n in (_widened_note(windows, agg.window_every, marked), _pace_note(agg)) if n]
    return WholeRun(
        by="steps" if marked else "seconds", every=agg.window_every, unit=unit, ranks=list(agg.ranks),
        windows=windows, aligned_first_step=firsts.tolist(), aligned_start_ns=starts.tolist(),
        aligned_steps=units.astype(np.int64).tolist() if marked else [0] * len(units),
        per_unit_ns={r: [None if v != v else int(v) for v in per_unit[i].tolist()] for i, r in enumerate(agg.ranks)},
        ops=_op_totals(agg, by_key=False), keys=_op_totals(agg, by_key=True),
        straggler=max(found, key=lambda s: (s.windows, s.extra_ns)) if found else None,
        warnings=list(agg.damage), notes=notes)


def widened(windows: dict[int, RankWindows], every: float) -> dict[int, int]:
    """The ranks whose windows of steps the recorder widened (record/aggregates.py: a job of short steps), each with
    its widest window's steps: a window before the rank's last holds more steps than the meta's `every`."""
    out = {}
    for r, w in windows.items():
        most = max((b - a + 1 for a, b in zip(w.first_step[:-1], w.last_step[:-1]) if a >= 0), default=0)
        if every > 0 and most > every:
            out[r] = most
    return out


def _widened_note(windows: dict[int, RankWindows], every: float, marked: bool) -> str | None:
    wide = widened(windows, every) if marked else {}
    if not wide:
        return None
    who = f"rank {min(wide)}" if len(wide) == 1 else f"{len(wide)} ranks"
    return (f"the black box widened the windows of {who} from {every:g} steps to up to {max(wide.values())}, to keep "
            f"its aggregates within {AGG_DAY_BUDGET / 1e6:.0f} MB a rank a day at this run's pace; windows are aligned "
            "where every rank ended one")


def _pace_note(agg: "Aggregates") -> str | None:
    """What the aggregates would take in a day at this run's pace, where that passes AGG_DAY_BUDGET (the rank that
    writes most: its rows, a window's and one a key, over its windows' span), with the --window that keeps them
    under it. Windows of seconds only: the recorder widens windows of steps itself (record/aggregates.py)."""
    if len(agg.w_rank) < PACE_MIN_WINDOWS or agg.window_by != "seconds":
        return None
    cells = np.bincount(agg.w_rank[agg.cell_window], minlength=max(agg.ranks) + 1) if len(agg.cell_window) else \
        np.zeros(max(agg.ranks) + 1, np.int64)
    worst = 0.0
    for r in agg.ranks:
        mine = agg.w_rank == r
        span = (int(agg.w_end[mine].max()) - int(agg.w_start[mine].min())) / SECOND
        if span > 0:
            worst = max(worst, (int(mine.sum()) + int(cells[r])) * AGG_ROW_BYTES / span * DAY_S)
    if worst <= AGG_DAY_BUDGET:
        return None
    every = agg.window_every or 10
    wider = every * worst / (AGG_HEADROOM * AGG_DAY_BUDGET)
    return (f"the aggregates grow by {worst / 1e6:,.0f} MB a rank a day at this run's pace (windows of {every:g} "
            f"seconds; {AGG_DAY_BUDGET / 1e6:.0f} MB is the budget): `disttrace run --black-box --window "
            f"{int(np.ceil(wider))}s` keeps them under it")


def _by_steps(agg: "Aggregates"):
    """Each window row's aligned window, and per aligned window its first step (first marker - 1), its start (the
    earliest rank's) and its steps (the most any rank's rows of it hold). An aligned window ends at a *common*
    boundary: a window's last marker that every rank whose markers span it ended a window at too. Windows widen on
    one rank and not another (record/aggregates.py: a job of short steps), a wider window being whole windows of a
    narrower one: those merge into it. Where every rank's windows end alike, each window is its own aligned one."""
    has = agg.w_first_step >= 0
    last = agg.w_last_step
    ends = np.unique(last[has])
    common = np.ones(len(ends), bool)
    for r in agg.ranks:
        mine = has & (agg.w_rank == r)
        if mine.any():
            spanned = (ends >= int(agg.w_first_step[mine].min())) & (ends <= int(last[mine].max()))
            common &= ~spanned | np.isin(ends, last[mine])
    common_ends = ends[common]
    at = np.where(has, np.searchsorted(common_ends, last), -1)  # (past the last common end: one more, the run's end)
    n = int(at.max()) + 1 if has.any() else 0
    firsts = np.full(n, np.iinfo(np.int64).max, np.int64)
    starts = np.full(n, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(firsts, at[has], agg.w_first_step[has] - 1)
    np.minimum.at(starts, at[has], agg.w_start[has])
    units = np.zeros(n, np.float64)
    if n:  # the most steps any one rank's rows of the aligned window hold
        rank_at = np.searchsorted(np.array(agg.ranks), agg.w_rank[has])
        held = np.zeros((len(agg.ranks), n), np.float64)
        np.add.at(held, (rank_at, at[has]), _row_steps(agg)[has])
        units = held.max(axis=0)
    return at, firsts, starts, units


def _by_time(agg: "Aggregates"):
    """Each window row's aligned window: the reference rank's (the most windows; the lowest such rank) window
    that holds its midpoint on rank 0's clock; per aligned window: no step (-1), its start, its seconds."""
    if not len(agg.w_rank):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    counts = {r: int((agg.w_rank == r).sum()) for r in agg.ranks}
    ref = max(agg.ranks, key=lambda r: (counts[r], -r))
    mine = agg.w_rank == ref
    starts, ends = agg.w_start[mine], agg.w_end[mine]
    mid = (agg.w_start + agg.w_end) // 2
    at = np.searchsorted(starts, mid, side="right") - 1
    inside = (at >= 0) & (mid < ends[np.clip(at, 0, len(ends) - 1)])
    at = np.where(inside, at, -1)
    return at, np.full(len(starts), -1, np.int64), starts, (ends - starts) / SECOND


def _row_steps(agg: "Aggregates") -> np.ndarray:
    """Per window row, the steps it holds whole: its markers' (0 without)."""
    return np.where(agg.w_first_step >= 0, agg.w_last_step - agg.w_first_step + 1, 0)


def _per_unit(agg: "Aggregates", coll_ns: np.ndarray, at: np.ndarray, aligned: int, marked: bool) -> np.ndarray:
    """[rank, aligned window]: the rank's time in collectives per unit of its own rows there, summed (NaN: no row,
    no unit, or a row that lost ops)."""
    row_units = _row_steps(agg).astype(np.float64) if marked else (agg.w_end - agg.w_start) / SECOND
    rank_at = np.searchsorted(np.array(agg.ranks), agg.w_rank)
    ok = at >= 0
    time, units, lost = (np.zeros((len(agg.ranks), aligned), t) for t in (np.float64, np.float64, bool))
    np.add.at(time, (rank_at[ok], at[ok]), coll_ns[ok])
    np.add.at(units, (rank_at[ok], at[ok]), row_units[ok])
    lost[rank_at[ok & agg.w_lost], at[ok & agg.w_lost]] = True
    out = np.full((len(agg.ranks), aligned), np.nan)
    good = (units > 0) & ~lost
    out[good] = time[good] / units[good]
    return out


def _unit_ns(agg: "Aggregates", marked: bool) -> float:
    """The unit's typical time: the median window's time a step (with steps), else a second."""
    if not marked:
        return float(SECOND)
    steps = _row_steps(agg)
    ok = steps > 0
    return float(np.median((agg.w_end[ok] - agg.w_start[ok]) / steps[ok])) if ok.any() else 0.0


def _peer_sets(agg: "Aggregates", collective: np.ndarray) -> list[list[int]]:
    """The ranks' peer sets: ranks of one role do the same collectives (op and group size; docs/ANALYSIS.md,
    "Peers"); the aggregates know no pipeline stage, so a role is its set of collective kinds."""
    kinds: dict[int, set] = {r: set() for r in agg.ranks}
    n = len(agg.keys) + 1
    pairs = np.unique(agg.w_rank[agg.cell_window] * n + agg.cell_key)  # (rank, key) once each
    for r, k in zip((pairs // n).tolist(), (pairs % n).tolist()):
        if collective[k]:
            kinds[r].add((agg.keys[k].op, len(agg.keys[k].group_ranks)))
    sets: dict[frozenset, list[int]] = {}
    for r in agg.ranks:
        if kinds[r]:
            sets.setdefault(frozenset(kinds[r]), []).append(r)
    return [ranks for ranks in sets.values() if len(ranks) >= 2]


def straggler(c: np.ndarray, rank_of: list[int], units: np.ndarray, firsts: np.ndarray, starts: np.ndarray,
              unit: str, unit_ns: float) -> RunStraggler | None:
    """The persistent straggler among peers (c: [peer, aligned window], their time in collectives per unit;
    rank_of: their ranks) from its onset window on, or None (the module's rule)."""
    if c.shape[0] < 2 or c.shape[1] < MIN_WINDOWS:
        return None
    gap = _gaps(c)
    jitter = float(np.median([spread(np.diff(row[~np.isnan(row)][1:])) / np.sqrt(2) for row in gap]))
    threshold = max(NOISE * jitter, FLOOR * unit_ns, MIN_NS)
    valid = ~np.isnan(gap).all(axis=0)
    leader = np.where(valid, np.argmax(np.where(np.isnan(gap), -np.inf, gap), axis=0), -1)
    best = None
    for i in range(c.shape[0]):
        passed = (leader == i) & (np.nan_to_num(gap[i], nan=-np.inf) > threshold)
        onset = _onset(passed, valid)
        if onset is None:
            continue
        later = np.flatnonzero(passed[onset + 1:]) + onset + 1
        extra = float(np.median(gap[i, later if len(later) else [onset]]))
        windows, led = int(valid[onset:].sum()), int(passed[onset:].sum())
        cand = (windows, extra, i, onset, led)
        if best is None or cand[:2] > best[:2]:
            best = cand
    if best is None:
        return None
    windows, extra, i, onset, led = best
    onset, share = _began(gap[i], leader == i, valid, onset, extra, jitter)
    step = None
    if unit == "step":
        n = int(units[onset])
        step = int(firsts[onset]) + n - int(round(share * n))
    onset_ns = int(starts[onset] + (1 - share) * units[onset] * (unit_ns if unit == "step" else SECOND))
    return RunStraggler(rank=rank_of[i], onset_step=step, onset_ns=onset_ns, onset_window=int(onset),
                        extra_ns=int(round(extra)), unit=unit, windows=windows, led=led,
                        threshold_ns=int(round(threshold)), peers=[r for r in rank_of if r != rank_of[i]])


def _began(gap: np.ndarray, led: np.ndarray, valid: np.ndarray, onset: int, extra: float,
           jitter: float) -> tuple[int, float]:
    """The window the delay began in and the share of it that the delay held: the onset window, or the valid window
    before it where the rank led by more than twice the jitter already (a delay that began late in that window: its
    share of the excess was under the threshold)."""
    before = np.flatnonzero(valid[:onset])
    k = onset
    if len(before) and led[before[-1]] and gap[before[-1]] > 2 * jitter:
        k = int(before[-1])
    return k, float(np.clip(gap[k] / extra, 0, 1)) if extra > 0 else 1.0


def _gaps(c: np.ndarray) -> np.ndarray:
    """[rank, window]: the median of the other ranks' values minus the rank's own (NaN where either is missing)."""
    out = np.full(c.shape, np.nan)
    have = ~np.isnan(c)
    ranks, windows = np.nonzero(have)
    values = np.rint(c[have]).astype(np.int64)
    out[ranks, windows] = others_median(windows.astype(np.int64), values) - values
    return out


def _onset(passed: np.ndarray, valid: np.ndarray) -> int | None:
    """The first window that starts MIN_WINDOWS valid windows passed in a row and from which on the rank passes in
    PERSISTENT of the valid windows; None: no such window. (In a row: a warm-up window, gloo connecting its pairs
    on the first ops, passes alone.)"""
    at = np.flatnonzero(valid)
    p = passed[at]
    led = np.cumsum(p[::-1])[::-1]           # windows passed from k on
    seen = np.arange(len(p), 0, -1)          # valid windows from k on
    in_row = p.copy()
    for j in range(1, MIN_WINDOWS):
        in_row[:len(p) - j] &= p[j:]
        in_row[len(p) - j:] = False
    k = np.flatnonzero(in_row & (led >= PERSISTENT * seen))
    return int(at[k[0]]) if len(k) else None


def _rank_windows(agg: "Aggregates", coll_ns: np.ndarray, at: np.ndarray, rank: int) -> RankWindows:
    mine = np.flatnonzero(agg.w_rank == rank)
    return RankWindows(agg.w_start[mine].tolist(), agg.w_end[mine].tolist(), agg.w_first_step[mine].tolist(),
                       agg.w_last_step[mine].tolist(), agg.w_ops[mine].tolist(), agg.w_lost[mine].tolist(),
                       coll_ns[mine].tolist(), at[mine].tolist())


def _op_totals(agg: "Aggregates", by_key: bool) -> list[OpTotal]:
    """Per op kind (by_key: per key: group, op, size bucket), over every rank and window, the most time first."""
    names = [(k.group, k.op, k.lo, k.hi) if by_key else ("", k.op, 0, 0) for k in agg.keys]
    code = {n: i for i, n in enumerate(dict.fromkeys(names))}
    of_key = np.array([code[n] for n in names], np.int64)
    group = of_key[agg.cell_key] if len(agg.cell_key) else np.zeros(0, np.int64)
    m = len(code)
    count, total, nbytes = (np.bincount(group, weights=w, minlength=m).astype(np.int64)
                            for w in (agg.cell_count, agg.cell_total, agg.cell_bytes))
    most = np.zeros(m, np.int64)
    np.maximum.at(most, group, agg.cell_max)
    out = [OpTotal(op, int(count[i]), int(total[i]), int(most[i]), int(nbytes[i]), g, lo, hi)
           for (g, op, lo, hi), i in code.items()]
    return sorted(out, key=lambda o: -o.total_ns)


def coarsened(run: WholeRun, most: int | None = None) -> WholeRun:
    """`run` with its aligned windows merged k at a time (k the least that leaves at most `most`), as `report
    --json` writes a long run, and a note that says so; `run` itself where it has no more. Each rank's window rows
    are merged by their merged aligned window (rows outside any: k consecutive ones together): the first start and
    step, the last end and step, ops and time summed, lost if any was; the time a unit, over the units that had one
    (None where none had); the straggler's onset window merged too. The straggler was found at full resolution.
    `most`: JSON_WINDOWS unless given."""
    most = JSON_WINDOWS if most is None else most
    n = len(run.aligned_start_ns)
    if n <= most:
        return run
    k = -(-n // most)
    units = np.asarray(run.aligned_steps, np.float64) if run.by == "steps" else np.ones(n)
    idx = np.arange(n) // k
    m = int(idx[-1]) + 1
    steps = np.bincount(idx, weights=units, minlength=m)
    per_unit = {}
    for r, values in run.per_unit_ns.items():
        v = np.array([np.nan if x is None else x for x in values], np.float64)
        have = ~np.isnan(v)
        w = np.where(have, units, 0.0)
        total = np.bincount(idx, weights=np.where(have, v, 0.0) * w, minlength=m)
        weight = np.bincount(idx, weights=w, minlength=m)
        per_unit[r] = [int(round(t / c)) if c > 0 else None for t, c in zip(total.tolist(), weight.tolist())]
    firsts = np.asarray(run.aligned_first_step, np.int64)[::k]
    starts = np.asarray(run.aligned_start_ns, np.int64)[::k]
    straggler = run.straggler
    if straggler is not None:
        straggler = RunStraggler(**{**straggler.__dict__, "onset_window": straggler.onset_window // k})
    note = (f"report --json: the run's {n:,} aligned windows merged {k} at a time, {m:,} left (at most "
            f"{most:,}); the straggler was found over all of them")
    return WholeRun(run.by, run.every, run.unit, run.ranks, {r: _merged(w, k) for r, w in run.windows.items()},
                    firsts.tolist(), starts.tolist(), steps.astype(np.int64).tolist() if run.by == "steps" else
                    [0] * m, per_unit, run.ops, run.keys, straggler, run.warnings, run.notes + [note])


def _merged(w: RankWindows, k: int) -> RankWindows:
    """One rank's window rows merged by their aligned window // k (rows outside any: k consecutive ones)."""
    at = np.asarray(w.aligned, np.int64)
    if not len(at):
        return w
    rows = np.arange(len(at))
    group = np.where(at >= 0, at // k, -1 - rows // k)  # (outside: keys of their own, below every aligned one)
    order = np.lexsort((rows, group))
    key = group[order]
    cut = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    last = np.r_[cut[1:], len(order)] - 1

    def col(values, dtype=np.int64):
        return np.asarray(values, dtype)[order]

    def first_set(values):  # the first (last) step marker's number among each group's rows: -1 where none
        v = col(values)
        ok = np.where(v >= 0, np.arange(len(v)), len(v))
        at_first = np.minimum.reduceat(ok, cut)
        return np.where(at_first < len(v), v[np.minimum(at_first, len(v) - 1)], -1)

    def last_set(values):
        v = col(values)
        ok = np.where(v >= 0, np.arange(len(v)), -1)
        at_last = np.maximum.reduceat(ok, cut)
        return np.where(at_last >= 0, v[np.maximum(at_last, 0)], -1)

    merged = RankWindows(
        col(w.start_ns)[cut].tolist(), col(w.end_ns)[last].tolist(), first_set(w.first_step).tolist(),
        last_set(w.last_step).tolist(), np.add.reduceat(col(w.ops), cut).tolist(),
        np.logical_or.reduceat(col(w.lost, bool), cut).tolist(), np.add.reduceat(col(w.collective_ns), cut).tolist(),
        np.where(key[cut] >= 0, key[cut], -1).tolist())
    # back in the rows' order: by their first row
    back = np.argsort(order[cut], kind="stable")
    return RankWindows(*([getattr(merged, f)[i] for i in back.tolist()] for f in (
        "start_ns", "end_ns", "first_step", "last_step", "ops", "lost", "collective_ns", "aligned")))
