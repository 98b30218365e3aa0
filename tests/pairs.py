"""A faulty run and its on-time run, for checking predictions against measurements (test_critical_path.py,
test_attribution_truth.py): a prediction's ground truth is the job run without its fault, made at another moment
than the faulty one, and on a shared 2-core machine the pace of a job's host work moves between runs (the DDP job's
20 ms-of-sleep steps read 29-37 ms, and CI once saw its faulty run's on-time steps 15% slower than the on-time
run's). So the two runs' pace is compared on what the fault leaves alone (the steps it does not touch, or the ranks
it does not touch), and where no pair is within PACE_TOLERANCE a run more is made, of the on-time job and of the
faulty one by turns, each paired with every run of the other kind so far (closest_pair: PACE_TRIES rounds, 4 runs
and 4 pairs at most; a pair of new runs a round cost 6 runs for 3 pairs); the pair closest in pace is kept. What is left of the drift, where the fault leaves whole steps alone, is taken out of the
measurement (`measured_without_fault`: the on-time run's steps at the faulty run's pace). The pace check and the
correction read only measured times, never a prediction: a wrong prediction fails whichever pair is kept."""

from __future__ import annotations

from statistics import mean, median

import numpy as np

from disttrace.tracer.analysis import analyze
from disttrace.tracer.analysis.causal.critical_path import _hosts
from disttrace.tracer.analysis.core.matching import finished
from disttrace.tracer.data.load import load_trace

PACE_TRIES, PACE_TOLERANCE = 3, 0.06


def analysed_pair(traced, script: str, nproc: int, late_steps=None, changes=(), fault=(), clean=("--no-fault",),
                  bystanders=None):
    """(the faulty run analysed with `changes`, the on-time run analysed), both traced: `script` with the `fault`
    arguments and with the `clean` ones. Their pace is compared on the steps other than `late_steps`, or on the
    compute of the `bystanders` (ranks the fault leaves alone) in every steady step; with neither, not compared."""
    def runs(args, **kw):
        def run(k: int):
            again = [f"--pair={k}"] if k else []  # a new cache key for traced(); the jobs ignore it
            return analyze(load_trace(str(traced(script, nproc=nproc, args=[*args, *again], summaries="off"))), **kw)
        return run

    faulty, on_time = runs(list(fault), changes=changes), runs(list(clean))
    if late_steps is None and bystanders is None:
        return faulty(0), on_time(0)

    def gap(a, b) -> float:
        if late_steps is not None:
            return abs(step_pace(a, late_steps) / step_pace(b, late_steps) - 1)
        # (rank by rank: a busy machine may slow one process of the four, the one on the critical path)
        pa, pb = compute_pace(a, bystanders), compute_pace(b, bystanders)
        return max(abs(pa[r] / pb[r] - 1) for r in bystanders)

    return closest_pair(faulty, on_time, gap, f"{script} {' '.join(fault)}")


def closest_pair(make_a, make_b, gap, what: str):
    """(a, b) of the closest pair in pace (`gap(a, b)`) of runs made by make_a(k) and make_b(k), k = 0, 1, ...: a
    first pair, then, while none is within PACE_TOLERANCE, a run more of b and of a by turns, paired with every
    run of the other kind, PACE_TRIES rounds at most. A run made next to the runs before it is no worse a partner
    for them than a run of a new pair would be, and a round costs one run, not two."""
    a_runs, b_runs, gaps = [make_a(0)], [make_b(0)], {}
    for round_ in range(PACE_TRIES):
        if round_:
            more = b_runs if round_ % 2 else a_runs
            more.append((make_b if more is b_runs else make_a)(len(more)))
        for i, a in enumerate(a_runs):
            for j, b in enumerate(b_runs):
                if (i, j) not in gaps:
                    gaps[i, j] = gap(a, b)
                    print(f"{what}: runs {i} and {j} {gaps[i, j]:.1%} apart in pace")
        i, j = min(gaps, key=lambda ij: (gaps[ij], ij))
        if gaps[i, j] <= PACE_TOLERANCE:
            break
    return a_runs[i], b_runs[j]


def step_pace(a, late_steps) -> float:
    """The mean length of a run's steady steps that its fault leaves alone: the late steps and the ones before
    them left out. (The mean, as the prediction is of the mean step: a busy machine's one long step among them is
    part of the run's pace.)"""
    warm = {s.index for s in a.steps if s.warmup}
    near = {k + d for k in late_steps for d in (-1, 0)}
    return mean(p.length_ns for p in a.critical_path if p.index not in warm and p.index not in near)


def compute_pace(a, ranks) -> dict[int, float]:
    """Each of `ranks`' median compute a steady step (the time its host was not blocked in an op)."""
    t = a.table
    (start, _, row, _, maxb), hranks, off, _ = _hosts(t, finished(t))
    step = np.frombuffer(a.step_of, np.int32)
    warm = {s.index for s in a.steps if s.warmup}
    out = {}
    for h, r in enumerate(hranks.tolist()):
        if r not in ranks:
            continue
        lo, hi = off[h], off[h + 1]
        gaps = np.maximum(start[lo + 1:hi] - maxb[lo:hi - 1], 0)
        ks = step[row[lo + 1:hi]]
        out[r] = median(int(gaps[ks == k].sum()) for k in np.unique(ks).tolist() if k >= 0 and k not in warm)
    return out


def measured_without_fault(faulty, on_time, late_steps=None, bystanders=None) -> float:
    """What a prediction for the faulty run is compared with: the on-time run's mean steady step, at the faulty
    run's pace where the fault leaves steps alone to compare it on (`late_steps`), or ranks (`bystanders`: their
    compute's mean ratio); the pair's drift is at most PACE_TOLERANCE where a pair that close was made. (Within
    it, a drift of 2.5% is 8 ms of a 300 ms step: 12% of a 67 ms saving, most of the saving's 15% bound.)"""
    measured = steady_mean(on_time)
    if late_steps:
        return measured * step_pace(faulty, late_steps) / step_pace(on_time, late_steps)
    if bystanders:
        pa, pb = compute_pace(faulty, bystanders), compute_pace(on_time, bystanders)
        return measured * mean(pa[r] / pb[r] for r in bystanders)
    return measured


def steady_mean(a) -> float:
    """The measured mean of the steady steps (warm-up left out): what a prediction is compared with."""
    warm = {s.index for s in a.steps if s.warmup}
    steady = [p.length_ns for p in a.critical_path if p.index not in warm]
    return sum(steady) / len(steady)


def ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms"
