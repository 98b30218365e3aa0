"""The views beside the timeline: pipeline, waits, links, charts, problems (and the ring view, in ring.py).
Each shows the analysis' results; none recomputes matching, waits or bandwidth."""

from __future__ import annotations

import statistics

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import reactive
from textual.widgets import DataTable, OptionList, Static

from disttrace.tracer.analysis import attribution_summary, micro_batches, straggler_verdict
from disttrace.tracer.analysis.core.results import NULL
from disttrace.tracer.units import fmt_bytes_short, fmt_gbps, fmt_ns_short, gbps_unit, ns_unit

from ..model.replay import row_at_time
from ..model.schedule import ScheduleModel
from ..model.store import TraceStore
from .detail import NarrationPane
from .messages import ShowInTimeline
from .palette import OP_COLORS
from .plot import PlotChart
from .ring import RingView
from .schedule import ScheduleGrid

__all__ = ["RingView", "PipelineView", "WaitsView", "LinksView", "ChartsView", "ProblemsView"]

MAX_ROWS = 2000  # rows of a table view: the worst first; the timeline has the rest


class PipelineView(VerticalScroll, can_focus=False):
    """The pipeline's schedule grid (pipeline/schedule.py) of the playhead's iteration, its bubble measured beside the
    textbook's, each stage's idle time by cause, then the pipeline over all its iterations."""

    DEFAULT_CSS = """
    PipelineView { height: 1fr; }
    PipelineView > Static { height: auto; padding: 0 1; }
    PipelineView > ScheduleGrid { margin: 0 1; }
    PipelineView > NarrationPane { max-height: 40%; }
    """

    playhead: reactive[int] = reactive(-1)
    """Event row of the replay playhead: the grid shows its iteration and highlights its micro-batch."""

    def __init__(self, store: TraceStore, narration=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.narration = narration
        self.model = ScheduleModel(store)
        self._shown = -2  # the iteration the texts are of

    def compose(self) -> ComposeResult:
        p = self.store.analysis.pipeline
        if p is None:
            yield Static("No pipeline found: this trace has no chain of stages passing activations by send/recv.\n"
                         "(Pipeline-parallel jobs show here: the schedule, stage by stage, micro-batch by "
                         "micro-batch, and its bubble.)")
            return
        if self.narration is not None:
            yield NarrationPane(self.store, self.narration).data_bind(PipelineView.playhead)
        if self.model:
            yield Static(id="pipe-iteration")
            yield ScheduleGrid(self.model).data_bind(PipelineView.playhead)
            yield Static(LEGEND, id="pipe-legend")
            yield Static(id="pipe-idle")
        else:
            why = p.schedule_note or "its messages are not P stages' forwards and backwards of the same micro-batches"
            yield Static(f"The schedule was not read from this trace: {why}.", id="pipe-iteration")
        yield Static(self._overall(), id="pipe-overall")

    def on_mount(self) -> None:
        self._iteration_texts()

    def watch_playhead(self) -> None:
        if self.is_mounted:
            self._iteration_texts()

    def _iteration_texts(self) -> None:
        """The playhead's iteration's bubble and idle times (once per iteration)."""
        n = self.model.at(self.playhead)
        if n == self._shown or n < 0:
            return
        self._shown = n
        self.query_one("#pipe-iteration", Static).update(iteration_line(self.model, n))
        self.query_one("#pipe-idle", Static).update(idle_table(self.model, n))

    def _overall(self):
        p = self.store.analysis.pipeline
        slow = ""
        if p.slow_stage is not None:
            slow = (f"  Stage {p.slow_stage} computes {p.slow_factor:.1f}x what the others do: it sets the pace "
                    f"(the others' waits for it are bubble, not straggling).")
        v = f" × {p.virtual_stages} virtual stages" if p.virtual_stages > 1 else ""
        head = Text.assemble(
            ("Over all iterations: ", "bold"), f"{len(p.stages)} stages{v}, {micro_batches(p)}; blocked in "
            "messages ", (f"{p.bubble_fraction:.1%}", "bold"), " of the stages' time",
            *((", the schedule's bubble ", (f"{p.schedule_fraction:.1%}", "bold"),
               f" (the {'steady ' if any(it[11] for it in p.schedule_iterations) else ''}iterations' mean)")
              if p.schedule_iterations else ()),
            f", expected {p.expected_fraction:.1%}.", (slow, "bold #ff8c5a"))
        table = Table(box=None, padding=(0, 2))
        for col in ("stage", "rank", "window", "blocked", "blocked %", ""):
            table.add_column(col, justify="right" if col not in ("", "stage") else "left")
        for s in p.per_stage:
            bar = "█" * int(round(s.bubble_fraction * 30))
            table.add_row(str(s.stage), f"r{s.rank}", fmt_ns_short(s.window_ns), fmt_ns_short(s.blocked_ns),
                          f"{s.bubble_fraction:.1%}", Text(bar, style="#ff8c5a"))
        return Group(head, table)


LEGEND = ("F3 micro-batch 3's forward (blue), B3 its backward (green); F3' on a rank's second virtual stage; a "
          "narrow cell shows 3' or 3; ░ idle: the bubble; "
          "~ a stage not started yet (not counted); yellow: the playhead's micro-batch. An F and a B with no message "
          "between them split their gap at their usual lengths.")


def iteration_line(model: ScheduleModel, n: int) -> Text:
    """Iteration n's schedule and bubble, measured and the textbook's, and the keys that move the grid."""
    it = model.iterations[n]
    k, total = model.position(n)
    p, v, m = len(model.paths[it.pipeline]), model.v, it.micro_batches
    formula = f"(P−1)/(M+P−1) = ({p}−1)/({m}+{p}−1)" if v == 1 else f"(P−1)/(vM+P−1) = ({p}−1)/({v}·{m}+{p}−1)"
    pipe = f" of pipeline {it.pipeline} (ranks {' → '.join(map(str, model.paths[it.pipeline]))})" \
        if len(model.by_pipeline) > 1 else ""
    startup = f", {fmt_ns_short(it.startup_ns)} of start-up waits apart" if it.startup_ns else ""
    last = "forward" if it.kind == "forward only" else "backward"
    warm = ("warm-up, not in the mean bubble", "bold #ff8c5a") if it.warmup else ""
    return Text.assemble(
        (f"Iteration {k} of {total}", "bold"), f" (step {it.index}", ", " if warm else "", warm,
        f"){pipe}: {it.kind}, P = {p}",
        f", v = {v}" if v > 1 else "", f", M = {m}. Bubble ", (f"{it.bubble:.1%}", "bold"),
        f" measured (first forward to last {last}{startup}), textbook {formula} = ",
        (f"{it.expected:.1%}", "bold"), ".", ("  [ ] iteration  + − zoom  ← → pan", "#808080"))


def idle_table(model: ScheduleModel, n: int) -> Group:
    """Each rank's idle time in iteration n by where it comes from, beside its textbook grid's: the waits between
    computations that the schedule itself has (GPipe's first stage between its last forward and its first backward)
    apart from those the messages and slower neighbours added."""
    cells = model.cells.get(n, [])
    ideal = model.ideal_idle(n)
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False)  # (one space between columns: 80 wide fit)
    for col in ("stage", "busy", "warm-up/cool", "waits ←/→", "host", "held", "textbook", "its waits"):
        table.add_column(col, justify="left" if col == "stage" else "right", no_wrap=True)
    for pos, (r, (warm, cool, before, after, other, flight)) in enumerate(model.idle_of(n)):
        busy = sum(c.end_ns - c.start_ns for c in cells if c.rank == r)
        iw, ic, ib, _ = ideal[pos] if pos < len(ideal) else (0, 0, 0, 0)
        table.add_row(f"s{pos} r{r}", fmt_ns_short(busy), f"{fmt_ns_short(warm)}/{fmt_ns_short(cool)}",
                      f"{fmt_ns_short(before)}/{fmt_ns_short(after)}", fmt_ns_short(other), str(flight),
                      f"{fmt_ns_short(iw)}/{fmt_ns_short(ic)}", fmt_ns_short(ib))
    return Group(Text("Idle time by cause: warm-up/cool (before the first computation/after the last), waits ←/→ "
                      "(blocked with the stage before/after), host (between ops); held: micro-batches in flight at "
                      "once; the textbook grid's warm-up/cool and its waits (the schedule's own: measured waits "
                      "beyond them are the messages' or a slower neighbour's):", style="italic"), table)


