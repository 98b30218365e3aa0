"""The disttrace viewer app: loads a trace in a worker thread behind a progress bar, then shows the viewer screen.

`open_viewer(paths, step_mode=False) -> int` is the entry point for `disttrace view` and the demos. Small inputs
are read before the app starts, so bad input ends as one line on stderr and exit code 2 without a screen; so does
a viewer started without a terminal (`terminal.no_terminal()`), which would write escape codes into a file and wait for
keys that never come.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time

from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Center, Middle
from textual.screen import Screen
from textual.widgets import Label, ProgressBar, TabbedContent
from textual.worker import get_current_worker

from disttrace.tracer.data.table import EventTable, give_back_freed_memory
from disttrace.tracer.errors import TraceError
from disttrace.tracer.data.load import trace_size

from . import loading
from .model.narration import Narration, load_narration
from .model.store import TraceStore
from .screens.viewer import ViewerScreen
from .terminal import no_terminal
from .widgets.messages import LoadProgress

NO_TERMINAL_HINT = "; `disttrace report TRACE` writes the analysis as text"
PRELOAD_BYTES = loading.PRELOAD_BYTES  # inputs smaller than this are read before the app starts
FIRST_FRAME_WAIT_S = 2.0  # the loading worker waits at most this for the first frame before it analyses
LOADING_SCREEN_AFTER_S = 0.5  # the progress bar shows only for a load that takes longer (a trace's store opens
#                               faster: drawing the bar meanwhile would hold the GIL from the reader)


class _Quit(Exception):
    """The app is quitting: the analysis in its worker stops."""


class LoadingScreen(Screen):
    DEFAULT_CSS = """
    LoadingScreen Label { width: 100%; content-align: center middle; }
    LoadingScreen ProgressBar { width: auto; }
    """

    def __init__(self, what: str, progress: LoadProgress | None = None) -> None:
        super().__init__()
        self.what = what
        self.progress = progress  # the latest before the screen showed

    def compose(self) -> ComposeResult:
        with Middle():
            yield Label(f"disttrace: opening {self.what}", id="what")
            with Center():
                yield ProgressBar(total=100, id="bar", show_eta=False)
            yield Label("reading…", id="stage")

    def on_mount(self) -> None:
        if self.progress is not None:
            self.on_load_progress(self.progress)

    def on_load_progress(self, message: LoadProgress) -> None:
        self.query_one(ProgressBar).update(progress=int(message.fraction * 100))
        self.query_one("#stage", Label).update(message.label)


class DisttraceApp(App[int]):
    """`disttrace view`: the trace viewer and step-through debugger."""

    CSS_PATH = "app.tcss"
    TITLE = "disttrace"

    BINDINGS = [Binding("F", "follow_newest", "follow newest", show=False,
                        tooltip="--follow: keep the playhead on the newest event"),
                Binding("R", "next_run", "next run", show=False,
                        tooltip="open the trace's next run (restarts, successive jobs: disttrace runs)")]

    FOLLOW_INTERVAL_S = 2.0

    def __init__(self, paths: list[str], step_mode: bool = False, table: EventTable | None = None,
                 store: TraceStore | None = None, narration: Narration | None = None, follow: bool = False,
                 run: int | None = None, ahead: loading.StoredAhead | None = None) -> None:
        super().__init__()
        self.ahead = ahead  # the store being opened since the command began (a re-open), taken by the worker
        self.run_number = run  # the run of the trace on screen (None: the reader's default)
        self.follow = follow
        self.follow_newest = False
        self._seen_size = -1
        self.paths = list(paths)
        self.step_mode = step_mode
        self.table = table
        self.store = store
        self.narration = narration
        self.error: str | None = None
        self._progress: LoadProgress | None = None  # the loading worker's latest
        self.title = "disttrace"
        self.sub_title = " ".join(self.paths)

    def on_mount(self) -> None:
        if self.follow:
            self._seen_size = trace_size(self.paths)
            self.set_interval(self.FOLLOW_INTERVAL_S, self._poll_follow)
        if self.store is not None:
            self._show(self.store, self.narration)
            return
        self.set_timer(LOADING_SCREEN_AFTER_S, self._show_loading)
        self._load()

    def _show_loading(self) -> None:
        gc.enable()  # (off during a start, tui/cli.py: a load that takes this long makes garbage)
        if self.store is None and self.error is None:
            self.push_screen(LoadingScreen(" ".join(self.paths), self._progress))

    def on_load_progress(self, message: LoadProgress) -> None:
        """The loading worker's progress while the progress bar is not up (kept for it), or is."""
        self._progress = message
        if isinstance(self.screen, LoadingScreen):
            self.screen.on_load_progress(message)

    # -- --follow: a trace still being written ---------------------------------------------------------------
    def _poll_follow(self) -> None:
        size = trace_size(self.paths)
        if size != self._seen_size:
            self._seen_size = size
            if isinstance(self.screen, ViewerScreen):
                self._reload()

    @work(thread=True, exclusive=True, group="follow")
    def _reload(self) -> None:
        """Read the grown trace again (with its analysis) and swap it in on the UI thread."""
        try:
            with loading.background_work():
                store, narration = loading.load_store(self.paths, run=self.run_number, cache=False)  # live: no store
        except TraceError:
            return  # not readable yet (the job has not written its first events): try at the next poll
        self.call_from_thread(self._swap, store, narration)

    def _swap(self, store: TraceStore, narration: Narration | None) -> None:
        old = self.screen if isinstance(self.screen, ViewerScreen) else None
        if old is None:  # the first view is on its way to the screen: take this one at the next poll
            self._seen_size = -1
            return
        if not old.ready:  # the previous view is still being put on screen: take this one at the next poll
            self._seen_size = -1
            return
        if self.follow_newest:
            start = len(store.table) - 1
        else:
            start = old.row_in(store)
        screen = ViewerScreen(store, narration, start_row=start)
        screen.initial_view = old.query_one(TabbedContent).active or "timeline"
        self.store = store
        self.switch_screen(screen)

    def action_follow_newest(self) -> None:
        if not self.follow:
            self.notify("start the viewer with --follow to follow a running job", severity="warning")
            return
        self.follow_newest = not self.follow_newest
        self.notify("following the newest event" if self.follow_newest else "stopped following the newest event")
        if self.follow_newest:
            self._seen_size = -1  # jump now
            self._poll_follow()

    # -- runs: a trace of several process-group worlds ---------------------------------------------------------
    def action_next_run(self) -> None:
        runs = self.store.table.runs if self.store is not None else []
        if len(runs) < 2:
            self.notify("this trace holds one run")
            return
        numbers = [r.number for r in runs]
        now = self.store.table.run
        self.run_number = numbers[(numbers.index(now) + 1) % len(numbers)] if now in numbers else numbers[-1]
        self.notify(f"opening run {self.run_number} of {len(runs)}")
        self._open_run(self.run_number)

    @work(thread=True, exclusive=True, group="run")
    def _open_run(self, run: int) -> None:
        try:
            with loading.background_work():
                store, narration = loading.load_store(self.paths, run=run)
        except TraceError as e:
            self.call_from_thread(self.notify, str(e), severity="error")
            return
        self.call_from_thread(self._show_run, store, narration)

    def _show_run(self, store: TraceStore, narration: Narration | None) -> None:
        self.store = store
        self._set_sub_title(store)
        self.switch_screen(ViewerScreen(store, narration, start_row=-1))

    def _set_sub_title(self, store: TraceStore) -> None:
        t = store.table
        self.sub_title = " ".join(self.paths) + (f" — run {t.run} of {len(t.runs)}" if len(t.runs) > 1 else "")
        if any(getattr(info, "ring", None) for info in t.ranks.values()):
            # a black box's rings hold a window of the run, not the run: said before any view is read
            self.sub_title += " — black box: the rings' last ops (tab 0: the whole run)"

    @work(thread=True, exclusive=True)
    def _load(self) -> None:
        """Read the trace and show its timeline at once; then analyse it and hand the analysis to the screen."""
        with loading.EarlyAnalysis() as early:
            self._read_and_analyse(early)

    def _read_and_analyse(self, early: loading.EarlyAnalysis) -> None:
        target = [self]  # the app (it keeps the latest for the progress bar), then the viewer (analysing)
        last = [-1.0]

        def progress(fraction: float, label: str) -> None:
            if fraction - last[0] >= 0.01 or fraction >= 1.0 or fraction < last[0]:
                last[0] = fraction
                target[0].post_message(LoadProgress(fraction, label))

        worker = get_current_worker()

        def going_on(fraction: float, label: str) -> None:
            # quitting cancels the worker: the read (its worker processes killed) or the analysis stops at its next
            # step rather than holding the exit until it ends (the interpreter waits for this thread: on a large
            # trace a "q" would wait for the whole analysis)
            if worker.is_cancelled:
                raise _Quit
            progress(fraction, label)

        head_screen: list[ViewerScreen] = []
        browsing = contextlib.ExitStack()  # while the head is on screen

        def preview(head: EventTable, fraction: float) -> None:
            """The trace's head on screen while the whole is read (a first read of a large trace)."""
            store = loading.bare_store(head)
            # keys on the head are answered at once while this thread reads and merges
            browsing.enter_context(loading.background_work())
            screen = self.call_from_thread(self._show, store, narration, fraction)
            head_screen.append(screen)
            target[0] = screen
            last[0] = -1.0

        try:
            narration = self.narration if self.narration is not None else load_narration(self.paths)
            bare = self.ahead.result() if self.ahead is not None else None
            self.ahead = None
            if bare is None:
                table = self.table if self.table is not None else loading.read_table(
                    self.paths, going_on, self.run_number, False if self.follow else None, preview)
                early.start(table)
                progress(1.0, "indexing")
                bare = loading.bare_store(table)
            else:
                early.start(bare.table)
        except TraceError as e:
            self.call_from_thread(self._fail, str(e))
            return
        except _Quit:
            return
        finally:
            browsing.close()
        if head_screen:
            screen = self.call_from_thread(self._replace_head, head_screen[0], bare)
            # the head's store object now holds the whole: the analysis is made from it and adopted into it, so
            # that the first frame's lanes go with the adoption (kept in `bare` too, they would stay
            # resident until this worker's end)
            bare = screen.store
        else:
            screen = self.call_from_thread(self._show, bare, narration)
        target[0] = screen
        last[0] = -1.0
        # the analysis starts once the timeline is on screen: begun at once, it would hold the GIL while the screen
        # is being laid out, and the first frame would come later
        screen.shown.wait(FIRST_FRAME_WAIT_S)
        try:
            with loading.background_work():
                full = loading.analysed_store(bare, going_on, early)
        except _Quit:
            return
        self.call_from_thread(screen.adopt_analysis, full)
        # the lanes built for the first frame, dropped by the adoption now that the store holds the kept ones. A
        # second trim, not a moved one: analysed_store's, before, gives back memory this one would not
        give_back_freed_memory()

    def _fail(self, message: str) -> None:
        self.error = message
        self.exit(2)

    def _show(self, store: TraceStore, narration: Narration | None, head: float | None = None) -> ViewerScreen:
        """The viewer on `store`; `head`: the store is the trace's head, this fraction of it, the rest being read."""
        self.store = store
        self._set_sub_title(store)
        # stepping (a demo's narration, --step) starts on the first event; browsing starts before it, with the hint
        start = 0 if (self.step_mode or narration is not None) else -1
        screen = ViewerScreen(store, narration, start_row=start, head=head)
        if narration is not None and narration.title:
            self.sub_title = narration.title
        if isinstance(self.screen, LoadingScreen):
            self.switch_screen(screen)
        else:
            self.push_screen(screen)
        self.call_after_refresh(gc.enable)  # (off during a start, tui/cli.py)
        return screen

    def _replace_head(self, head: ViewerScreen, store: TraceStore) -> ViewerScreen:
        """The whole trace in place of its head, in the head's screen (ViewerScreen.take_whole)."""
        head.take_whole(store)
        self.store = head.store
        return head

    def get_system_commands(self, screen: Screen):
        yield from super().get_system_commands(screen)
        if isinstance(screen, ViewerScreen):
            for b in screen.BINDINGS:
                what = b.tooltip or b.description
                if what and not b.action.startswith("app."):
                    yield SystemCommand(f"{what} ({b.key.split(',')[0]})", what,
                                        lambda action=b.action: self.run_action(action, screen))


