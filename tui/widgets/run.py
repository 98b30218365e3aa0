"""The Run tab: the whole run over the black box's aggregates, each rank's time in collectives per window as a
chart and the whole run's straggler in a sentence (tui/model/run.py works them out). The screen shows the tab only
for a trace with aggregates; its key on another says how to get them (NONE_HERE)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from ..model.run import NONE_HERE, RunChart, run_chart, run_of
from ..model.store import TraceStore
from .plot import PlotChart



class RunView(Vertical):
    """Each rank's time in collectives per window over the whole run, and its straggler."""

    DEFAULT_CSS = """
    RunView { height: 1fr; }
    RunView #run-sentence { height: auto; padding: 0 1; text-style: bold; }
    RunView #run-lines { height: auto; padding: 0 1; color: $text-muted; }
    RunView PlotChart { height: 1fr; }
    """

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.chart: RunChart | None = None

    def compose(self) -> ComposeResult:
        whole = run_of(getattr(self.app, "paths", []), self.store.table.run or None)
        if whole is None:  # (the screen shows the tab only where there are aggregates)
            yield Static(NONE_HERE, id="run-sentence")
            return
        self.chart = run_chart(whole)
        yield Static(self.chart.sentence, id="run-sentence", markup=False)
        yield Static("\n".join(self.chart.lines), id="run-lines", markup=False)
        yield PlotChart(self._draw, id="run-chart")

    def _draw(self, fig) -> None:
        c = self.chart
        for rank, ys in c.series.items():
            have = [(x, y) for x, y in zip(c.xs, ys) if y is not None]
            if not have:
                continue
            line = fig.signal([x for x, _ in have], [y for _, y in have], marker="braille")
            line.lines()
            line.label(f"rank {rank}")
            fig.draw(line)
        if c.ticks:
            fig.ruler(0).ticks([x for x, _ in c.ticks], [label for _, label in c.ticks])
        fig.title(f"{c.title}, against {c.x_label}")
