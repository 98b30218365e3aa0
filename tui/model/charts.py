"""The Charts tab's figures without Textual: each op's bus bandwidth against message size, measured and at the
analysis' alpha-beta model's time, and the durations of one op for a histogram.

The collectives' busbw, durations and model times are the analysis' (tracer/analysis/comms/collectives.py, comms/alpha_beta.py);
this takes one point per op and size from them (their median), from the instances' columns, not a view of each, so
a million-event trace plots as quickly as a small one."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from disttrace.tracer.analysis.core.results import NULL
from disttrace.tracer.data.table import EventTable
from disttrace.tracer.units import ns_unit

HIST_EVENTS = 200_000
"""Events a histogram is drawn from at most: a sample of a huge trace draws the same histogram."""


@dataclass(frozen=True)
class BandwidthLine:
    """One op's points: its message sizes (bytes, ascending), the median busbw (GB/s) of its collectives of each,
    and (size, median busbw at the model's time) where the model is known."""

    op: str
    sizes: list[int]
    measured: list[float]
    model: list[tuple[int, float]]


def bandwidth_lines(ct) -> list[BandwidthLine]:
    """Per op (by name), its collectives with a measured busbw and bytes, one point per message size (a
    CollectiveTable: the analysis' `collectives`)."""
    busbw, dur, model_ns = ct.column("busbw_gbps"), ct.column("duration_ns"), ct.column("model_ns")
    measured = ~np.isnan(busbw) & (busbw != 0) & (ct.column("bytes") > 0)
    by_size = {(ct.op[int(g[0])], ct.bytes[int(g[0])]): g for g in ct.groups_by(("op", "bytes"), measured)}
    lines = []
    for op in sorted({op for op, _ in by_size}):
        sizes = sorted(b for o, b in by_size if o == op)
        model = []
        for b in sizes:
            g = by_size[(op, b)]
            g = g[~np.isnan(model_ns[g]) & (model_ns[g] != 0) & (dur[g] != NULL) & (dur[g] != 0)]
            # the busbw it would have had at the model's time: busbw scales inversely with the time taken
            at_model = (busbw[g] * dur[g] / model_ns[g]).tolist()
            if at_model:
                model.append((b, statistics.median(at_model)))
        lines.append(BandwidthLine(op, sizes, [statistics.median(busbw[by_size[(op, b)]].tolist()) for b in sizes],
                                   model))
    return lines


@dataclass(frozen=True)
class Durations:
    """The durations of the finished events of one op (None: of all), in `unit`, every `step`-th row sampled."""

    op: str | None
    values: list[float]
    unit: str
    step: int

    def axis(self, bins: int) -> tuple[tuple[float, float], list[float]] | None:
        """The x axis from the shortest to the longest, widened by half a bin each side (a bar stands centred on
        its bin: the first and last ones whole), and five ticks from the shortest; None when all are equal."""
        lo, hi = min(self.values), max(self.values)
        if hi <= lo:
            return None
        half_bin = (hi - lo) / bins / 2
        return (lo - half_bin, hi + half_bin), [lo + (hi - lo) * k / 4 for k in range(5)]


def durations_of(t: EventTable, op: str | None) -> Durations | None:
    """The durations of op's finished events (op None: every event's), one unit for all from the longest; None
    when none finished."""
    n = len(t)
    step = max(1, n // HIST_EVENTS)
    ops, starts, ends = t.op, t.start_ns, t.end_ns
    durs = [ends[i] - starts[i] for i in range(0, n, step) if ends[i] >= 0 and (op is None or ops[i] == op)]
    if not durs:
        return None
    unit, factor = ns_unit(max(durs))
    return Durations(op, [d * factor for d in durs], unit, step)
