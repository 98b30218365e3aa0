"""The Waits tab: who waited how long for whom. The verdict, the waits, the stragglers and each step's late rank
are the analysis' (its sentences, tracer/analysis/waits/wait_states.py, waits/stragglers.py, waits/steps.py); the rows shown for them come
from tui/model/waits.py; this lays them out."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Static

from disttrace.tracer.analysis import attribution_summary, straggler_verdict
from disttrace.tracer.units import fmt_ns_short

from ..model import MAX_ROWS
from ..model.store import TraceStore
from ..model.waits import held_longest, most_waited, step_rows
from .messages import ShowInTimeline
from .palette import OP_COLORS


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
                table, waited = self._collectives_table()
                shown = len(self._rows)
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
        targets = step_rows(self.store.analysis, self.store.table)
        for s in self.store.analysis.steps[:MAX_ROWS]:
            late = s.late_rank
            t.add_row(f"{s.index}{' w' if s.warmup else ''}", fmt_ns_short(s.end_ns - s.start_ns),
                      "—" if late is None else f"r{late}",
                      "" if late is None else fmt_ns_short(s.caused_ns.get(late, 0)))
            self._step_rows.append(targets.get(s.index, 0))
        return t

    def _collectives_table(self) -> tuple[DataTable, int]:
        """The collectives by the waiting they held, named by group_seq (as the event list and detail pane do), and
        how many had a rank waiting."""
        t = DataTable(id="wait-table", cursor_type="row", zebra_stripes=True)
        t.add_columns("op", "group", "group_seq", "total wait", "skew", "last", "who waited longest")
        colls, waited = most_waited(self.store.analysis, MAX_ROWS)
        groups = self.store.table.groups
        for c in colls:
            t.add_row(Text(c.op, style=OP_COLORS.get(c.op, "")), groups[c.gid].name, str(c.group_seq),
                      fmt_ns_short(c.total_wait_ns), fmt_ns_short(c.skew_ns),
                      f"r{c.last_arrival}" if c.last_arrival is not None else "—",
                      f"r{c.longest} {fmt_ns_short(c.longest_ns)}")
            self._rows.append(c.row)
        if not colls:
            t.add_row("no collective had any rank waiting", "", "", "", "", "", "")
        return t, waited

    def on_resize(self, event) -> None:
        self.set_class(event.size.width < self.NARROW, "-narrow")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.data_table.id == "wait-table" and event.cursor_row < len(self._rows):
            self.post_message(ShowInTimeline(self._rows[event.cursor_row]))
        elif event.data_table.id == "step-table" and event.cursor_row < len(self._step_rows):
            self.post_message(ShowInTimeline(self._step_rows[event.cursor_row]))
        elif event.data_table.id == "straggler-table":
            # the collective it arrived last to that made the others wait longest
            row = held_longest(self.store.analysis, self.store.analysis.stragglers[event.cursor_row].rank)
            if row is not None:
                self.post_message(ShowInTimeline(row))


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def _of(shown: int, total: int) -> str:
    """' (the first 2,000 of 175,000)' where a table holds only the worst rows."""
    return f" (the first {shown:,} of {total:,})" if shown < total else ""
