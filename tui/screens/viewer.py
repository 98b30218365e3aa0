"""The viewer screen: owns the view state (playhead, selection, zoom, window, focused rank) that every widget
binds to, turns keys into changes of that state, and hears the widgets' messages. Attributes down, messages up."""

from __future__ import annotations

import threading
from importlib import import_module
from dataclasses import dataclass
from typing import Callable

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive, var
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Static, TabbedContent, TabPane

from disttrace.tracer.analysis import describe
from disttrace.tracer.units import fmt_ns_short

from ..loading import row_of, settle
from ..model import viewport
from ..model.critical import step_paths
from ..model.replay import SPEEDS, parse_goto, search, step_collective, step_event
from ..model import memory
from ..model.run import NONE_HERE, has_run
from ..model.store import TraceStore
from ..widgets.detail import DetailPane, NarrationPane
from ..widgets.event_list import EventList
from ..widgets.footer import ViewerFooter
from ..widgets.header import ViewerHeader
from ..widgets.messages import AnalysisReady, EventPicked, LoadProgress, ShowInTimeline, ViewChanged
from ..widgets.timeline import Ruler, Timeline
from .help import HelpScreen
from .prompt import Prompt


@dataclass(frozen=True)
class View:
    """One tab of the viewer: a new view is its widget (tui/widgets) and one line in VIEWS."""

    id: str
    """The tab's id, the name `action_view` takes."""
    key: str
    """The key that brings it to the front, also shown before its title on the tab."""
    title: str
    """The tab's title."""
    description: str
    """What `?` and the command palette say of the key."""
    widget: str | None = None
    """The view's widget, "module:Class" of tui/widgets, built as Class(store) once the analysis is there and its
    tab is first shown, its module imported then (the viewer's start imports none of the views: the diff's pulls
    the analysis engine in); None for the timeline, the screen's own."""
    binds: tuple[str, ...] = ()
    """The screen's state the view shows (attributes down): names of ViewerScreen's vars, bound to its reactives
    of the same names."""
    narrated: bool = False
    """Whether the view shows a demo's narration too (built as widget(store, narration=...))."""
    shown: Callable[[list[str]], bool] | None = None
    """Whether the tab is there for the trace of these paths (None: always); `absent` says why not."""
    absent: str = ""

    def widget_class(self) -> type[Widget]:
        module, _, name = self.widget.partition(":")
        return getattr(import_module(f"..widgets.{module}", __package__), name)


VIEWS = (
    View("timeline", "1", "Timeline", "timeline"),
    View("ring", "2", "Ring", "ring view", "ring:RingView", ("playhead", "ring_step")),
    View("pipeline", "3", "Pipeline", "pipeline view", "pipeline:PipelineView", ("playhead",), narrated=True),
    View("waits", "4", "Waits", "waits view", "waits:WaitsView"),
    View("links", "5", "Links", "links view", "links:LinksView"),
    View("charts", "6", "Charts", "charts view", "charts:ChartsView", ("playhead",)),
    View("problems", "7", "Problems", "problems view", "problems:ProblemsView"),
    View("critical", "8", "Path", "critical path view", "critical_path:CriticalPathView",
         ("playhead", "selection", "zoom", "offset_ns", "path_step")),
    View("diff", "9", "Diff", "diff view (view B --baseline A)", "diff:DiffView"),
    View("run", "0", "Run", "whole run view (a black-box trace's aggregates)", "run:RunView", shown=has_run,
         absent=NONE_HERE),
    View("memory", "M", "Memory", "memory view (a trace recorded with --memory)", "memory:MemoryView",
         shown=memory.has_memory, absent=memory.NONE_HERE),
)
VIEW = {v.id: v for v in VIEWS}