class WaitsView(Vertical):
    """Who waited how long for whom: the straggler verdict, the ranks by the waiting they caused, the steps, and
    every collective by the wait it caused."""

    DEFAULT_CSS = """
    WaitsView { height: 1fr; }
    WaitsView #verdict { height: auto; padding: 0 1; color: $text; }
    WaitsView #attribution { height: auto; padding: 0 1; color: $text-muted; }
    WaitsView > Horizontal { height: 1fr; }
    WaitsView #ranks-steps { width: 48; }
    WaitsView #ranks-steps > Vertical { height: 1fr; }
    WaitsView #collectives { width: 1fr; }
    WaitsView.-narrow > Horizontal { layout: vertical; }
    WaitsView.-narrow #ranks-steps { width: 1fr; height: 1fr; layout: horizontal; }
    WaitsView.-narrow #ranks-steps > Vertical { width: 1fr; }
    WaitsView.-narrow #collectives { height: 1fr; }
    WaitsView Vertical > Static { height: auto; padding: 0 1; color: $text-muted; }
    WaitsView DataTable { height: 1fr; }
    """

    NARROW = 130
    """Below this width the collectives' table goes under the ranks and the steps (side by side), not beside them:
    its seven columns need about 80 cells."""

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self._rows: list[int] = []
        self._step_rows: list[int] = []

    def compose(self) -> ComposeResult:
        a = self.store.analysis
        label, rest = straggler_verdict(a)
        yield Static(Text.assemble((label, "bold"), rest), id="verdict")
        summary = attribution_summary(a, "step" if a.steps else "run")
        if summary:
            yield Static("\n".join(summary), id="attribution")
        # each title says how many rows its table holds, and how to scroll it: at 80×24 a table shows a few of them
        steps = min(len(a.steps), MAX_ROWS)
        with Horizontal():
            with Vertical(id="ranks-steps"):
                with Vertical():
                    yield Static(f"{_count(len(a.stragglers), 'rank')} by the wait they caused others, and their own "
                                 "wait")
                    yield self._ranks_table()
                if a.steps:
                    how = "marked" if a.steps_source == "marker" else "found"
                    with Vertical():
                        yield Static(f"{_count(steps, 'step')} {how}{_of(steps, len(a.steps))} "
                                     "(tab, ↑↓: scroll; enter: show)")
                        yield self._steps_table()
            with Vertical(id="collectives"):
                table = self._collectives_table()
                shown = len(self._rows)
                waited = int((a.collectives.wait_totals() > 0).sum()) if shown == MAX_ROWS else shown
                yield Static(f"{_count(shown, 'collective')} where ranks waited{_of(shown, waited)}, by total wait "
                             "(tab, ↑↓: scroll; enter: show in the timeline)")
                yield table

    def _ranks_table(self) -> DataTable:
        a = self.store.analysis
        t = DataTable(id="straggler-table", cursor_type="row", zebra_stripes=True)
        t.add_columns("rank", "caused", "last at", "own wait")
        for s in a.stragglers:
            t.add_row(f"r{s.rank}", fmt_ns_short(s.delay_cost_ns), str(s.late_count),
                      fmt_ns_short(a.waits.get(s.rank, 0)))
        return t

    def _steps_table(self) -> DataTable:
        t = DataTable(id="step-table", cursor_type="row", zebra_stripes=True)
        t.add_columns("step", "time", "late", "caused")
        targets = self._step_targets()
        for s in self.store.analysis.steps[:MAX_ROWS]:
            late = s.late_rank
            t.add_row(f"{s.index}{' w' if s.warmup else ''}", fmt_ns_short(s.end_ns - s.start_ns),
                      "—" if late is None else f"r{late}",
                      "" if late is None else fmt_ns_short(s.caused_ns.get(late, 0)))
            self._step_rows.append(targets.get(s.index, 0))
        return t

    def _collectives_table(self) -> DataTable:
        """The collectives by the waiting they held, named by group_seq (as the event list and detail pane do)."""
        a = self.store.analysis
        t = DataTable(id="wait-table", cursor_type="row", zebra_stripes=True)
        t.add_columns("op", "group", "group_seq", "total wait", "skew", "last", "who waited longest")
        colls = [a.collectives[k] for k in a.collectives.most_waited(MAX_ROWS)]
        groups = self.store.table.groups
        for c in colls:
            worst = max(c.wait_ns, key=lambda r: c.wait_ns[r])
            t.add_row(Text(c.op, style=OP_COLORS.get(c.op, "")), groups[c.gid].name, str(c.group_seq),
                      fmt_ns_short(sum(c.wait_ns.values())), fmt_ns_short(c.skew_ns),
                      f"r{c.last_arrival}" if c.last_arrival is not None else "—",
                      f"r{worst} {fmt_ns_short(c.wait_ns[worst])}")
            target = c.events.get(c.last_arrival) if c.last_arrival is not None else None
            self._rows.append(target if target is not None else min(c.events.values()))
        if not colls:
            t.add_row("no collective had any rank waiting", "", "", "", "", "", "")
        return t

    def on_resize(self, event) -> None:
        self.set_class(event.size.width < self.NARROW, "-narrow")

    def _step_targets(self) -> dict[int, int]:
        """step -> the row to show for it: the late rank's first event in it, else the step's first event (one
        pass over the rows for all the steps)."""
        a, rank = self.store.analysis, self.store.table.rank
        late = {s.index: s.late_rank for s in a.steps}
        first: dict[int, int] = {}
        out: dict[int, int] = {}
        for i, k in enumerate(a.step_of):
            if k >= 0 and k not in out:
                first.setdefault(k, i)
                if late.get(k) is None or rank[i] == late[k]:
                    out[k] = i
        return {**first, **out}

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.data_table.id == "wait-table" and event.cursor_row < len(self._rows):
            self.post_message(ShowInTimeline(self._rows[event.cursor_row]))
        elif event.data_table.id == "step-table" and event.cursor_row < len(self._step_rows):
            self.post_message(ShowInTimeline(self._step_rows[event.cursor_row]))
        elif event.data_table.id == "straggler-table":
            # the collective it arrived last to that made the others wait longest (the first of equals), from the
            # instances' columns, not a view of each (a key would wait for them all)
            import numpy as np

            s = self.store.analysis.stragglers[event.cursor_row]
            ct = self.store.analysis.collectives
            row = ct.culprit_rows(np.where(ct.column("last_arrival") == s.rank, s.rank, -1))  # (-1: not in it)
            late = np.flatnonzero(row >= 0)
            if len(late):
                self.post_message(ShowInTimeline(int(row[late[np.argmax(ct.wait_totals()[late])]])))


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def _of(shown: int, total: int) -> str:
    """' (the first 2,000 of 175,000)' where a table holds only the worst rows."""
    return f" (the first {shown:,} of {total:,})" if shown < total else ""


