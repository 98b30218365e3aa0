"""The Memory tab's figures without Textual: each rank's bytes held over the run (the samples of `disttrace run
--memory`, read from the trace dirs the viewer opened when the tab is first shown) as chart series on the trace's
timeline with the steps' starts and the chosen step marked, the run's highest peak with its op and call site, the
chosen step's breakdown by kind per rank beside the formula's prediction, and the formula's lines. The figures
are the memory analysis' (analysis/memory/: MemoryReport); only the drawing's choices are made here."""

from __future__ import annotations

from dataclasses import dataclass

from disttrace.tracer.units import bytes_unit, fmt_bytes, fmt_bytes_short, fmt_ns_short, ns_unit

SERIES = 6
"""Ranks drawn at most (the highest peak's and the ranks a problem names first, then the lowest)."""
POINTS = 2000
"""Samples drawn per rank at most: above it, each bucket of samples is drawn as its most (a memory chart is read
for its peaks; plotext's time grows with the points)."""
TICKS = 8
"""Step numbers under the x axis at most."""
KINDS = (("params", "params"), ("grads", "grads"), ("optimizer", "optim."), ("activations", "activ."),
         ("temporaries", "temp."), ("comm", "comm"))
"""The breakdown's kinds: format.MEM_KINDS' names and the column each has (short: at 80 columns all of them fit)."""
COLUMNS = tuple(name for _, name in KINDS) + ("outside", "peak")
"""The breakdown's columns after the rank's: the kinds, what lies outside the allocator, the step's peak."""
SCHEMES = {"ddp": "DDP", "zero1": "ZeRO-1 (ZeroRedundancyOptimizer)", "fsdp2": "ZeRO-3 (FSDP2 fully_shard)",
           "replicated": "replicated (no wrapper found)", "unknown": "not recognized"}

NONE_HERE = ("No memory samples in this trace: `disttrace run --memory` records each rank's memory by kind "
             "(parameters, gradients, optimizer state, activations, ...) at every collective and the peaks between.")
"""What the Memory tab's key says on a trace without memory samples (the tab is not there)."""


@dataclass(frozen=True)
class Peak:
    """The run's highest sample: its rank, bytes, time (the trace's timeline), the op and the user's line."""
    rank: int
    bytes: int
    t_ns: int
    op: str | None
    site: str | None
    step: int | None


@dataclass(frozen=True)
class MemoryChart:
    """x: time into the trace in x_unit; per rank drawn its samples' (xs, ys) in y_unit; the steps' starts (and
    the step numbers under some), the chosen step's window, the peak's point."""
    series: dict[int, tuple[list[float], list[float]]]
    starts: list[float]
    ticks: list[tuple[float, str]]
    chosen: tuple[float, float] | None
    peak: tuple[float, float] | None
    top: float
    y_unit: str
    x_unit: str
    title: str


@dataclass(frozen=True)
class MemoryFigures:
    """Everything the tab shows: the sentences above the chart, the chart, the breakdown (a row per rank in
    `ranks` and the formula's: its name, a value per COLUMNS), its first column's title, and the formula's lines
    (the chosen step's peak first)."""
    lines: list[str]
    chart: MemoryChart
    ranks: list[int]
    breakdown_title: str
    breakdown: list[tuple[str, list[str]]]
    formula: list[str]


def has_memory(paths: list[str]) -> bool:
    """Whether the viewer shows the Memory tab for these paths: they hold `.mem` files."""
    from disttrace.tracer.data.load import has_memory as has

    return has(list(paths))


def memory_of(store):
    """(the memory samples, the memory analysis) of the store's trace, or None: not recorded with --memory."""
    from disttrace.tracer.analysis import memory_report  # (when the tab is first shown: not at the viewer's start)
    from disttrace.tracer.data.load import read_memory

    trace = read_memory(store.table)
    report = memory_report(trace, store.analysis) if trace is not None else None
    return None if report is None else (trace, report)


def other_step(trace, report, analysis, direction: int):
    """The memory analysis with the breakdown of the step before (direction -1) or after (+1) the report's, of the
    trace's steps in order (the tab's [ and ] keys); None past the first or the last."""
    from disttrace.tracer.analysis import memory_report

    order = sorted(s.index for s in analysis.steps)
    if report.step not in order:
        return None
    i = order.index(report.step) + direction
    return memory_report(trace, analysis, step=order[i]) if 0 <= i < len(order) else None


