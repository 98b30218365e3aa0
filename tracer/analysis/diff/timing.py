"""Two runs' times side by side (diff/compare.py uses it), each difference against its noise.

*Noise* is the spread of the steps within each run: a quantity measured once a step (a step's length, a rank's
compute, an op kind's communication, a span) has, in each run, the spread of its values over the steps (the median
absolute deviation, as a standard deviation); a difference of its medians is a *change* only past `NOISE` times the
two runs' spreads (their root mean square), and never below `MIN_NOISE_NS` nor `MIN_NOISE_FRACTION` of A's median (a
quantity that every step measures alike still moves that much between two runs of a shared machine). The longer
run's spread counts at the shorter run's scale (times the ratio of their medians): a change that makes the step
longer makes its jitter larger with it (on a busy machine an added large all_reduce lengthens the step and widens
its spread more than in proportion), and what the change added must not hide the change; a quantity one run does not
have in most steps (an op added) is a change past MIN_NOISE_NS, whatever the other run's spread. One rule,
`noise_ns`, for every quantity the diff compares.

Besides its median, each quantity's mean and p90 are compared, each against its own noise
(`stat_noise_ns`: "the mean's and the p90's noise" below), and the quantity moved when any of the three did
(`shifts`, `moved`): a delay in some steps only moves the mean and the p90.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..waits.peers import spread

NOISE = 3.0                # spreads (their root mean square): a difference of medians is a change only past this
#                            (on a shared machine a job's pace moves between two runs by far more than each
#                            run's steps spread, so a smaller cut calls unchanged pairs slower)
MIN_NOISE_NS = 50_000      # ... and past this (a span of a few µs jitters by its whole length)
MIN_NOISE_FRACTION = 0.02  # ... and past this fraction of A's median


def noise_ns(xa, xb) -> int:
    """What a difference of the medians of xa (A's values, a step each) and xb (B's) must pass to be a change:
    NOISE times the two spreads' root mean square, the longer run's spread scaled to the shorter's median (a run
    made longer and so noisier by the change does not hide it), at least MIN_NOISE_NS and MIN_NOISE_FRACTION of
    A's median."""
    return _median_noise(_Run(xa), _Run(xb))


class _Run:
    """A run's values of a quantity a step, summarised once: sorted, their count, median, mean, p90 (as
    np.percentile's linear rule) and spread."""

    def __init__(self, xs) -> None:
        self.s = s = np.sort(np.asarray(xs, np.float64))
        self.n = n = len(s)
        self.median = float(np.median(s)) if n else 0.0
        self.mean = float(s.mean()) if n else 0.0
        self.p90 = _at(s, 0.9 * (n - 1), n) if n else 0.0
        self.spread = spread(s)

    def value(self, stat: str) -> float:
        return getattr(self, stat)


def _at(s: np.ndarray, pos: float, skip: int) -> float:
    """The value at fractional position pos of sorted s with index `skip` left out (skip >= len(s): none), linear
    between neighbours as np.percentile reads it."""
    i = int(pos)
    f = pos - i
    lo = s[i if i < skip else i + 1]
    if f <= 0:
        return float(lo)
    hi = s[i + 1 if i + 1 < skip else i + 2]
    return float(lo + f * (hi - lo))


def _scaled_spreads(ra: _Run, rb: _Run) -> tuple[float, float]:
    """Each run's spread at the shorter median's scale."""
    sa, sb = ra.spread, rb.spread
    lo = min(ra.median, rb.median)
    if lo >= 0:  # each spread at the shorter median's scale (0: the quantity is not there in most steps of one run,
        #          an op added in the other: the other's spread counts for nothing)
        sa, sb = (r.spread * (lo / r.median if r.median else 1.0) for r in (ra, rb))
    return sa, sb


def _median_noise(ra: _Run, rb: _Run) -> int:
    sa, sb = _scaled_spreads(ra, rb)
    both = ((sa ** 2 + sb ** 2) / 2) ** 0.5
    return int(max(NOISE * both, MIN_NOISE_NS, MIN_NOISE_FRACTION * abs(ra.median)))