def _heat(v: float, vmax: float) -> str:
    if vmax <= 0 or v <= 0:
        return "#202020"
    f = min(1.0, v / vmax)
    return "#%02x%02x%02x" % (int(40 + 215 * f), int(40 + 120 * f * (1 - f) * 2), int(90 * (1 - f)))


class LinksView(VerticalScroll):
    """The P2P communication matrix (src × dst: bytes, GB/s) as a heat map, and a chart per link."""

    DEFAULT_CSS = """
    LinksView { height: 1fr; }
    LinksView Static { height: auto; padding: 0 1; }
    LinksView PlotChart { height: 16; }
    """

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store

    def compose(self) -> ComposeResult:
        links = self.store.analysis.links
        if not links:
            yield Static("No point-to-point traffic (send/recv) in this trace.")
            return
        yield Static(self.matrix())
        yield PlotChart(self._draw)

    def matrix(self):
        links = self.store.analysis.links
        ranks = sorted({l.src for l in links} | {l.dst for l in links})
        by = {(l.src, l.dst): l for l in links}
        bmax = max(l.bytes for l in links)
        compact = len(ranks) > 12
        table = Table(box=None, padding=(0, 1 if not compact else 0))
        table.add_column("src\\dst", style="bold")
        for r in ranks:
            table.add_column(str(r) if not compact else str(r % 100).rjust(2), justify="center")
        for s in ranks:
            cells = []
            for d in ranks:
                link = by.get((s, d))
                if link is None:
                    cells.append(Text("  " if compact else "·", style="#404040"))
                    continue
                bg = _heat(link.bytes, bmax)
                if compact:
                    cells.append(Text("  ", style=f"on {bg}"))
                else:
                    gb = fmt_gbps(link.gbps) if link.gbps else "—"
                    cells.append(Text(f"{fmt_bytes_short(link.bytes)}\n{gb}", style=f"bold on {bg}"))
            table.add_row(f"r{s}", *cells)
        # the title above the table, not as its title: a table of two ranks would wrap it into three lines
        return Group(Text("P2P bytes and bandwidth, src (rows) → dst (columns); hotter is more bytes", style="italic"),
                     table)

    def _draw(self, fig) -> None:
        links = sorted(self.store.analysis.links, key=lambda l: -(l.gbps or 0))[:24]
        labels = [f"{l.src}>{l.dst}" for l in links]
        unit, factor = gbps_unit(links[0].gbps or 0)  # the fastest link's unit for all
        fig.draw(fig.bar(labels, [(l.gbps or 0) * factor for l in links]))
        fig.title(f"{unit} per link (fastest first)")