def memory_view(trace, report, t0: int) -> MemoryFigures:
    """The tab's figures for a MemoryTrace and its MemoryReport; t0: the trace's start (the timeline's zero)."""
    peak = run_peak(trace, report)
    shown = shown_ranks(report, peak)
    return MemoryFigures(_lines(report, peak), memory_chart(trace, report, shown, peak, t0), shown,
                         _breakdown_title(report), breakdown_rows(report, shown),
                         [chosen_note(report, t0), *formula_lines(report)])


def run_peak(trace, report) -> Peak | None:
    """The highest sample of any rank, with the op it was taken at and its call site."""
    best = None
    for r, s in trace.ranks.items():
        total = s.total
        if not len(total):
            continue
        k = int(total.argmax())
        if best is None or int(total[k]) > best[1]:
            best = (r, int(total[k]), k)
    if best is None:
        return None
    r, b, k = best
    s = trace.ranks[r]
    t = int(s.t[k])
    m = report.ranks.get(r)
    step = next((x.step for x in (m.steps if m else []) if x.start_ns <= t < x.end_ns), None)
    return Peak(r, b, t, s.op[k], s.site[k], step)


def shown_ranks(report, peak: Peak | None) -> list[int]:
    """The ranks drawn: all up to SERIES, else the peak's, the ranks of a leak or an imbalance, then the lowest."""
    ranks = sorted(report.ranks)
    if len(ranks) <= SERIES:
        return ranks
    first = ([peak.rank] if peak else []) + [r for p in report.problems for r in p.ranks] + \
        [i.rank for i in report.imbalance]
    first = list(dict.fromkeys(r for r in first if r in report.ranks))[:SERIES]
    return sorted(first + [r for r in ranks if r not in first][:SERIES - len(first)])


