"""Clock offsets between ranks fitted from the collectives themselves, for traces whose times are each host's own
(PyTorch profiler traces: kineto.py). disttrace's own recorder aligns clocks by ping-pong through the store
instead (record/clock.py); this is for evidence recorded without it."""

from __future__ import annotations

from dataclasses import dataclass

MIN_DRIFT_POINTS = 8        # exits needed before a drift is fitted, besides the offset
MIN_DRIFT_SPAN_NS = 1_000_000_000  # ... spread over at least this long
MAX_DRIFT = 1e-3            # 1 ms a second, ten times a quartz clock's worst: a steeper fit is exits that disagree
#                             (ops matched wrongly), not a clock, and would stretch every op's duration as much


@dataclass
class ClockFit:
    offset_ns: int          # added to the rank's clock at t0_ns to get the reference rank's
    drift: float            # ns of offset gained per ns of the rank's clock after t0_ns (0 when not fitted)
    t0_ns: int
    uncertainty_ns: int     # the largest residual of the exits it was fitted on
    points: int

    def apply(self, t: int) -> int:
        return t + self.offset_ns + int(self.drift * (t - self.t0_ns))


def fit_clock_offsets(exits: dict[tuple, dict[int, int]], ranks: list[int],
                      starts: dict[tuple, dict[int, int]] | None = None) -> dict[int, ClockFit]:
    """Each rank's clock offset to the lowest rank's, from the collectives' exits.

    `exits`: per collective (any hashable key), {rank: its end on that rank's own clock}, only for ops whose
    completion is near-simultaneous on all their ranks (all_reduce, all_gather, reduce_scatter, all_to_all,
    barrier: nobody leaves before the last has arrived and the data went round). For each rank not yet aligned
    that shares collectives with aligned ones, the differences d = aligned peer's exit - its exit are fitted: the
    median when there are few, else a line d = offset + drift * (t - t0) by least squares (once more without the
    points beyond three times the median residual), when at least MIN_DRIFT_POINTS exits span MIN_DRIFT_SPAN_NS.
    The uncertainty is the largest residual kept. Ranks that share no collective with an aligned rank are left
    out (their events keep their own clock).

    `starts` (the same keys: each rank's start of those collectives) bounds each fit by causality: no rank leaves
    before every rank has begun. The residuals measure the exits' scatter, not a stagger that is the same every
    time (a loaded ring's ranks leave a hop or more apart): a fit that would put a rank's exit before an aligned
    peer's start, or a peer's exit before its start, is moved the least that honours every collective, and its
    uncertainty is at least that move."""
    if not ranks:
        return {}
    ref = min(ranks)
    fits = {ref: ClockFit(0, 0.0, 0, 0, 0)}
    pending = [r for r in ranks if r != ref]
    while pending:
        progressed = False
        for r in list(pending):
            pts = []
            for ends in exits.values():
                if r in ends:
                    peers = [fits[a].apply(ends[a]) for a in ends if a in fits]
                    if peers:
                        pts.append((ends[r], sorted(peers)[len(peers) // 2] - ends[r]))
            if not pts:
                continue
            fits[r] = _fit(pts)
            if starts:
                fits[r] = _causal(fits[r], r, exits, starts, fits)
            pending.remove(r)
            progressed = True
        if not progressed:
            break
    return fits


def _fit(pts: list[tuple[int, int]]) -> ClockFit:
    pts.sort()
    ds = sorted(d for _, d in pts)
    med = ds[len(ds) // 2]
    t0 = pts[0][0]
    if len(pts) < MIN_DRIFT_POINTS or pts[-1][0] - t0 < MIN_DRIFT_SPAN_NS:
        return _offset(ds, med, t0)
    use = pts
    for _ in range(2):
        n = len(use)
        mt = sum(t - t0 for t, _ in use) / n
        md = sum(d for _, d in use) / n
        var = sum((t - t0 - mt) ** 2 for t, _ in use)
        slope = sum((t - t0 - mt) * (d - md) for t, d in use) / var if var else 0.0
        icpt = md - slope * mt
        resid = [abs(d - (icpt + slope * (t - t0))) for t, d in use]
        cut = max(sorted(resid)[len(resid) // 2] * 3, 1)
        kept = [p for p, e in zip(use, resid) if e <= cut]
        if len(kept) == len(use) or len(kept) < MIN_DRIFT_POINTS:
            break
        use = kept
    if abs(slope) > MAX_DRIFT:
        return _offset(ds, med, t0)
    return ClockFit(int(round(icpt)), slope, t0, int(max(resid)) + 2, len(pts))  # + the rounding of apply()


def _offset(ds: list[int], med: int, t0: int) -> ClockFit:
    """The offset alone: the differences' median; the uncertainty, the largest residual within three times the
    median one."""
    resid = [abs(d - med) for d in ds]
    keep = sorted(resid)[len(resid) // 2] * 3
    kept = [x for x in resid if x <= keep] or resid
    return ClockFit(med, 0.0, t0, max(kept) + 1, len(ds))


def _causal(f: ClockFit, r: int, exits: dict, starts: dict, fits: dict[int, ClockFit]) -> ClockFit:
    """f moved by the least shift that puts no exit before a start across r and its aligned peers (none where
    the collectives bound it from both sides inconsistently: a trace whose times are not what they say)."""
    lo, hi = -_UNBOUNDED, _UNBOUNDED  # the shift's bounds
    for key, ends in exits.items():
        begun = starts.get(key, {})
        if r not in ends or r not in begun:
            continue
        for a in ends:
            if a == r or a not in fits or a not in begun:
                continue
            # r's exit, shifted, not before a's start; a's exit not before r's start, shifted
            lo = max(lo, fits[a].apply(begun[a]) - f.apply(ends[r]))
            hi = min(hi, fits[a].apply(ends[a]) - f.apply(begun[r]))
    if lo > hi:
        return f
    shift = lo if lo > 0 else hi if hi < 0 else 0
    if not shift:
        return f
    return ClockFit(f.offset_ns + shift, f.drift, f.t0_ns, max(f.uncertainty_ns, abs(shift)), f.points)


_UNBOUNDED = 1 << 62

__all__ = ["ClockFit", "fit_clock_offsets"]
