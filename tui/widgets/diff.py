"""The diff view (`disttrace view B --baseline A`): what changed from run A to the run on screen, B, all
of it the analysis' (tracer/analysis/diff/compare.py): whether B's step moved beyond the noise, the explanations ranked
(B's steps replayed with one thing set to A's), the differences in structure, and B's steps and ops that moved beyond
their noise (enter: show it in the timeline; put in one list, largest first, by tui/model/moved.py). The
detail pane shows A's figures beside B's (detail.py).

The baseline's comparison is made before the viewer starts (tui/cli.py) and held by tui/model/baseline.py; it is
B's only while the store on screen holds the same trace it was made of (`baseline_of`): another run (R) has none.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from disttrace.tracer.analysis import Diff, signed, verdict
from disttrace.tracer.units import fmt_ns_short

from ..model import MAX_ROWS
from ..model.baseline import baseline_of, signed_short
from ..model.moved import moved
from ..model.store import TraceStore
from .messages import ShowInTimeline
from .palette import OP_COLORS

__all__ = ["DiffView"]


class DiffView(Vertical):
    """The comparison with the baseline: the verdict, the explanations, the structure, what moved."""

    DEFAULT_CSS = """
    DiffView { height: 1fr; overflow-y: auto; scrollbar-size-vertical: 1; }
    DiffView > Static { height: auto; padding: 0 1; }
    DiffView #diff-head { color: $text; }
    DiffView #diff-moved { height: 1fr; min-height: 5; }
    """

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self._rows: list[int] = []  # the moved table's event rows, by table row

    def compose(self) -> ComposeResult:
        d = baseline_of(self.store)
        if d is None:
            yield Static("No baseline to compare with: `disttrace view B --baseline A` shows here what changed from "
                         "run A to B and why (`disttrace diff A B` says it as text).", id="diff-head")
            return
        style = "bold red" if d.slower else "bold"
        yield Static(Text.assemble(("Baseline A: ", "bold"), d.a_label, "\n", (verdict(d), style)), id="diff-head")
        for n in d.notes:
            yield Static(Text(f"note: {n}", style="yellow"))
        yield Static(self._why(d), id="diff-why")
        if d.structure:
            yield Static(self._structure(d), id="diff-structure")
        else:
            yield Static("Structure: the same ops, sizes, groups and order in every step compared.")
        yield Static("B's steps and ops that moved beyond their noise, the largest first; enter: show it in the "
                     "timeline", id="diff-moved-title")
        yield self._moved_table(d)

    @staticmethod
    def _structure(d: Diff, most: int = 20):
        """The differences in structure, a row each, a detail that wraps going on under its own start."""
        from rich.table import Table

        grid = Table.grid(padding=(0, 1))
        grid.title, grid.title_justify, grid.title_style = "Structure:", "left", "bold"
        grid.add_column(style="bold #ff8c5a", no_wrap=True)
        grid.add_column(overflow="fold")
        for c in d.structure[:most]:
            grid.add_row(c.kind, c.detail)
        if len(d.structure) > most:
            grid.add_row("", f"… and {len(d.structure) - most} more (disttrace diff --json lists all)")
        return grid

    @staticmethod
    def _why(d: Diff):
        """The explanations, ranked, and the unexplained rest, as rows that wrap."""
        from rich.table import Table

        if not d.matched:
            return Text("No steps both runs replay: nothing explained.")
        grid = Table.grid(padding=(0, 2))
        grid.title = f"Why {signed(d.mean_delta_ns)} a step (the mean): B's steps replayed with one thing set to A's"
        grid.title_justify, grid.title_style = "left", "bold"
        grid.add_column(justify="right", no_wrap=True)
        grid.add_column(overflow="fold")
        for e in d.explanations:
            grid.add_row(signed(e.delta_ns), e.what)
        grid.add_row(signed(d.unexplained_ns), "unexplained")
        return grid

    def _moved_table(self, d: Diff) -> DataTable:
        t = DataTable(id="diff-moved", cursor_type="row", zebra_stripes=True)
        t.add_columns("step", "rank", "what", "A", "B", "B - A")
        found = moved(d, self.store.table, self.store.analysis)
        for m in found[:MAX_ROWS]:
            what = "the step" if m.op is None else Text.assemble((m.op, OP_COLORS.get(m.op, "")), f" {m.site}")
            t.add_row(str(m.step), "" if m.rank is None else str(m.rank), what, fmt_ns_short(m.a_median_ns) + " med",
                      fmt_ns_short(m.b_ns), signed_short(m.delta_ns))
            self._rows.append(m.row)
        if not found:
            t.add_row("", "", "nothing moved beyond its noise", "", "", "")
        return t

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.data_table.id == "diff-moved" and event.cursor_row < len(self._rows):
            self.post_message(ShowInTimeline(self._rows[event.cursor_row]))
