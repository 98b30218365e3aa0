"""The report's memory section (`disttrace run --memory`; analysis/memory/'s MemoryReport): the chosen step's
breakdown by kind per rank with its peak's op and line, the formula beside what was measured, the imbalance, and
each rank's bytes at the steps' ends. report.py calls `render` with its table maker (rich_table)."""

from __future__ import annotations

from ..analysis.memory.breakdown import short_site
from ..units import bytes_unit, fmt_bytes, fmt_bytes_short, fmt_list

_COLUMNS = (("params", "params_bytes"), ("grads", "grads_bytes"), ("optimizer", "optimizer_bytes"),
            ("activations", "activations_peak_bytes"), ("temporaries", "temporaries_peak_bytes"),
            ("comm", "comm_buffers_peak_bytes"))


def render(console, mem, top: int, rich_table) -> None:
    from rich.markup import escape

    step = f"step {mem.step} ({mem.step_chosen})" if mem.step is not None else "the whole trace"
    console.print(f"[bold]Memory[/] (disttrace run --memory): {len(mem.ranks)} ranks, by kind in {step}; "
                  "activations, temporaries and communication buffers at their most", soft_wrap=True)
    for n in mem.notes:
        console.print(f"[yellow]note:[/] {escape(n)}")
    ranks = list(sorted(mem.ranks.items()))[:top]
    # two tables, each readable at 80 columns: the kinds (their sizes short: six of them and the rank fit), then
    # each rank's peak with its op and line and what lies outside the allocator
    table = rich_table("Bytes by kind per rank", "rank", *(c for c, _ in _COLUMNS))
    for r, m in ranks:
        table.add_row(str(r), *(fmt_bytes_short(getattr(m, f)) for _, f in _COLUMNS))
    console.print(table)
    table = rich_table("Peak per rank", "rank", "peak", "outside allocator", "op", "site")
    for r, m in ranks:
        outside = fmt_bytes(m.outside_allocator_bytes) if m.outside_allocator_bytes is not None else "—"
        table.add_row(str(r), fmt_bytes(m.peak_bytes), outside, escape(m.peak_op or ""),
                      escape(short_site(m.peak_site)))
    console.print(table)
    _formula(console, mem, top, rich_table)
    for i in mem.imbalance:
        console.print(f"[bold yellow]imbalance:[/] rank {i.rank} holds {fmt_bytes(i.bytes)} of {i.kind} "
                      f"(the ranks' median: {fmt_bytes(i.typical_bytes)}; +{fmt_bytes(i.bytes - i.typical_bytes)})")
    _ends(console, mem, top, rich_table)


def _formula(console, mem, top: int, rich_table) -> None:
    from rich.markup import escape

    f = mem.formula
    if f is None:
        return
    if f.scheme == "unknown":
        console.print(f"[yellow]formula:[/] {escape('; '.join(f.unrecognized))}")
        return
    bpv = f.bytes_per_value.get("params", 0)
    console.print(f"[bold]Formula[/]: {f.scheme} {f.expression} with Ψ = {f.psi:,} parameters, {bpv:g} bytes a "
                  f"value, K = {f.k:g}, N = {f.n}" + (f"; KΨ/N = {fmt_bytes(f.even_optimizer_bytes)}"
                                                       if f.even_optimizer_bytes is not None else ""),
                  soft_wrap=True)
    table = rich_table("Predicted and measured (the step's most)", "rank", "kind", "predicted", "measured",
                       "measured/predicted")
    for c in mem.checks[:top * 3]:
        style = "" if abs(c.ratio - 1) <= 0.05 else "yellow"
        table.add_row(str(c.rank), c.kind, fmt_bytes(c.predicted), fmt_bytes(c.measured),
                      f"[{style}]{c.ratio:.3f}[/]" if style else f"{c.ratio:.3f}")
    console.print(table)
    for n in f.unrecognized:
        console.print(f"[yellow]not recognized:[/] {escape(n)}")
    for n in f.notes:
        console.print(f"[dim]{escape(n)}[/]")


def _ends(console, mem, top: int, rich_table) -> None:
    ranks = list(sorted(mem.ranks.items()))[:top]
    steps = sorted({s.step for _, m in ranks for s in m.steps})
    if not steps:
        return
    # one unit for the whole table, in its title (a unit in each cell made two lines of each at 120 columns), and
    # as many steps as the width holds: the first third of them and the last
    top_bytes = max((s.peak_bytes for _, m in ranks for s in m.steps), default=0)
    unit, factor = bytes_unit(max(top_bytes, 1))
    def num(b: int) -> str:
        return f"{b * factor:.1f}"

    column = max(len(num(top_bytes)), len(str(steps[-1])), len("start")) + 3  # (its padding and border)
    fit = max(2, min(12, (console.width - 1 - len("rank") - 3 - 2 * column) // column))
    shown = steps if len(steps) <= fit else steps[:fit // 3] + steps[-(fit - fit // 3):]
    table = rich_table(f"Bytes held at the steps' ends, {unit} (steps {fmt_list(shown)})", "rank", "start", "peak",
                       *(str(s) for s in shown))
    for r, m in ranks:
        by = {s.step: s for s in m.steps}
        table.add_row(str(r), num(m.steps[0].start_bytes) if m.steps else "—",
                      num(max((s.peak_bytes for s in m.steps), default=0)),
                      *(num(by[s].end_bytes) if s in by else "—" for s in shown))
    console.print(table)