# -- the mean's and the p90's noise -------------------------------------------------------------------------
# The mean is what the user pays (a step slow every 5th step costs as much as every step a fifth as slow), but the
# median cannot see a delay that recurs in fewer than half the steps; the mean and the p90 see it. Their noise is
# the sum of three, each a source of difference between two runs of an unchanged job:
# - the pace: the runs' typical steps (their medians) differ as far as the median's own noise lets them (beyond it
#   the median has moved: a change), and a pace moves every step in proportion: the medians' relative difference,
#   up to noise_ns, times the statistic (the smaller run's, so that a tail B added does not widen it);
# - the jitter, averaged: what is left to test, once the medians' difference stands for the pace, is the
#   statistic's excess over the median; NOISE standard errors of its difference between the runs, a normal
#   jitter's (σ the steps' spread, a robust one that a few slow steps do not widen: they are what is tested):
#   EXCESS_ERROR σ·sqrt(1/na + 1/nb) (the mean's excess over the median: √(π/2 − 1) = 0.76; the p90's: 1.75, from
#   the quantiles' asymptotic covariance p(1−r)/(n·f(x_p)·f(x_r)));
# - the few steps that carry it: for the mean, one step: the most that leaving one step out of either run moves it
#   (the jackknife's leave-one-out): a stalled send, a page-fault storm, a neighbour's burst on a shared machine is
#   an event of that run, not a change of the job, and a difference beyond this term survives dropping any single
#   step: more than one step carries it. For the p90, a tenth of the steps (at least one): the p90 is read off
#   the slowest tenth, so a tail of a few steps a few ms slower in one run moves it as far as a change would; the
#   most that leaving out a tenth of either run's steps moves it is its order statistics' spacing there (the
#   Siddiqui-Bloch-Gastwirth estimate of a quantile's error: a sparse tail, wide; a tail many steps share, narrow).
#   Leaving out one step covered a stall, not such a tail: two runs of an unchanged 12 ms step were called changed,
#   and "B slower", by their p90s alone (docs/ANALYSIS.md, "The diff's noise").
# A recurring delay (a fifth of the steps slow) moves the mean by a fifth of its size and the p90 to its height,
# each slow step carrying a small part of the mean's move; a stall in one step carries all of its
# move alone, and the one-step term is that move. At least MIN_NOISE_NS and MIN_NOISE_FRACTION of A's statistic.

EXCESS_ERROR = {"mean": 0.76, "p90": 1.75}  # the standard error of the statistic less the median, in σ/√n


def left_out_ns(xs, stat: str) -> float:
    """The most that leaving out the steps that carry it moves xs' "mean" (one value) or "p90" (a tenth of the
    values, at least one); 0 below 3 values."""
    return _left_out(_Run(xs), stat)


