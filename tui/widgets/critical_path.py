"""The critical path view: the path of the step at the playhead across ranks (its parts in time order, marked on a
timeline of every rank), the root causes of the steady steps' waiting (the ranks' start-up apart) and the
what-ifs. All of it is the analysis'
(tracer/analysis/causal/critical_path.py); this view only lays it out and finds the events to show."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from disttrace.tracer.analysis import attribution_summary, startup_sentence, what_if_sentence
from disttrace.tracer.analysis.core.results import CriticalPath, PathPart
from disttrace.tracer.units import fmt_list, fmt_ns, fmt_ns_short

from ..model.critical import shares, step_paths
from ..model.store import TraceStore
from .messages import ShowInTimeline
from .palette import OP_COLORS, PATH
from .timeline import Ruler, Timeline

MAX_ROWS = 2000  # rows of a table: the timeline has the rest

KIND_STYLES = {"compute": "#c0c0c0", "wait": "#8a8a8a"}


def _ranks(ranks: list[int]) -> str:
    return fmt_list(ranks, 8, more=" … ({n})")


def _hops(parts: list[PathPart]) -> str:
    """The ranks the path goes through, in order: 'r1 → r0 → r1'."""
    out: list[int] = []
    for p in parts:
        if not out or out[-1] != p.rank:
            out.append(p.rank)
    if len(out) > 12:
        return " → ".join(f"r{r}" for r in out[:12]) + f" → … ({len(out) - 1} hops)"
    return " → ".join(f"r{r}" for r in out)


def short_span(span: str) -> str:
    """A compute span in a column: its second site without the file when both sites are in the same file
    ('train.py:40 → :52'); an op as it is."""
    a, arrow, b = span.partition(" → ")
    if arrow and ":" in a and ":" in b:
        fa, _, _ = a.rpartition(":")
        fb, _, line = b.rpartition(":")
        if fa == fb:
            return f"{a} → :{line}"
    return span


def _kind(part: PathPart) -> Text:
    op = (part.op or "").split(" ")[0]
    return Text(part.kind, style=KIND_STYLES.get(part.kind, OP_COLORS.get(op, "")))


class CriticalPathView(Vertical):
    """The step at the playhead: its critical path's length and parts (rank, kind, span or op, time, share), on a
    timeline of every rank with the path marked; the root causes of the steady steps' waiting, the ranks'
    start-up apart; what the straggler on time would save."""

    # Each table keeps room for its header and a few rows (TABLE_MIN); where the terminal is too small for both
    # tables, the what-ifs and the timeline (80×24: the causes' table showed its header only), the view scrolls
    # (the wheel; tab brings the next table into view), a scrollbar at its right edge.
    DEFAULT_CSS = """
    CriticalPathView { height: 1fr; overflow-y: auto; scrollbar-size-vertical: 1; }
    CriticalPathView #cp-head { height: auto; padding: 0 1; color: $text; }
    CriticalPathView Timeline { height: auto; max-height: 30%; }
    CriticalPathView > Horizontal { height: 1fr; min-height: 8; }
    CriticalPathView #cp-parts { width: 1fr; }
    CriticalPathView #cp-causes { width: 1fr; }
    CriticalPathView.-narrow > Horizontal { layout: vertical; height: auto; }
    CriticalPathView.-narrow #cp-parts { height: auto; }
    CriticalPathView.-narrow #cp-causes { height: auto; }
    CriticalPathView Vertical > Static { height: auto; padding: 0 1; color: $text-muted; }
    CriticalPathView #what-if { color: $text; }
    CriticalPathView DataTable { height: 1fr; min-height: 6; }
    CriticalPathView.-narrow DataTable { height: auto; max-height: 12; }
    """

    NARROW = 130
    """Below this width the causes go under the path's parts, not beside them (each table needs about 70 cells
    for its span names)."""

    playhead: reactive[int] = reactive(-1)
    """Event row of the replay playhead: the view shows its step."""
    selection: reactive[int] = reactive(-1)
    """Selected event row (marked on the view's timeline)."""
    zoom: reactive[int] = reactive(0)
    """Zoom level of the timeline (the same window as the main timeline)."""
    offset_ns: reactive[int] = reactive(0)
    """Window start of the timeline."""
    path_step: reactive[int] = reactive(-1)
    """Step whose path the timelines mark (-1: the marks are off, x)."""

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.step: int | None = None  # the step shown
        self._parts: list[PathPart] = []

    def compose(self) -> ComposeResult:
        a = self.store.analysis
        if not a.critical_path:
            yield Static("No critical path: the analysis found no finished op to walk back from.", id="cp-head")
            return
        yield Static(id="cp-head")
        yield Ruler(self.store, timeline := Timeline(self.store)).data_bind(CriticalPathView.zoom,
                                                                            CriticalPathView.offset_ns)
        yield timeline.data_bind(CriticalPathView.playhead, CriticalPathView.selection, CriticalPathView.zoom,
                                 CriticalPathView.offset_ns, CriticalPathView.path_step)
        with Horizontal():
            with Vertical(id="cp-parts"):
                yield Static("", id="parts-title")
                t = DataTable(id="path-table", cursor_type="row", zebra_stripes=True)
                t.add_columns("rank", "kind", "span or op", "time", "share")
                yield t
            with Vertical(id="cp-causes"):
                yield Static(f"Root causes of the waiting, {'steady steps' if a.steps else 'whole run'} (what ran on "
                             "the path meanwhile)")
                yield self._causes_table()
                per = "step" if a.steps else "run"
                lines = ([startup] if (startup := startup_sentence(a)) else []) + attribution_summary(a, per) + [
                    what_if_sentence(w, per) for w in a.what_if]
                if lines:
                    yield Static("\n".join(lines), id="what-if")

    def _causes_table(self) -> DataTable:
        t = DataTable(id="cause-table", cursor_type="row", zebra_stripes=True)
        t.add_columns("rank", "kind", "span or op", "caused", "delayed ranks")
        steady = [c for c in self.store.analysis.causes if not c.startup]  # (start-up: said apart, below)
        for c in steady[:MAX_ROWS]:
            t.add_row(f"r{c.rank}", Text(c.kind, style=KIND_STYLES.get(c.kind, OP_COLORS.get(c.span.split(" ")[0],
                                                                                             ""))),
                      short_span(c.span), fmt_ns_short(c.caused_wait_ns), _ranks(c.ranks_delayed))
        if not steady:
            t.add_row("", "", "no rank waited for another" + (" in the steady steps" if self.store.analysis.steps
                                                              else ""), "", "")
        return t

    def on_mount(self) -> None:
        self._show_step()

    def on_resize(self, event) -> None:
        self.set_class(event.size.width < self.NARROW, "-narrow")

    def watch_playhead(self) -> None:
        if self.is_mounted:
            self._show_step()

    def watch_path_step(self) -> None:
        if self.is_mounted and self.step is not None:
            self.query_one("#cp-head", Static).update(self._head(self.step))

    def _show_step(self) -> None:
        """The path of the playhead's step in the table and the head line (only when the step changed)."""
        sp = step_paths(self.store)
        step = sp.step_at(self.playhead)
        if step is None or step == self.step:
            return
        self.step = step
        path: CriticalPath = sp.paths[step]
        self._parts = path.parts[:MAX_ROWS]
        self.query_one("#cp-head", Static).update(self._head(step))
        more = f" (the first {MAX_ROWS} of {len(path.parts)})" if len(path.parts) > MAX_ROWS else ""
        what = f"step {step}" if sp.by_step else "the whole trace (no steps found)"
        self.query_one("#parts-title", Static).update(
            f"Path of {what} in time order{more}; enter: show in the timeline")
        table = self.query_one("#path-table", DataTable)
        table.clear()
        length = max(1, path.length_ns)
        for part in self._parts:
            table.add_row(f"r{part.rank}", _kind(part), short_span(part.span or part.op or ""), fmt_ns_short(part.ns),
                          f"{100 * part.ns / length:.0f}%")

    def _head(self, step: int) -> Text:
        sp = step_paths(self.store)
        path = sp.paths[step]
        share = shares(path)
        if sp.by_step:
            s = sp.steps[step]
            where = (f"Step {step}", f" ({sp.position(step)} of {len(sp.order)}"
                     f"{', warm-up' if s.warmup else ''}{'' if s.late_rank is None else f', late: r{s.late_rank}'})")
        else:
            where = ("Whole trace", " (no steps found)")
        return Text.assemble(
            (where[0], "bold"), where[1], ": critical path ", (fmt_ns(path.length_ns), "bold"), " through ",
            (_hops(path.parts), "bold"), "\n",
            f"{share['compute']:.0f}% compute, {share['comm']:.0f}% comm, {share['wait']:.0f}% wait.  ",
            ("{ }", "bold"), ": step  ", ("enter", "bold"), ": show a part  ", ("x", "bold"), ": marks ",
            ("━", PATH), " on" if self.path_step >= 0 else " off")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.data_table.id == "path-table" and event.cursor_row < len(self._parts):
            row = step_paths(self.store).part_row(self._parts[event.cursor_row])
            if row is not None:
                self.post_message(ShowInTimeline(row))