class PlayheadLine(Static):
    """One sentence on what happened at the playhead (the analysis' describe())."""

    DEFAULT_CSS = """
    PlayheadLine { height: auto; max-height: 3; background: $boost; padding: 0 1; }
    """

    playhead: reactive[int] = reactive(-2)
    """Event row of the replay playhead."""
    playing: reactive[bool] = reactive(False)
    """Whether the replay is running."""
    speed: reactive[int] = reactive(5)
    """Replay speed, events per second."""
    analysis_label: reactive[str] = reactive("")
    """Progress of the background analysis, "" when done."""

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store

    def render(self):
        row = self.playhead
        state = f"▶ {self.speed}/s" if self.playing else "❚❚"
        if self.analysis_label:
            state += f"  [{self.analysis_label}]"
        if row < 0:
            return f"{state}  before the first event — n: next event, N: next collective, space: play, ?: help"
        t = self.store.table.start_ns[row] - self.store.t0
        # the event's number as the list and the detail pane write it, and as `g` takes it: #0 is the first
        return (f"{state}  #{row} of {self.store.n_events} @{fmt_ns_short(t)}  "
                f"{describe(self.store.analysis, row)}")


class ViewerScreen(Screen):
    """Timeline, event list, detail, and the other views in tabs."""

    AUTO_FOCUS = ""  # nothing takes the keys on the timeline tab: they are the viewer's

    DEFAULT_CSS = """
    ViewerScreen #lower { height: 1fr; min-height: 6; }
    ViewerScreen #timeline Timeline { max-height: 60%; }
    ViewerScreen EventList { width: 1fr; }
        ViewerScreen #detail { width: 56; max-width: 45%; height: 1fr; border-left: solid $primary-darken-2; }
    ViewerScreen TabPane { padding: 0; }
    """

    BINDINGS = [
        Binding("n", "step(1)", "next", tooltip="next event"),
        Binding("p", "step(-1)", "prev", tooltip="previous event"),
        Binding("N", "step_collective(1)", "next coll.", tooltip="next collective"),
        Binding("P", "step_collective(-1)", "prev coll.", tooltip="previous collective"),
        Binding("space", "toggle_play", "play/pause", tooltip="play / pause the replay"),
        Binding("less_than_sign", "speed(-1)", "slower", show=False),
        Binding("greater_than_sign", "speed(1)", "faster", show=False),
        Binding("plus,equals_sign", "zoom(1)", "zoom in", show=False),
        Binding("minus", "zoom(-1)", "zoom out", show=False),
        Binding("left,h", "pan(-1)", "pan left", show=False),
        Binding("right,l", "pan(1)", "pan right", show=False),
        Binding("j,down", "rank(1)", "next rank", show=False),
        Binding("k,up", "rank(-1)", "previous rank", show=False),
        Binding("f", "fit", "whole trace", show=False),
        Binding("c", "center", "centre on the playhead", show=False),
        Binding("o", "other_rank(1)", "same collective, next rank", show=False),
        Binding("O", "other_rank(-1)", "same collective, previous rank", show=False),
        Binding("m", "match", "matching send/recv", show=False),
        Binding("enter", "play_here", "playhead to the selection", show=False),
        Binding("slash", "search", "search", tooltip="search events (op, api, site, rank=N)"),
        Binding("g", "goto", "go to", tooltip="go to a time or an event number"),
        *(Binding(v.key, f"view({v.id!r})", v.description, show=False) for v in VIEWS),
        Binding("left_square_bracket", "ring_step(-1)",
                "ring: previous step; pipeline: previous iteration; memory: previous step's breakdown", show=False),
        Binding("right_square_bracket", "ring_step(1)",
                "ring: next step; pipeline: next iteration; memory: next step's breakdown", show=False),
        Binding("left_curly_bracket", "train_step(-1)", "previous training step", show=False,
                tooltip="previous training step (the window shows all of it)"),
        Binding("right_curly_bracket", "train_step(1)", "next training step", show=False,
                tooltip="next training step (the window shows all of it)"),
        Binding("pagedown", "narration(1)", "narration: more", show=False,
                tooltip="a demo's narration: scroll it down a page"),
        Binding("pageup", "narration(-1)", "narration: back", show=False,
                tooltip="a demo's narration: scroll it up a page"),
        Binding("x", "toggle_path", "critical path marks", show=False,
                tooltip="mark the critical path of the playhead's step on the timeline (on once tab 8 is shown)"),
        Binding("question_mark", "help", "help"),
        Binding("q", "app.quit", "quit"),
    ]

    playhead: var[int] = var(-1, init=False)
    """Event row of the replay playhead; -1 is before the first event."""
    selection: var[int] = var(-1, init=False)
    """Event row shown in the detail pane (follows the playhead; clicks and o/m move it alone)."""
    zoom: var[int] = var(0, init=False)
    """Timeline zoom level: the window is span / 2**zoom."""
    offset_ns: var[int] = var(0, init=False)
    """Timeline window start, ns after the trace start."""
    focused_rank: var[int] = var(0, init=False)
    """Display index of the focused rank (j/k)."""
    playing: var[bool] = var(False, init=False)
    """Whether the replay is running."""
    speed: var[int] = var(5, init=False)
    """Replay speed in events per second."""
    ring_step: var[int] = var(-1, init=False)
    """Step shown in the ring view (-1: before the first step)."""
    show_path: var[bool] = var(False, init=False)
    """Whether the timelines mark the critical path of the playhead's step (x; showing the critical path view
    turns it on)."""
    path_step: var[int] = var(-1, init=False)
    """Step whose critical path the timelines mark: the playhead's while show_path is on, else -1."""
    analysis_label: var[str] = var("", init=False)
    """Progress of the analysis while it runs in the background, or of the read while the screen shows the trace's
    head ("" once done)."""

    def __init__(self, store: TraceStore, narration=None, start_row: int = 0, title: str = "",
                 head: float | None = None) -> None:
        super().__init__()
        self.store = store
        self.head = head  # the store is the trace's head, this fraction of its bytes, while the rest is read
        self.narration = narration
        self.start_row = start_row
        # a demo's narration may name the tab it is told on (the pipeline demo's: its schedule grid)
        self.initial_view = getattr(narration, "view", "") if getattr(narration, "view", "") in VIEW else "timeline"
        self.shown = threading.Event()  # set once on screen (the loading worker waits for it to analyse)
        self._timer: Timer | None = None
        self.title_text = title
        self.last_search = ""
        self.message = ""

    def compose(self) -> ComposeResult:
        s = self.store
        yield ViewerHeader(icon="◆")
        with TabbedContent(initial=VIEWS[0].id):
            for view in VIEWS:
                if view.shown is not None and not view.shown(getattr(self.app, "paths", [])):
                    continue
                with TabPane(f"{view.key} {view.title}", id=view.id):
                    if view.widget is None:
                        yield from self._compose_timeline()
                    else:  # each analysis view is built when its tab is first shown (_mount_view)
                        yield Static("" if s.analysed else "analysing the trace…", classes="pending")
        yield PlayheadLine(s).data_bind(ViewerScreen.playhead, ViewerScreen.playing, ViewerScreen.speed,
                                        ViewerScreen.analysis_label)
        yield ViewerFooter()

    def _compose_timeline(self) -> ComposeResult:
        """The timeline tab: the narration (for a demo), the ruler and timeline, the event list and the detail."""
        s = self.store
        with Vertical():
            if self.narration is not None:
                yield NarrationPane(s, self.narration).data_bind(ViewerScreen.playhead)
            timeline = Timeline(s).data_bind(ViewerScreen.zoom, ViewerScreen.offset_ns, ViewerScreen.playhead,
                                             ViewerScreen.selection, ViewerScreen.focused_rank,
                                             ViewerScreen.path_step)
            yield Ruler(s, timeline).data_bind(ViewerScreen.zoom, ViewerScreen.offset_ns)
            yield timeline
            with Horizontal(id="lower"):
                yield EventList(s).data_bind(ViewerScreen.playhead, ViewerScreen.selection)
                yield DetailPane(s, id="detail").data_bind(ViewerScreen.selection)

    def _analysis_view(self, view: View):
        """The widget of a tab that shows analysis results, bound to this screen's state."""
        extra = {"narration": self.narration} if view.narrated and self.narration is not None else {}
        return view.widget_class()(self.store, **extra).data_bind(*(getattr(ViewerScreen, name) for name in view.binds))

    def row_in(self, store: TraceStore) -> int:
        """The row in `store` of the event the playhead is on (-1: none, or not in it), found by (rank, id)."""
        if self.playhead < 0:
            return -1
        t = self.store.table
        return row_of(store.table, t.rank[self.playhead], t.id[self.playhead])

    def take_whole(self, whole: TraceStore) -> None:
        """The whole trace in place of its head, in this screen (its store object takes the whole's): on the event,
        the tab and the stretch of time the user was on. A new screen for it held the UI thread (composing,
        styling and laying out every widget again): the worst key of a first open."""
        row = self.row_in(whole)
        window = self.time_window() if self.zoom else None  # (unzoomed, the whole trace is shown whole)
        self.store.adopt(whole)
        self.head = None
        for w in self.query(Timeline):
            w.take_whole()
        for w in self.query(EventList):
            w.take_whole()
        for w in self.query(DetailPane):
            w.rerender()
        for w in self.query(Ruler):
            w.refresh()
        self.focused_rank = min(self.focused_rank, len(self.store.rows) - 1)
        self.set_reactive(ViewerScreen.playhead, -2)  # (so that the same row number still moves everything)
        self.playhead = row
        if row < 0:
            self.selection = -1
        if window is not None:
            self._frame(*window)
        else:
            self.offset_ns = 0
        self.analysis_label = f"{self._doing()}: starting"
        self.query_one(PlayheadLine).refresh()
        self._tell_damage()  # (what the rest of the trace lost: a torn end is at the end)
        self.shown.clear()  # set again once drawn: the loading worker waits for it to analyse
        self.call_after_refresh(settle)
        self.call_after_refresh(self.shown.set)

    def adopt_analysis(self, full: TraceStore) -> None:
        """Called on the UI thread when the worker has analysed the trace."""
        self.store.adopt(full)
        self.post_message(AnalysisReady())

    @on(AnalysisReady)
    async def _analysis_ready(self, event: AnalysisReady) -> None:
        # only the tab on screen gets its view now, the others when first shown: building them all at once (the
        # waits table of a 1M-event trace measures thousands of rows) would hold the UI in the middle of whatever
        # key came next
        active = self.query_one(TabbedContent).active
        if active != "timeline":
            await self._mount_view(active)
        for w in self.query(Timeline):
            w.clear_caches()
        for w in self.query(EventList):
            w.clear_caches()
        for w in self.query(DetailPane):
            w.rerender()
        self.query_one(PlayheadLine).refresh()
        self.analysis_label = ""
        self._mark_path()
        # the views' widgets and rows are built now: keep the collector from walking them on every full collection
        self.call_after_refresh(settle)

    def on_load_progress(self, message: LoadProgress) -> None:
        self.analysis_label = f"{self._doing()}: {message.label} {message.fraction:.0%}"

    def _doing(self) -> str:
        if self.head is None:
            return "analysing"
        return f"showing the first {fmt_ns_short(self.store.span_ns)} ({self.head:.0%}) of the trace; the rest"

    def on_mount(self) -> None:
        for tabs in self.query("Tabs"):
            tabs.can_focus = False
        self.set_focus(None)
        if not self.store.analysed:
            self.analysis_label = f"{self._doing()}: starting"
        self.playhead = self.start_row
        if self.start_row < 0:
            self.selection = -1
        if self.initial_view != "timeline":  # a --follow reload keeps the view the user was on
            self.call_after_refresh(self.action_view, self.initial_view)
        self._tell_damage()
        # its widgets, styles and first frame's caches (many objects) out of the collector's sight: else each full
        # collection walks them while a key pressed meanwhile waits (keys on a head, or while analysing)
        self.call_after_refresh(settle)
        self.call_after_refresh(self.shown.set)

    @property
    def ready(self) -> bool:
        """Fully on screen: a --follow reload may replace it."""
        return self.shown.is_set()

    def _tell_damage(self) -> None:
        """Say at once what the input lost, as the report does first; once per app for the same warnings (a
        --follow reload makes a new screen each time the trace grows)."""
        t = self.store.table
        damaged = t.damage_line()
        key = damaged or tuple(t.warnings)  # the reader's: the analysis may add to the warnings after a reload
        if not key or getattr(self.app, "_told_warnings", ()) == key:
            return
        self.app._told_warnings = key
        what = damaged or f"{len(t.warnings)} warning(s) about the input, first: {t.warnings[0]}."
        self.notify(what + f" The problems view ({VIEW['problems'].key}) lists the warnings.", severity="warning",
                    timeout=10, markup=False)  # paths hold brackets

    # -- state changes ------------------------------------------------------------------------------
    def watch_playhead(self, row: int) -> None:
        self.selection = row
        self.ring_step = -1
        if row >= 0:
            k = self.store.rank_index.get(self.store.table.rank[row])
            if k is not None:
                self.focused_rank = k
            self._follow(self.store.table.start_ns[row])
        if row >= self.store.n_events - 1 and self._timer is not None:
            self.playing = False
        self._mark_path()

    def watch_show_path(self) -> None:
        self._mark_path()

    def _mark_path(self) -> None:
        """The step whose critical path the timelines mark: the playhead's, while the marks are on."""
        step = step_paths(self.store).step_at(self.playhead) if self.show_path and self.store.analysed else None
        self.path_step = -1 if step is None else step

    def _follow(self, t_ns: int) -> None:
        self.offset_ns = viewport.follow(self.store.span_ns, self.zoom, self.offset_ns, t_ns - self.store.t0)

    def watch_playing(self, playing: bool) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if playing:
            self._timer = self.set_interval(1 / self.speed, self._tick)

    def watch_speed(self) -> None:
        if self.playing:
            self.watch_playing(True)

    def _tick(self) -> None:
        # in the ring view, playing animates the ring's steps, then moves on to the next collective
        if self.query_one(TabbedContent).active == "ring" and self.query("RingView"):
            ring = self.query_one("RingView")
            if self.ring_step < ring.n_steps - 1:
                self.ring_step += 1
                return
            nxt = step_collective(self.store, self.playhead, 1)
            if nxt == self.playhead:
                self.playing = False
            self.playhead = nxt
            return
        if self.playhead >= self.store.n_events - 1:
            self.playing = False
        else:
            self.playhead = step_event(self.store, self.playhead, 1)

    # -- actions ------------------------------------------------------------------------------------
    def action_step(self, direction: int) -> None:
        self.playhead = step_event(self.store, self.playhead, direction)

    def action_step_collective(self, direction: int) -> None:
        self.playhead = step_collective(self.store, self.playhead, direction)

    def action_toggle_play(self) -> None:
        self.playing = not self.playing

    def action_speed(self, direction: int) -> None:
        k = SPEEDS.index(self.speed) if self.speed in SPEEDS else 2
        self.speed = SPEEDS[max(0, min(len(SPEEDS) - 1, k + direction))]

    def _timeline(self) -> Timeline:
        return self.query_one(Timeline)

    def action_zoom(self, delta: int) -> None:
        span = self.store.span_ns
        new = max(0, min(viewport.max_zoom(span, self._timeline().lane_width), self.zoom + delta))
        anchor = None
        if self.playhead >= 0:
            t = self.store.table.start_ns[self.playhead] - self.store.t0
            if self.offset_ns <= t <= self.offset_ns + viewport.window_ns(span, self.zoom):
                anchor = t
        self.zoom, self.offset_ns = viewport.zoom_to(span, self.zoom, self.offset_ns, new, anchor)

    def action_pan(self, direction: int) -> None:
        w = viewport.window_ns(self.store.span_ns, self.zoom)
        self.offset_ns = viewport.clamp_offset(self.store.span_ns, self.zoom, self.offset_ns + direction * w / 8)

    def action_fit(self) -> None:
        self.zoom, self.offset_ns = 0, 0

    def action_center(self) -> None:
        if self.playhead >= 0:
            t = self.store.table.start_ns[self.playhead] - self.store.t0
            w = viewport.window_ns(self.store.span_ns, self.zoom)
            self.offset_ns = viewport.clamp_offset(self.store.span_ns, self.zoom, t - w / 2)

    def action_rank(self, direction: int) -> None:
        n = len(self.store.rows)
        if not n:
            return
        k = max(0, min(n - 1, self.focused_rank + direction))
        self.focused_rank = k
        rank = self.store.rows[k].rank
        inst = self.store.instance(self.selection)
        if inst is not None and rank in inst.events:
            self.selection = inst.events[rank]
        else:
            ref = self.selection if self.selection >= 0 else self.playhead
            t = self.store.table.start_ns[ref] if ref >= 0 else self.store.t0
            row = self.store.event_at(k, t)
            if row is not None:
                self.selection = row

    def action_other_rank(self, direction: int) -> None:
        row = self.store.same_collective_next(self.selection, direction)
        if row is None:
            self.notify("the selection is not a collective seen on several ranks", severity="warning")
            return
        self.selection = row
        self.focused_rank = self.store.rank_index[self.store.table.rank[row]]

    def action_match(self) -> None:
        row = self.store.partner(self.selection)
        if row is None:
            self.notify("no matching send/recv for the selection", severity="warning")
            return
        self.selection = row
        self.focused_rank = self.store.rank_index[self.store.table.rank[row]]
        self._follow(self.store.table.start_ns[row])

    def action_play_here(self) -> None:
        if self.selection >= 0:
            self.playhead = self.selection

    async def action_view(self, name: str) -> None:
        if not self.query(f"#{name}"):  # a tab this trace has not (VIEW[name].shown)
            self.notify(VIEW[name].absent, severity="warning")
            return
        tc = self.query_one(TabbedContent)
        tc.active = name
        # the view built now, not when TabActivated comes: a key read right after this one ("2" then "]") finds it
        await self._mount_view(name)
        self.call_after_refresh(self._focus_view, name)

    def _focus_view(self, name: str) -> None:
        if self.query_one(TabbedContent).active != name:
            return
        pane = self.query_one(f"#{name}", TabPane)
        focusable = [w for w in pane.query("*") if w.focusable]
        # (not scrolled to: a view's first focusable widget is at its top, and the pipeline view's texts above its
        # grid were scrolled away while its layout settled)
        self.set_focus(focusable[0] if focusable else None, scroll_visible=False)

    async def _mount_view(self, pane_id: str) -> bool:
        """Replace the placeholder of an analysis tab with its view, once the analysis is there (True if it did)."""
        if not self.store.analysed:
            return False
        pane = self.query_one(f"#{pane_id}", TabPane)
        pending = list(pane.query(".pending"))
        if not pending:
            return False
        for p in pending:  # claimed: the key's action and the tab's TabActivated may both come here, one awaiting
            p.remove_class("pending")
        # the view first, then the placeholder out: the pane is never empty (an empty pane draws its own name).
        # Made in this screen's context, as its compose would: a key's action runs in the app's, where data_bind
        # cannot find the screen's reactives
        with self._context():
            view = self._analysis_view(VIEW[pane_id])
        await pane.mount(view, before=pending[0])
        for p in pending:
            await p.remove()
        self.call_after_refresh(settle)  # its widgets and rows stay: out of the collector's sight
        return True

    @on(TabbedContent.TabActivated)
    async def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane is not None and event.pane.id == "critical":
            self.show_path = True
            self._frame_step(only_if_small=True)
        if event.pane is not None and event.pane.id:
            if await self._mount_view(event.pane.id):
                self._focus_view(event.pane.id)
            self.call_after_refresh(self._focus_view, event.pane.id)

    def action_toggle_path(self) -> None:
        self.show_path = not self.show_path
        if self.show_path and self.store.analysed and not self.store.analysis.critical_path:
            self.notify("no critical path to mark: the analysis found none", severity="warning")

    def action_train_step(self, direction: int) -> None:
        """The playhead to the first event of the previous or next training step, the window on all of it."""
        if not self.store.analysed:
            self.notify("the analysis is still running", severity="warning")
            return
        sp = step_paths(self.store)
        if not sp.by_step:
            self.notify("no training steps found in this trace", severity="warning")
            return
        here = sp.step_at(self.playhead)
        row = self.playhead
        outside = row < 0 or self.store.analysis.step_of[row] != here  # before the first step, or after the last
        if outside and (direction > 0) == (row < sp.first_row(here)):
            target = here
        else:
            target = sp.neighbour(here, direction)
        if target is None:
            self.notify(f"this is the {'last' if direction > 0 else 'first'} step", timeout=2)
            return
        self.playhead = sp.first_row(target)
        self._frame(*sp.window(target))

    def _frame_step(self, only_if_small: bool = False) -> None:
        """Show the whole of the playhead's step in the window; only_if_small: unless it is in it already and
        takes a quarter of it or more."""
        sp = step_paths(self.store)
        step = sp.step_at(self.playhead) if self.store.analysed and sp.by_step else None
        if step is None:
            return
        start, end = sp.window(step)
        lo, hi = self.time_window()
        if only_if_small and lo <= start and end <= hi and (end - start) * 4 >= hi - lo:
            return
        self._frame(start, end)

    def time_window(self) -> tuple[int, float]:
        """The (start, end) ns the timeline shows."""
        lo = self.store.t0 + self.offset_ns
        return lo, lo + viewport.window_ns(self.store.span_ns, self.zoom)

    def _frame(self, start_ns: int, end_ns: int) -> None:
        """Zoom and pan so that [start_ns, end_ns] fills most of the window."""
        span, t0 = self.store.span_ns, self.store.t0
        length = max(1, end_ns - start_ns) * 1.1
        z = 0
        while z < viewport.max_zoom(span, self._timeline().lane_width) and viewport.window_ns(span, z + 1) >= length:
            z += 1
        w = viewport.window_ns(span, z)
        self.zoom = z
        self.offset_ns = viewport.clamp_offset(span, z, start_ns - t0 - (w - (end_ns - start_ns)) / 2)

    def action_ring_step(self, direction: int) -> None:
        active = self.query_one(TabbedContent).active
        if active == "pipeline":
            self._pipeline_iteration(direction)
            return
        if active == "memory":
            for view in self.query("MemoryView"):
                told = view.pick(direction)
                if told:
                    self.notify(told, timeout=2)
            return
        for ring in self.query("RingView"):
            self.ring_step = max(-1, min(ring.n_steps - 1, self.ring_step + direction))

    def _pipeline_iteration(self, direction: int) -> None:
        """The playhead to the first event of the pipeline's previous or next iteration (the grid shows it)."""
        views = list(self.query("PipelineView"))
        model = views[0].model if views else None
        if not model:
            self.notify("no pipeline schedule in this trace", severity="warning")
            return
        here = model.at(self.playhead)
        target = model.neighbour(here, direction)
        if target is None:
            self.notify(f"this is the {'last' if direction > 0 else 'first'} iteration", timeout=2)
            return
        self.playhead = model.first_row(target)

    def action_narration(self, direction: int) -> None:
        for pane in self.query(NarrationPane):
            pane.page(direction)

    def action_help(self) -> None:
        # the app's own too (F, R), and the pipeline grid's (its zoom and pan, when it has the focus)
        from ..widgets.schedule import ScheduleGrid

        self.app.push_screen(HelpScreen(self.BINDINGS + list(self.app.BINDINGS) + list(ScheduleGrid.BINDINGS)))

    def action_search(self) -> None:
        def done(text: str | None) -> None:
            if text is None:
                return
            text = text.strip() or self.last_search
            self.last_search = text
            self._search(text, self.selection)

        self.app.push_screen(Prompt("search (op, api, site, group, dtype, rank=N; enter again: next)",
                                    "e.g. all_gather rank=3", self.last_search), done)

    @work(thread=True, exclusive=True, group="search")
    def _search(self, text: str, start: int) -> None:
        """Search in a thread: a miss in a million events takes a while, and the UI must not freeze meanwhile."""
        row = search(self.store, text, start)
        self.app.call_from_thread(self._found, text, row)

    def _found(self, text: str, row: int | None) -> None:
        if row is None:
            self.notify(f"no event matches {text!r}", severity="warning")
        else:
            self.playhead = row

    def action_goto(self) -> None:
        def done(text: str | None) -> None:
            if not text:
                return
            try:
                self.playhead = parse_goto(self.store, text)
            except ValueError as e:
                self.notify(str(e), severity="error")

        self.app.push_screen(Prompt("go to: a time from the start (12.5ms) or an event number (#42)"), done)

    # -- messages from the widgets -------------------------------------------------------------------
    @on(EventPicked)
    def _picked(self, event: EventPicked) -> None:
        event.stop()
        if event.move_playhead:
            self.playhead = event.row
        self.selection = event.row
        if event.row >= 0:
            self.focused_rank = self.store.rank_index[self.store.table.rank[event.row]]

    @on(ViewChanged)
    def _view_changed(self, event: ViewChanged) -> None:
        event.stop()
        self.zoom, self.offset_ns = event.zoom, event.offset_ns

    @on(ShowInTimeline)
    async def _show_in_timeline(self, event: ShowInTimeline) -> None:
        event.stop()
        self.playhead = event.row
        await self.action_view("timeline")