def memory_chart(trace, report, shown: list[int], peak: Peak | None, t0: int) -> MemoryChart:
    """The shown ranks' samples in one unit of bytes and one of time, the steps of the drawn rank with the most."""
    import numpy as np

    top = max((int(trace.ranks[r].total.max()) for r in shown if len(trace.ranks[r].t)), default=1)
    y_unit, y_factor = bytes_unit(max(top, 1))
    span = max((int(trace.ranks[r].t[-1]) - t0 for r in shown if len(trace.ranks[r].t)), default=1)
    x_unit, x_factor = ns_unit(max(span, 1))
    series = {}
    for r in shown:
        t, total = np.asarray(trace.ranks[r].t), np.asarray(trace.ranks[r].total)
        held = np.flatnonzero(total)  # (from the first sample that holds bytes: the process's start and its
        first = int(held[0]) if len(held) else 0  # process group's, before the model is made, are a flat zero)
        t, total = _envelope(t[first:], total[first:])
        series[r] = (((t - t0) * x_factor).tolist(), (total * y_factor).tolist())
    steps = _steps_of(report, shown)
    starts = [(s.start_ns - t0) * x_factor for s in steps]
    every = max(1, -(-len(steps) // TICKS))
    ticks = [(x, str(s.step)) for x, s in list(zip(starts, steps))[::every]]
    chosen = next((((s.start_ns - t0) * x_factor, (s.end_ns - t0) * x_factor) for s in steps
                   if s.step == report.step), None)
    point = ((peak.t_ns - t0) * x_factor, peak.bytes * y_factor) if peak and peak.rank in shown else None
    more = f" ({len(shown)} of {len(report.ranks)} ranks)" if len(shown) < len(report.ranks) else ""
    return MemoryChart(series, starts, ticks, chosen, point, top * y_factor, y_unit, x_unit,
                       f"bytes held per rank ({y_unit}){more} over the run; ┬ a step's start, numbered below")


def _envelope(t, total):
    """At most POINTS samples: each bucket's highest (its time, its bytes)."""
    import numpy as np

    n = len(t)
    if n <= POINTS:
        return t, total
    edges = np.linspace(0, n, POINTS + 1).astype(np.int64)[:-1]
    top = np.maximum.reduceat(total, edges)
    where = np.array([e + int(total[e:f].argmax()) for e, f in zip(edges, list(edges[1:]) + [n])])
    return t[where], top


def _steps_of(report, shown: list[int]):
    """The step windows the chart marks: those of the drawn rank with the most steps (the lowest of equals)."""
    ranks = [report.ranks[r] for r in shown if r in report.ranks]
    return max(ranks, key=lambda m: (len(m.steps), -m.rank)).steps if ranks else []


def _lines(report, peak: Peak | None) -> list[str]:
    """The sentences above the chart: the run's peak with its op, each leak and imbalance, the analysis' notes."""
    out = []
    if peak is not None:
        at = " at ".join(x for x in (peak.op, _site(peak.site)) if x)
        step = f" in step {peak.step}" if peak.step is not None else ""
        out.append(f"▲ peak {fmt_bytes(peak.bytes)} on rank {peak.rank}{step}" + (f": {at}" if at else ""))
    found = [f"leak: rank {', '.join(map(str, p.ranks))} from step {p.step}"
             + "".join(f" ({k})" for k in (getattr(p, "where", None) or {}).values())
             for p in report.problems if p.kind == "leak"]
    found += [f"imbalance: rank {i.rank} +{fmt_bytes(i.bytes - i.typical_bytes)} {i.kind}"
              for i in report.imbalance]
    if found:
        out.append("; ".join(found))
    out += [f"note: {n}" for n in report.notes]
    return out


def _breakdown_title(report) -> str:
    return "whole trace" if report.step is None else f"step {report.step}"


def breakdown_rows(report, ranks: list[int]) -> list[tuple[str, list[str]]]:
    """The breakdown's columns (COLUMNS) as rows: one per rank, its bytes by kind (params, grads, optimizer: the most
    the step held; activations, temporaries, comm: their most, peaks included), outside the allocator and the
    step's peak; then the formula's prediction (for the kinds it predicts)."""
    from disttrace.tracer.analysis import memory_fields

    rows = []
    for r in ranks:
        m = report.ranks[r]
        outside = m.outside_allocator_bytes
        rows.append((f"rank {r}", [fmt_bytes_short(getattr(m, memory_fields[kind])) for kind, _ in KINDS]
                     + [fmt_bytes_short(outside) if outside is not None else "—", fmt_bytes_short(m.peak_bytes)]))
    if report.formula is not None and report.formula.predicted:
        rows.append(("formula", [_predicted(report, ranks, kind) for kind, _ in KINDS] + ["", ""]))
    return rows


def _predicted(report, ranks: list[int], kind: str) -> str:
    """The formula's bytes of a kind for these ranks: one value, or the least and the most where they differ
    (ZeRO-1's own partitions); "" for a kind it does not predict."""
    f = report.formula
    got = sorted({f.predicted[r][kind] for r in ranks if f is not None and kind in f.predicted.get(r, {})})
    if not got:
        return ""
    return fmt_bytes_short(got[0]) if len(got) == 1 else f"{fmt_bytes_short(got[0])}–{fmt_bytes_short(got[-1])}"


def formula_lines(report) -> list[str]:
    """The formula: scheme and expression, Ψ, bytes per value, K and N, measured over predicted per kind (the rank
    furthest from 1), what it could not recognize and what makes the two differ."""
    f = report.formula
    if f is None:
        return ["formula: nothing found to predict from (no optimizer, DDP or FSDP2 seen)"]
    if f.scheme == "unknown":
        return [f"formula: {u}" for u in f.unrecognized]
    out = [f"{SCHEMES.get(f.scheme, f.scheme)}: {f.expression}; Ψ = {f.psi:,} values, "
           f"{f.bytes_per_value.get('params', 0):g} B each; K = {f.k:g}, N = {f.n}"]
    if f.even_optimizer_bytes is not None:
        out.append(f"KΨ/N = {fmt_bytes(f.even_optimizer_bytes)} (the even share)")
    worst: dict[str, float] = {}
    for c in report.checks:
        if c.kind not in worst or abs(c.ratio - 1) > abs(worst[c.kind] - 1):
            worst[c.kind] = c.ratio
    if worst:
        out.append("measured/predicted: " + ", ".join(f"{k} {v:.2f}" for k, v in worst.items()))
    out += [f"not recognized: {u}" for u in f.unrecognized]
    return out + list(f.notes)


def chosen_note(report, t0: int) -> str:
    """Where the chosen step's peak was: its rank, bytes, time into the trace, op and line (the most of the ranks
    drawn)."""
    if not report.ranks:
        return ""
    m = max(report.ranks.values(), key=lambda m: (m.peak_bytes, -m.rank))
    at = " at ".join(x for x in (m.peak_op, _site(m.peak_site)) if x)
    step = f"step {report.step} ({report.step_chosen}; [ ] another)" if report.step is not None else "the whole trace"
    return f"{step}: peak {fmt_bytes_short(m.peak_bytes)} on rank {m.rank} @{fmt_ns_short(m.peak_ns - t0)}" + \
        (f", {at}" if at else "")


def _site(site: str | None) -> str:
    from disttrace.tracer.analysis import short_site

    return short_site(site)