def left_out_count(n: int, stat: str) -> int:
    """How many of n values `left_out_ns` leaves out: one for the mean, a tenth (rounded up) for the p90."""
    return 1 if stat == "mean" else -(-n // 10)


def _left_out(r: _Run, stat: str) -> float:
    n, s = r.n, r.s
    if n < 3:
        return 0.0
    if stat == "mean":  # (leaving x out moves the mean by (mean - x) / (n - 1): most for the lowest or the highest)
        return max(s[-1] - r.mean, r.mean - s[0]) / (n - 1)
    # the p90 of what is left is highest with the k lowest values left out and lowest with the k highest (each
    # position it reads holds a value at least as high, or at most as high, as with any other k left out)
    k = min(left_out_count(n, stat), n - 2)
    m = n - k
    return max(abs(_at(s[k:], 0.9 * (m - 1), m) - r.p90), abs(_at(s[:m], 0.9 * (m - 1), m) - r.p90))


STATS = ("median", "mean", "p90")  # the statistics of a quantity a step the diff compares


def stat_noise_ns(stat: str, xa, xb) -> int:
    """What a difference of `stat` ("median", "mean", "p90") of xa (A's values, a step each) and xb (B's) must
    pass to be a change: for the median noise_ns; for the mean and the p90 the pace, the jitter averaged and the
    few steps that carry it (this module's "the mean's and the p90's noise")."""
    return _stat_noise(stat, _Run(xa), _Run(xb))


def _stat_noise(stat: str, ra: _Run, rb: _Run, median_noise: int | None = None) -> int:
    median_noise = _median_noise(ra, rb) if median_noise is None else median_noise
    if stat == "median":
        return median_noise
    if not (ra.n and rb.n):
        return MIN_NOISE_NS
    sa, sb = _scaled_spreads(ra, rb)
    va, vb = ra.value(stat), rb.value(stat)
    lo = min(ra.median, rb.median)
    pace = min(abs(rb.median - ra.median), median_noise) * (min(va, vb) / lo if lo > 0 else 1.0)
    jitter = NOISE * EXCESS_ERROR[stat] * (sa ** 2 / ra.n + sb ** 2 / rb.n) ** 0.5
    few = max(_left_out(ra, stat), _left_out(rb, stat))
    return int(max(pace + jitter + few, MIN_NOISE_NS, MIN_NOISE_FRACTION * abs(va)))


@dataclass(frozen=True)
class Shift:
    """One statistic of a quantity a step in both runs: A's and B's values, B's less A's, and its noise."""

    stat: str
    a_ns: int
    b_ns: int
    noise_ns: int

    @property
    def delta_ns(self) -> int:
        return self.b_ns - self.a_ns

    @property
    def moved(self) -> bool:
        return abs(self.delta_ns) > self.noise_ns


def shifts(xa, xb) -> dict[str, Shift]:
    """The quantity's median, mean and p90 in each run (values a step; both non-empty), each against its noise."""
    ra, rb = _Run(xa), _Run(xb)
    m = _median_noise(ra, rb)
    out = {}
    for stat in STATS:
        a, b = (int(round(r.mean)) if stat == "mean" else int(r.value(stat)) for r in (ra, rb))  # (as StepStats)
        out[stat] = Shift(stat, a, b, _stat_noise(stat, ra, rb, m))
    return out


def moved(xa, xb) -> list[Shift]:
    """The statistics (median, mean, p90) of a quantity a step that moved beyond their noise."""
    return [s for s in shifts(xa, xb).values() if s.moved]


def leading(xa, xb) -> Shift | None:
    """The statistic of a quantity a step that moved beyond its noise, the mean first (what the user pays), then
    the median, then the p90; None where none did."""
    got = {s.stat: s for s in moved(xa, xb)}
    return next((got[k] for k in ("mean", "median", "p90") if k in got), None)


def median_ns(xs) -> int:
    return int(np.median(xs)) if len(xs) else 0


@dataclass
class StepStats:
    """A run's steady steps: how many, and their length's median, 90th percentile, mean and spread."""

    step_count: int
    median_ns: int
    p90_ns: int
    mean_ns: int
    spread_ns: int

    @classmethod
    def of(cls, lengths: list[int]) -> "StepStats":
        if not lengths:
            return cls(0, 0, 0, 0, 0)
        x = np.asarray(lengths, np.float64)
        return cls(len(x), int(np.median(x)), int(np.percentile(x, 90)), int(round(float(x.mean()))),
                   int(spread(x)))


@dataclass
class TimingRow:
    """One quantity measured a step in both runs: `what` is "op" (an op kind's communication a step, the mean over
    its ranks), "group" (the same, per group), "compute" or "wait" (a rank's), or "span" (a rank's compute span);
    `a_ns`, `b_ns` its medians a step (None: the run has none), `delta_ns` B's less A's, `noise_ns` what the delta
    must pass; `shifts` its median, mean and p90 each against its noise (empty where a run has none), `changed`
    whether any of them moved beyond it (a span slow in one step of five moves its mean and p90, not its median)."""

    what: str
    name: str
    rank: int | None
    a_ns: int | None
    b_ns: int | None
    delta_ns: int
    noise_ns: int
    changed: bool
    shifts: dict[str, Shift] = field(default_factory=dict)

    @property
    def shown(self) -> Shift | None:
        """The statistic to show: the median where it moved, else the mean, else the p90 (None: none moved)."""
        return next((self.shifts[k] for k in ("median", "mean", "p90") if k in self.shifts and self.shifts[k].moved),
                    None)


def row_of(what: str, name: str, rank: int | None, xa, xb) -> TimingRow:
    """A TimingRow from the values a step of each run (empty: the run has none)."""
    a, b = (median_ns(x) if len(x) else None for x in (xa, xb))
    if a is None or b is None:
        return TimingRow(what, name, rank, a, b, (b or 0) - (a or 0), 0, False)
    got = shifts(xa, xb)
    m = got["median"]
    return TimingRow(what, name, rank, a, b, b - a, m.noise_ns, any(x.moved for x in got.values()), got)


def per_step_sums(keys: list, steps: np.ndarray, values: np.ndarray, ks: list[int], scale=None) -> dict:
    """key -> its values summed per step of ks (a list in ks' order, 0 where it has none), each divided by
    scale(key) when given."""
    index = {k: i for i, k in enumerate(ks)}
    out: dict = defaultdict(lambda: np.zeros(len(ks)))
    for key, k, v in zip(keys, steps.tolist(), values.tolist()):
        if k in index:
            out[key][index[k]] += v
    if scale is not None:
        for key in out:
            out[key] /= scale(key)
    return dict(out)


def per_step_unions(keys: list, steps: np.ndarray, starts: np.ndarray, ends: np.ndarray, ks: list[int]) -> dict:
    """key -> the length of the union of its intervals [start, end) per step of ks (a list in ks' order): the time
    a rank's ops of one kind communicated in a step, each instant once (DDP's buckets queue behind each other: their
    times from their own arrivals overlap)."""
    index = {k: i for i, k in enumerate(ks)}
    spans: dict = defaultdict(list)
    for key, k, a, b in zip(keys, steps.tolist(), starts.tolist(), ends.tolist()):
        if k in index and b > a:
            spans[(key, k)].append((a, b))
    out: dict = defaultdict(lambda: np.zeros(len(ks)))
    for (key, k), iv in spans.items():
        iv.sort()
        total, (lo, hi) = 0, iv[0]
        for a, b in iv[1:]:
            if a > hi:
                total += hi - lo
                lo, hi = a, b
            else:
                hi = max(hi, b)
        out[key][index[k]] = total + hi - lo
    return dict(out)


__all__ = ["NOISE", "EXCESS_ERROR", "STATS", "Shift", "shifts", "moved", "leading", "stat_noise_ns", "left_out_ns", "per_step_unions", "MIN_NOISE_NS", "MIN_NOISE_FRACTION", "StepStats", "TimingRow", "noise_ns",
           "spread", "row_of", "per_step_sums", "median_ns"]
