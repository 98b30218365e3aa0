"""The Memory tab: each rank's bytes held over the run (`disttrace run --memory`) on the trace's timeline with the
steps' starts and the chosen step marked and the run's peak with its op, the chosen step's breakdown by kind per
rank beside the formula's prediction, and the formula (tui/model/memory.py works them out). [ and ] (the screen's
keys, as on the Ring and Pipeline tabs) pick the previous or next step for the breakdown. The screen shows the tab
only for a trace with memory samples; its key on another says how to get them (NONE_HERE)."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.containers import Container, Vertical, VerticalScroll
from textual.widgets import Static

from ..model.memory import COLUMNS, NONE_HERE, MemoryFigures, memory_of, memory_view, other_step
from ..model.store import TraceStore
from .plot import PlotChart


class MemoryView(Vertical):
    """Each rank's memory over the run, its peak, and the chosen step's breakdown beside the formula."""

    DEFAULT_CSS = """
    MemoryView { height: 1fr; }
    MemoryView #memory-lines { height: auto; padding: 0 1; }
    MemoryView PlotChart { height: 1fr; min-height: 7; }
    MemoryView #memory-lower { height: auto; layout: vertical; }
    MemoryView #memory-lower.beside { layout: horizontal; }
    MemoryView #memory-breakdown { width: auto; height: auto; padding: 0 1; }
    MemoryView #memory-formula { height: auto; max-height: 3; padding: 0 1; }
    MemoryView #memory-lower.beside #memory-formula { width: 1fr; max-height: 100%; border-left: solid $primary-darken-2; }
    MemoryView #memory-formula Static { height: auto; }
    """
    BESIDE = 110
    """From this width the formula is beside the breakdown, not under it."""

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.figures: MemoryFigures | None = None
        self.memory = None  # (the memory samples, the memory analysis) once composed

    def compose(self) -> ComposeResult:
        got = memory_of(self.store)
        if got is None:  # (the screen shows the tab only where there are memory samples)
            yield Static(NONE_HERE, id="memory-lines")
            return
        self.memory = got
        self.figures = f = memory_view(*got, self.store.t0)
        yield Static("\n".join(f.lines), id="memory-lines", markup=False)
        yield PlotChart(self._draw, id="memory-chart")
        with Container(id="memory-lower"):
            yield Static(self._table(), id="memory-breakdown")
            with VerticalScroll(id="memory-formula", can_focus=False):
                yield Static("\n".join(f.formula), id="memory-formula-text", markup=False)

    def pick(self, direction: int) -> str | None:
        """The breakdown of the previous (-1) or next (1) step: its mark on the chart, the table and the note on
        its peak follow. What to tell where there is none."""
        if self.memory is None:
            return NONE_HERE
        trace, report = self.memory
        picked = other_step(trace, report, self.store.analysis, direction)
        if picked is None:
            return f"this is the {'last' if direction > 0 else 'first'} step"
        self.memory = (trace, picked)
        self.figures = memory_view(trace, picked, self.store.t0)
        self.query_one("#memory-breakdown", Static).update(self._table())
        self.query_one("#memory-formula-text", Static).update("\n".join(self.figures.formula))
        self.query_one(PlotChart).replot()
        return None

    def on_resize(self) -> None:
        if self.figures is not None:
            self.query_one("#memory-lower").set_class(self.size.width >= self.BESIDE, "beside")

    def _table(self) -> Table:
        f = self.figures
        table = Table(box=None, padding=(0, 0, 0, 1), pad_edge=False, header_style="bold")
        table.add_column(f.breakdown_title)
        for name in COLUMNS:
            table.add_column(name, justify="right")
        for name, values in f.breakdown:
            table.add_row(name, *values, style="dim" if name == "formula" else None)
        return table

    def _draw(self, fig) -> None:
        c = self.figures.chart
        for rank, (xs, ys) in c.series.items():
            if not xs:
                continue
            line = fig.signal(xs, ys, marker="braille")
            line.lines()
            line.label(f"rank {rank}")
            fig.draw(line)
        top = c.top * 1.08  # (room above the peak for its mark)
        for x in c.starts:  # a step's start: a mark at the top and the bottom of the plot, not a line across it
            fig.draw(fig.signal([x, x], [0, top], marker="┬"))
        if c.chosen is not None:  # the chosen step's window, whose breakdown is below
            for x in c.chosen:
                edge = fig.signal([x, x], [0, top], marker="braille")
                edge.lines()
                fig.draw(edge)
        if c.peak is not None:
            fig.draw(fig.text(c.peak[0], c.peak[1], "▲"))
        fig.ruler(1).lim(0, top)
        if c.ticks:
            fig.ruler(0).ticks([x for x, _ in c.ticks], [label for _, label in c.ticks])
        fig.title(c.title)