def _wait_for_first_events(paths: list[str], run: int | None = None) -> tuple[TraceStore, Narration | None]:
    """--follow on a job that has not written its first events yet: wait for them (Ctrl-C gives up)."""
    said = False
    while True:
        for p in paths:
            if not os.path.exists(p):
                raise TraceError(f"{p}: no such file or directory")
        try:
            return loading.load_store(paths, run=run)
        except TraceError as e:
            if not said:
                sys.stderr.write(f"disttrace view: waiting for the job to write its trace ({e}); Ctrl-C to stop\n")
                said = True
        time.sleep(DisttraceApp.FOLLOW_INTERVAL_S / 2)


def open_viewer(paths: list[str], step_mode: bool = False, follow: bool = False, run: int | None = None,
                ahead: loading.StoredAhead | None = None) -> int:
    """Open the viewer on trace dirs / events files; returns the exit code (2 with a message on bad input).
    With follow, the trace may still be being written (or not be there yet): the viewer keeps reading it.
    `ahead`: the trace's store, being opened since the command began (loading.StoredAhead)."""
    try:
        store = narration = None
        if follow:
            for p in paths:
                if not os.path.exists(p):
                    raise TraceError(f"{p}: no such file or directory")
            if (why := no_terminal()) is not None:  # before waiting for a job that may never write
                raise TraceError(why + NO_TERMINAL_HINT)
            store, narration = _wait_for_first_events(paths, run)
        elif trace_size(paths) < PRELOAD_BYTES:
            store, narration = loading.load_store(paths, run=run)
        else:
            for p in paths:
                if not os.path.exists(p):
                    raise TraceError(f"{p}: no such file or directory")
        # after the input is known good (a bad one says so first), before anything is drawn
        if (why := no_terminal()) is not None:
            raise TraceError(why + NO_TERMINAL_HINT)
    except TraceError as e:
        sys.stderr.write(f"disttrace view: error: {e}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    app = DisttraceApp(paths, step_mode=step_mode, store=store, narration=narration, follow=follow, run=run,
                       ahead=None if store is not None else ahead)
    app.run()
    if app.error:
        sys.stderr.write(f"disttrace view: error: {app.error}\n")
        return 2
    return app.return_code or 0
