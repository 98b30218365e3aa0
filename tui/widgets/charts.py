"""The Charts tab: bandwidth against message size per op (with the α-β model) and the durations of the playhead's
op. The figures come from tui/model/charts.py (medians of the analysis' busbw and model times, a sample of the
durations); this draws them with plotext (plot.py)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive

from ..model.charts import bandwidth_lines, durations_of
from ..model.store import TraceStore
from .plot import PlotChart

BINS = 30
"""Bars of the durations' histogram."""


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
        lines = bandwidth_lines(self.store.analysis.collectives)
        if not lines:
            fig.title("no collective with a measured bandwidth")
            return
        for line in lines:
            sig = fig.signal(line.sizes, line.measured, marker="●")
            sig.label(line.op)
            fig.draw(sig)
            if len(line.model) >= 2:
                fit = fig.signal([m[0] for m in line.model], [m[1] for m in line.model])
                fit.lines()
                fit.label(f"{line.op} α-β")
                fig.draw(fit)
        fig.ruler(0).scale("log")
        fig.title("busbw (GB/s) against message size (bytes): measured (median per size) and the α-β model")

    def _draw_hist(self, fig) -> None:
        t = self.store.table
        d = durations_of(t, t.op[self.playhead] if self.playhead >= 0 else None)
        if d is None:
            fig.title("no finished event")
            return
        fig.draw(fig.hist(d.values, bins=BINS))
        axis = d.axis(BINS)
        if axis is not None:
            # the axis from the shortest to the longest, plainly labelled (plotext pads it below zero and labels it
            # 6.6e3)
            lim, ticks = axis
            fig.ruler(0).lim(*lim)  # labelled from the shortest: no tick below zero
            fig.ruler(0).ticks(ticks, [f"{v:.3g}" for v in ticks])
        sampled = f", 1 in {d.step} sampled" if d.step > 1 else ""
        fig.title(f"durations of {d.op or 'all events'} ({d.unit}), {len(d.values)} events{sampled}")
