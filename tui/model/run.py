"""The Run tab's figures without Textual: the whole run over the black box's aggregates (tracer/analysis/waits/
whole_run.py), read from the trace dirs the viewer opened, and each rank's time in collectives per window as
chart series (the ranks shown at most SERIES: the straggler and the ranks around it first)."""

from __future__ import annotations

from dataclasses import dataclass

from disttrace.tracer.data.load import has_aggregates, read_aggregates
from disttrace.tracer.units import fmt_ns, ns_unit

SERIES = 6
"""Ranks drawn at most: more lines than this are a blur in a terminal."""


TICKS = 8
"""Labels on the x axis at most: each an aligned window's first step (or second)."""

NONE_HERE = ("No whole-run aggregates in this trace: `disttrace run --black-box` keeps them (per window and rank: "
             "time, count and bytes per op kind), beside each rank's ring of its last ops.")
"""What the Run tab's key says on a trace without aggregates (the tab is not there)."""


@dataclass(frozen=True)
class RunChart:
    """The Run tab's chart: x (the windows' first steps, or seconds into the run) and the labels on it, one series
    per rank shown (None where it has no value), the unit of the values, and the words around it."""
    xs: list[float]
    ticks: list[tuple[float, str]]
    series: dict[int, list[float | None]]
    unit: str
    title: str
    x_label: str
    sentence: str
    lines: list[str]


def has_run(paths: list[str]) -> bool:
    """Whether the viewer shows the Run tab for these paths: they hold a black-box trace's aggregates."""
    return has_aggregates(list(paths))


def run_of(paths: list[str], run: int | None):
    """The whole run of these trace dirs (None: no aggregates: not a black-box trace)."""
    from disttrace.tracer.analysis import whole_run  # (when the tab is first shown: not at the viewer's start)

    agg = read_aggregates(list(paths), run)
    return None if agg is None else whole_run(agg)


def run_chart(whole) -> RunChart:
    """The chart and its words for a WholeRun."""
    from disttrace.tracer.analysis import run_straggler_sentence

    shown = _shown(whole)
    peak = max((v for r in shown for v in whole.per_unit_ns[r] if v is not None), default=1)
    unit, factor = ns_unit(max(peak, 1))
    by_step = whole.unit == "step"
    t0 = whole.aligned_start_ns[0] if whole.aligned_start_ns else 0
    xs = [float(s) for s in whole.aligned_first_step] if by_step else [(t - t0) / 1e9 for t in whole.aligned_start_ns]
    series = {r: [None if v is None else v * factor for v in whole.per_unit_ns[r]] for r in shown}
    n = sum(len(w.start_ns) for w in whole.windows.values())
    more = f" ({len(shown)} of {len(whole.ranks)} ranks shown)" if len(shown) < len(whole.ranks) else ""
    lines = [f"{len(whole.ranks)} ranks, {n:,} windows ({whole.by}), {len(xs):,} aligned{more}"]
    lines += [f"{o.op}: {o.count:,} ops, {fmt_ns(o.total_ns)}" for o in whole.ops[:3]]
    lines += [f"warning: {w}" for w in whole.warnings]
    ticks = [(x, f"{x:,.0f}" if by_step else f"{x:.0f} s") for x in xs[::max(1, -(-len(xs) // TICKS))]]
    return RunChart(xs, ticks, series, unit, f"time in collectives a {whole.unit} ({unit}), per window and rank",
                    "the window's first step" if by_step else "seconds into the run", run_straggler_sentence(whole),
                    lines)


def _shown(whole) -> list[int]:
    """The ranks drawn: all up to SERIES, else the straggler and the lowest ranks."""
    ranks = list(whole.ranks)
    if len(ranks) <= SERIES:
        return ranks
    first = [whole.straggler.rank] if whole.straggler else []
    return sorted(first + [r for r in ranks if r not in first][:SERIES - len(first)])
