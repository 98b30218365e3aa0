"""The first open of a large trace: the viewer shows the trace's head while the whole is read in parallel
(data/store/head.py), then the whole trace on the event and view the user was on, then its analysis, made in a child
process as a large trace's is (analysis/engine/child_process.py); quitting meanwhile stops the read."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from textual.css.query import NoMatches
from textual.widgets import TabbedContent

from disttrace.tracer.analysis.engine import child_process as apart
from disttrace.tracer.data.store import head, parallel
from disttrace.tui.app import DisttraceApp
from disttrace.tui.screens.viewer import PlayheadLine, ViewerScreen
from disttrace.tui.widgets.event_list import EventList

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synth import write_synthetic, write_trace_dir  # noqa: E402
from test_store import age  # noqa: E402

SIZE = (120, 36)


@pytest.fixture
def held_read(tmp_path, monkeypatch):
    """A trace dir read in parallel, with a head of a few percent; the parallel read waits for `go` (it says how
    far it is meanwhile, as the workers do). Returns (trace dir, go, what the held read ended with)."""
    events = tmp_path / "events.jsonl"
    write_synthetic(str(events), 12_000, 8)
    write_trace_dir(str(events), str(tmp_path / "trace"))
    age(str(tmp_path / "trace"))  # (old enough to be stored: the analysis is made apart only from a store)
    monkeypatch.setattr(parallel, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(parallel, "SHARE_BYTES", 1)
    monkeypatch.setenv(parallel.ENV, "2")
    monkeypatch.setattr(head, "HEAD_BYTES", 200_000)
    monkeypatch.setattr(apart, "APART_FROM", 1)
    started = []  # the analysis' child processes (not the read's workers)

    class Recorded(subprocess.Popen):
        def __init__(self, args, *more, **kwargs):
            super().__init__(args, *more, **kwargs)
            if apart.__name__ in args:
                started.append(self)

    monkeypatch.setattr(apart.subprocess, "Popen", Recorded)
    go, ended = threading.Event(), []
    real = parallel.build

    def held(plan, target, fingerprint, progress=None):
        try:
            while not go.is_set():
                progress(0.1, "reading")
                time.sleep(0.01)
        except BaseException as e:
            ended.append(type(e).__name__)
            raise
        ended.append("read")
        return real(plan, target, fingerprint, progress)

    monkeypatch.setattr(parallel, "build", held)
    return tmp_path / "trace", go, ended, started


async def until(pilot, ok, seconds: float = 20.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if ok():
            return
        await pilot.pause(0.05)
    raise AssertionError("timed out")


def _playhead_line(screen) -> str:
    try:
        return str(screen.query_one(PlayheadLine).render())
    except NoMatches:  # (the screen is up, its widgets not yet mounted)
        return ""


@pytest.mark.slow  # (the read's workers and the analysis' child are processes)
async def test_the_head_is_shown_then_the_whole_trace_on_the_same_event_and_view(held_read, monkeypatch):
    trace, go, ended, started = held_read
    children_at_whole = []  # how many analysis children had begun when the whole trace replaced the head
    replace = DisttraceApp._replace_head

    def replace_head(self, *args):
        children_at_whole.append(len(started))
        return replace(self, *args)
    monkeypatch.setattr(DisttraceApp, "_replace_head", replace_head)
    app = DisttraceApp([str(trace)])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ViewerScreen))
        first = app.screen
        assert first.head is not None and 0 < first.head < 0.5 and not ended  # (the whole is not read yet)
        assert 0 < first.store.n_events < 12_000 / 3
        await until(pilot, lambda: "of the trace; the rest: reading" in _playhead_line(first))
        await pilot.press("n", "n", "n", "n", "n", "plus", "plus", "l", "4")
        t = first.store.table
        on = (t.rank[first.playhead], t.id[first.playhead])
        lo, hi = first.time_window()
        go.set()
        await until(pilot, lambda: first.head is None and first.ready)
        whole = app.screen
        assert whole is first  # the head's screen took the whole trace: no screen built again (a 120 ms stall)
        assert whole.store.n_events >= 12_000 and ended == ["read"]
        assert len(whole.query_one(EventList).store.table) == whole.store.n_events
        assert f" of {whole.store.n_events} @" in _playhead_line(whole)  # what the line says is of the whole
        assert children_at_whole == [1]  # the analysis' child, begun before the whole trace is drawn
        assert (whole.store.table.rank[whole.playhead], whole.store.table.id[whole.playhead]) == on
        assert whole.query_one(TabbedContent).active == "waits"
        # the stretch of time zoomed into on the head, framed in the whole trace
        await pilot.press("1")
        a, b = whole.time_window()
        assert whole.zoom > 3 and a <= lo and hi <= b and b - a < 3 * (hi - lo)
        await until(pilot, lambda: whole.store.analysed and not whole.analysis_label)
        assert type(whole.store.analysis.event_wait_ns) is memoryview  # the child's, mapped from the store
        assert type(whole.store.lane_columns["starts"]) is memoryview  # the lanes as kept, mapped: the built ones gone
        assert len(started) == 1 and started[0].returncode == 0  # that child's analysis, no second one


@pytest.mark.slow
async def test_quitting_on_the_head_stops_the_read(held_read):
    trace, go, ended, started = held_read
    app = DisttraceApp([str(trace)])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ViewerScreen))
        await pilot.press("q")
    for _ in range(100):
        if ended:
            break
        time.sleep(0.02)
    assert ended == ["_Quit"]  # the loading worker stopped the read at its next progress, not at its end