class ChartsView(Vertical):
    """Bandwidth against message size per op (with the α-β model) and the durations of the playhead's op."""

    DEFAULT_CSS = """
    ChartsView { height: 1fr; }
    ChartsView PlotChart { height: 1fr; }
    """

    playhead: reactive[int] = reactive(-1)
    """Event row of the replay playhead: the histogram shows its op."""

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store

    def compose(self) -> ComposeResult:
        yield PlotChart(self._draw_bw, id="bw-chart")
        yield PlotChart(self._draw_hist, id="hist-chart")

    def watch_playhead(self, old: int, new: int) -> None:
        t = self.store.table
        if not self.is_mounted or (old >= 0 and new >= 0 and t.op[old] == t.op[new]):
            return
        for chart in self.query("#hist-chart"):
            chart.replot()

    def _draw_bw(self, fig) -> None:
        # one point per (op, message size): the median over the collectives of that size, so a million-event trace
        # plots as quickly as a small one; from the instances' columns (not a view of each)
        import numpy as np

        ct = self.store.analysis.collectives
        busbw, dur, model_ns = ct.column("busbw_gbps"), ct.column("duration_ns"), ct.column("model_ns")
        measured = ~np.isnan(busbw) & (busbw != 0) & (ct.column("bytes") > 0)
        by_size = {(ct.op[int(g[0])], ct.bytes[int(g[0])]): g for g in ct.groups_by(("op", "bytes"), measured)}
        if not by_size:
            fig.title("no collective with a measured bandwidth")
            return
        ops = sorted({op for op, _ in by_size})
        for op in ops:
            sizes = sorted(b for o, b in by_size if o == op)
            meas = [statistics.median(busbw[by_size[(op, b)]].tolist()) for b in sizes]
            sig = fig.signal(sizes, meas, marker="●")
            sig.label(op)
            fig.draw(sig)
            model = []
            for b in sizes:
                g = by_size[(op, b)]
                g = g[~np.isnan(model_ns[g]) & (model_ns[g] != 0) & (dur[g] != NULL) & (dur[g] != 0)]
                ms = (busbw[g] * dur[g] / model_ns[g]).tolist()
                if ms:
                    model.append((b, statistics.median(ms)))
            if len(model) >= 2:
                fit = fig.signal([m[0] for m in model], [m[1] for m in model])
                fit.lines()
                fit.label(f"{op} α-β")
                fig.draw(fit)
        fig.ruler(0).scale("log")
        fig.title("busbw (GB/s) against message size (bytes): measured (median per size) and the α-β model")

    def _draw_hist(self, fig) -> None:
        t = self.store.table
        op = t.op[self.playhead] if self.playhead >= 0 else None
        n = len(t)
        step = max(1, n // 200_000)  # a sample of a huge trace draws the same histogram
        ops, starts, ends = t.op, t.start_ns, t.end_ns
        durs = [ends[i] - starts[i] for i in range(0, n, step) if ends[i] >= 0 and (op is None or ops[i] == op)]
        if not durs:
            fig.title("no finished event")
            return
        unit, factor = ns_unit(max(durs))
        durs = [d * factor for d in durs]
        lo, hi = min(durs), max(durs)
        bins = 30
        fig.draw(fig.hist(durs, bins=bins))
        if hi > lo:
            # the axis from the shortest to the longest, plainly labelled (plotext pads it below zero and
            # labels it 6.6e3)
            ticks = [lo + (hi - lo) * k / 4 for k in range(5)]
            half_bin = (hi - lo) / bins / 2  # a bar stands centred on its bin: keep the first and last ones whole
            fig.ruler(0).lim(lo - half_bin, hi + half_bin)  # labelled from lo: no tick below zero
            fig.ruler(0).ticks(ticks, [f"{v:.3g}" for v in ticks])
        sampled = f", 1 in {step} sampled" if step > 1 else ""
        fig.title(f"durations of {op or 'all events'} ({unit}), {len(durs)} events{sampled}")


class ProblemsView(Vertical):
    """The report's problems (mismatches, deaths, hangs, errors, non-finite values, divergences, unmatched
    messages, clock problems), under what the input lost, as the report says it first; enter jumps there."""

    DEFAULT_CSS = """
    ProblemsView { height: 1fr; }
    ProblemsView Static { height: auto; padding: 0 1; }
    ProblemsView OptionList { height: 1fr; }
    """

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store

    def compose(self) -> ComposeResult:
        t = self.store.table
        if t.warnings:
            head = t.damage_line() or "warnings about the input:"
            shown = [f"\n  {w}" for w in t.warnings[:5]]
            more = (f"\n  … and {len(t.warnings) - 5} more (disttrace report lists them all)"
                    if len(t.warnings) > 5 else "")
            yield Static(Text.assemble((head, "bold yellow"), *shown, more), id="input-warnings")
        problems = self.store.analysis.problems
        if not problems:
            yield Static("No problems found: no mismatch, dead rank, hang, error, non-finite value, divergence, "
                         "unmatched message or clock violation.")
            return
        yield Static(f"{len(problems)} problem(s), worst first. enter: show it in the timeline")
        options = []
        for p in problems[:MAX_ROWS]:
            where = f"{p.op}, group_seq {p.group_seq}" if p.op and p.group_seq is not None else (p.op or "")
            options.append(Text.assemble((f"{p.kind.upper():<11}", "bold red"), (f"{where}\n", "bold"),
                                         (p.message, ""), "\n"))
        yield OptionList(*options, id="problem-list")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        p = self.store.analysis.problems[event.option_index]
        if p.events:
            self.post_message(ShowInTimeline(p.events[0]))
        elif p.time_ns is not None:
            self.post_message(ShowInTimeline(row_at_time(self.store, p.time_ns)))
