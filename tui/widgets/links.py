"""The Links tab: the P2P communication matrix (src × dst: bytes, GB/s) as a heat map, and a chart per link. The
links are the analysis' (tracer/analysis/comms/bandwidth.py), laid out by tui/model/links.py."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from disttrace.tracer.units import fmt_bytes_short, fmt_gbps, gbps_unit

from ..model.links import fastest, matrix
from ..model.store import TraceStore
from .plot import PlotChart


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
        m = matrix(self.store.analysis.links)
        compact = len(m.ranks) > 12
        table = Table(box=None, padding=(0, 1 if not compact else 0))
        table.add_column("src\\dst", style="bold")
        for r in m.ranks:
            table.add_column(str(r) if not compact else str(r % 100).rjust(2), justify="center")
        for s in m.ranks:
            cells = []
            for d in m.ranks:
                link = m.by.get((s, d))
                if link is None:
                    cells.append(Text("  " if compact else "·", style="#404040"))
                    continue
                bg = _heat(link.bytes, m.most_bytes)
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
        links = fastest(self.store.analysis.links)
        labels = [f"{l.src}>{l.dst}" for l in links]
        unit, factor = gbps_unit(links[0].gbps or 0)  # the fastest link's unit for all
        fig.draw(fig.bar(labels, [(l.gbps or 0) * factor for l in links]))
        fig.title(f"{unit} per link (fastest first)")
