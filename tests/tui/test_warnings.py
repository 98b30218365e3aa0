"""The viewer says what the input lost, as the report does first: a notification when the trace opens, and a line
at the top of the problems view; an intact trace gets neither."""

from __future__ import annotations

from textual.widgets import Static

from disttrace.tracer.analysis import analyze
from disttrace.tui.app import DisttraceApp
from disttrace.tui.model.store import TraceStore

from tui_helpers import TUI_JOB, fixture_store

SIZE = (120, 40)


async def _open(store: TraceStore):
    app = DisttraceApp([str(TUI_JOB)], store=store, step_mode=True)
    told = []
    app.notify = lambda message, **kw: told.append((message, kw.get("severity")))  # what the user is told
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("7")
        await pilot.pause()
        shown = [str(w.render()) for w in app.screen.query("#input-warnings").results(Static)]
    return told, shown


async def test_a_damaged_trace_is_said_on_opening_and_atop_the_problems():
    store = fixture_store()
    t = store.table
    t.ranks[1].damage = "torn last record"
    t.warnings.append("rank-00001.jsonl: last record torn (rank 1 died while writing it, or is still writing)")
    store = TraceStore(t, analyze(t))
    told, shown = await _open(store)
    assert [s for _, s in told] == ["warning"] and told[0][0].startswith("damaged trace: rank 1: torn last record.")
    (text,) = shown
    assert text.startswith("damaged trace: rank 1: torn last record. No finding here rests on the missing records.")
    assert "last record torn (rank 1 died while writing it" in text


async def test_an_intact_trace_says_nothing_of_the_kind():
    told, shown = await _open(fixture_store())
    assert told == [] and shown == []
