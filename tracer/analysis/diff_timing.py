"""Two runs' times side by side (issue 42; diff.py uses it), each difference against its noise.

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
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .peers import spread

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
    med_a = float(np.median(xa)) if len(xa) else 0.0
    med_b = float(np.median(xb)) if len(xb) else 0.0
    sa, sb = spread(xa), spread(xb)
    lo = min(med_a, med_b)
    if lo >= 0:  # each spread at the shorter median's scale (0: the quantity is not there in most steps of one run,
        #          an op added in the other: the other's spread counts for nothing)
        sa, sb = (s * (lo / m if m else 1.0) for s, m in ((sa, med_a), (sb, med_b)))
    both = ((sa ** 2 + sb ** 2) / 2) ** 0.5
    return int(max(NOISE * both, MIN_NOISE_NS, MIN_NOISE_FRACTION * abs(med_a)))


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
    must pass, `changed` whether it does."""

    what: str
    name: str
    rank: int | None
    a_ns: int | None
    b_ns: int | None
    delta_ns: int
    noise_ns: int
    changed: bool


def row_of(what: str, name: str, rank: int | None, xa, xb) -> TimingRow:
    """A TimingRow from the values a step of each run (empty: the run has none)."""
    a, b = (median_ns(x) if len(x) else None for x in (xa, xb))
    if a is None or b is None:
        return TimingRow(what, name, rank, a, b, (b or 0) - (a or 0), 0, False)
    n = noise_ns(xa, xb)
    return TimingRow(what, name, rank, a, b, b - a, n, abs(b - a) > n)


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


__all__ = ["NOISE", "per_step_unions", "MIN_NOISE_NS", "MIN_NOISE_FRACTION", "StepStats", "TimingRow", "noise_ns",
           "spread", "row_of", "per_step_sums", "median_ns"]
