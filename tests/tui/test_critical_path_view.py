"""The critical path view (issue 18) and its marks on the timeline, on a hand-timed trace with steps
(tui_helpers.steps_trace: in step 2 the path is rank 1's 18 ms of compute, then rank 2's all_reduce, compute and
all_gather)."""

from __future__ import annotations

from rich.color import Color
from textual.widgets import DataTable, TabbedContent

from disttrace.tui.app import DisttraceApp
from disttrace.tui.model.critical import step_paths
from disttrace.tui.screens.viewer import ViewerScreen
from disttrace.tui.widgets.critical_path import CriticalPathView, short_span
from disttrace.tui.widgets.palette import PATH
from disttrace.tui.widgets.timeline import Timeline

from synthetic import MS
from tui_helpers import cols_where, shared_steps_store, shared_store, steps_store

SIZE = (120, 40)
PINK = Color.parse(PATH)


def app_on(store=None) -> DisttraceApp:
    return DisttraceApp(["steps.jsonl"], store=store or shared_steps_store(), step_mode=True)


async def viewer(pilot) -> ViewerScreen:
    await pilot.pause()
    assert isinstance(pilot.app.screen, ViewerScreen)
    return pilot.app.screen


def table_rows(view: CriticalPathView) -> list[tuple[str, ...]]:
    t = view.query_one("#path-table", DataTable)
    return [tuple(str(c) for c in t.get_row_at(i)) for i in range(t.row_count)]


def marked_cols(tl: Timeline, rank: int) -> list[int]:
    """Columns of a rank's lane drawn in the critical path's colour."""
    y = tl.rank_indices.index(tl.store.rank_index[rank]) - int(tl.scroll_y)
    return cols_where(tl, y, lambda style: style.color == PINK)


def expected_cols(tl: Timeline, spans) -> list[int]:
    cols: set[int] = set()
    for a, b in spans:
        c0, c1 = tl.col_of(a), max(tl.col_of(a), tl.col_of(b - 1))
        cols.update(range(max(0, c0), min(tl.lane_width - 1, c1) + 1))
    return sorted(cols)


def test_steps_rows_and_marks_of_the_paths():
    s = steps_store()
    sp = step_paths(s)
    t0 = s.table.start_ns[0] - 10 * MS  # the synthetic trace's clock starts 10 ms before the first op
    assert sp.by_step and sp.order == [0, 1, 2, 3, 4, 5]
    assert [sp.step_at(r) for r in (-1, 0, 5, 6, 14, 35)] == [0, 0, 0, 1, 2, 5]
    assert (sp.neighbour(2, 1), sp.neighbour(2, -1), sp.neighbour(5, 1), sp.neighbour(0, -1)) == (3, 1, None, None)
    assert [sp.first_row(k) for k in sp.order] == [0, 6, 12, 18, 24, 30]
    # step 2: rank 1 computes 38-56 ms, rank 2 communicates 56-58, computes 58-62, all_gathers 62-64
    parts = sp.paths[2].parts
    assert [(p.rank, p.kind) for p in parts] == [(1, "compute"), (2, "comm"), (2, "compute"), (2, "comm")]
    assert sp.marks(2) == {1: [(t0 + 38 * MS, t0 + 56 * MS)], 2: [(t0 + 56 * MS, t0 + 64 * MS)]}
    assert sp.window(2) == (t0 + 38 * MS, t0 + 64 * MS)
    # the events a part is shown at: the op that ended a compute span, the op a comm part is in
    assert [sp.part_row(p) for p in parts] == [14, 13, 17, 17]
    # a trace without steps: one path, the whole trace's
    whole = step_paths(shared_store())
    assert not whole.by_step and whole.order == [0] and whole.step_at(5) == 0


def test_short_span_drops_a_repeated_file():
    assert short_span("train.py:40 → train.py:52") == "train.py:40 → :52"
    assert short_span("start → train.py:40") == "start → train.py:40"
    assert short_span("a.py:1 → b.py:2") == "a.py:1 → b.py:2"
    assert short_span("all_reduce world #3") == "all_reduce world #3"


async def test_the_waits_view_says_the_verdict_and_the_path_view_lists_the_path_of_the_step_at_the_playhead():
    # (one app for both: starting it is most of a test's time)
    async with app_on().run_test(size=SIZE) as pilot:
        v = await viewer(pilot)
        await pilot.press("4")
        await pilot.pause()
        text = str(v.query_one("#attribution").render())
        assert text.splitlines()[0] == "Verdict: one worker, rank 1 · 19.67 ms a step measured, 16.17 ms ideal (1.22x)"
        assert "rank 1 67%" in text and "rank 2 33%" in text
        await pilot.press("8")
        await pilot.pause()
        assert v.query_one(TabbedContent).active == "critical"
        view = v.query_one(CriticalPathView)
        assert v.playhead == 0 and view.step == 0
        assert [r[:3] for r in table_rows(view)] == [
            ("r2", "compute", "start → train.py:40"), ("r2", "comm", "all_reduce world #0"),
            ("r2", "compute", "train.py:40 → :52"), ("r2", "comm", "all_gather world #1")]
        v.playhead = 14  # rank 1's late all_reduce, in step 2
        await pilot.pause()
        assert view.step == 2
        assert table_rows(view) == [
            ("r1", "compute", "train.py:52 → :40", "18ms", "69%"), ("r2", "comm", "all_reduce world #4", "2ms", "8%"),
            ("r2", "compute", "train.py:40 → :52", "4ms", "15%"), ("r2", "comm", "all_gather world #5", "2ms", "8%")]
        head = str(view.query_one("#cp-head").render())
        assert "Step 2 (3 of 6, late: r1): critical path 26.00 ms through r1 → r2" in head
        causes = view.query_one("#cause-table", DataTable)
        assert [str(c) for c in causes.get_row_at(0)] == ["r1", "compute", "train.py:52 → :40", "30ms", "0, 2"]
        what_if = str(view.query_one("#what-if").render())
        assert "What if rank 1 at its peers' pace: 19.67 ms → 17.33 ms a step (−12%; 6 steps replayed)." in what_if
        # the verdict's kind, the ideal step beside the measured one, and each candidate's share of the slowdown
        assert "Verdict: one worker, rank 1 · 19.67 ms a step measured, 16.17 ms ideal (1.22x)" in what_if
        assert "span train.py:52 → train.py:40 81% · rank 1 67% · rank 2 33%" in what_if.replace("\n", " ")


async def step_keys_move_the_playhead_to_the_next_step_and_show_all_of_it(pilot, v):
    sp = step_paths(v.store)
    await pilot.press("8")
    assert v.playhead == 0
    for step in (1, 2, 3):
        await pilot.press("right_curly_bracket")
        await pilot.pause()
        assert v.playhead == sp.first_row(step) and v.query_one(CriticalPathView).step == step
        start, end = sp.window(step)
        w = v.store.span_ns / 2 ** v.zoom
        assert v.offset_ns <= start - v.store.t0 and end - v.store.t0 <= v.offset_ns + w  # all of the step
        assert w < 2 * 1.1 * (end - start)  # and zoomed in on it
    await pilot.press("left_curly_bracket")
    assert v.playhead == sp.first_row(2) and v.path_step == 2
    v.playhead = 35
    await pilot.press("right_curly_bracket")  # the last step: stays
    assert v.playhead == 35
    # the keys work on the timeline tab too
    await pilot.press("1", "left_curly_bracket")
    assert v.playhead == sp.first_row(4) and v.query_one(TabbedContent).active == "timeline"


async def test_the_timeline_marks_the_path_on_the_right_lanes():
    async with app_on().run_test(size=SIZE) as pilot:
        v = await viewer(pilot)
        sp = step_paths(v.store)
        tl = v.query_one("#timeline Timeline", Timeline)
        assert v.path_step == -1 and not any(marked_cols(tl, r) for r in (0, 1, 2))  # off until asked
        await pilot.press("8", "right_curly_bracket", "right_curly_bracket", "1")  # step 2, back on the timeline
        await pilot.pause()
        assert v.path_step == 2 and tl.path_step == 2
        marks = sp.marks(2)
        assert marked_cols(tl, 1) == expected_cols(tl, marks[1])  # rank 1's compute
        assert marked_cols(tl, 2) == expected_cols(tl, marks[2])  # then rank 2 to the step's end
        assert marked_cols(tl, 1) and marked_cols(tl, 2) and marked_cols(tl, 0) == []
        assert max(marked_cols(tl, 1)) <= min(marked_cols(tl, 2))  # the path hops from rank 1 to rank 2
        # the playhead moving within the step keeps the marks; into the next step, they follow
        await pilot.press("n")
        assert v.path_step == 2
        v.playhead = sp.first_row(3)
        await pilot.pause()
        assert v.path_step == 3 and marked_cols(tl, 1) == [] and marked_cols(tl, 2)
        # x turns them off and on again (the cached lanes are drawn with and without them)
        await pilot.press("x")
        assert v.path_step == -1 and not any(marked_cols(tl, r) for r in (0, 1, 2))
        await pilot.press("x")
        assert v.path_step == 3 and marked_cols(tl, 2) == expected_cols(tl, sp.marks(3)[2])


async def test_enter_on_a_part_shows_its_event_in_the_timeline_and_step_keys():
    # (one app for both, the step keys' part from the first event again)
    async with app_on().run_test(size=SIZE) as pilot:
        v = await viewer(pilot)
        await pilot.press("8", "right_curly_bracket", "right_curly_bracket")
        await pilot.pause()
        assert v.focused is v.query_one("#path-table", DataTable)
        await pilot.press("enter")  # rank 1's compute: shown at the all_reduce it ended in
        await pilot.pause()
        assert v.playhead == 14 and v.selection == 14 and v.query_one(TabbedContent).active == "timeline"
        assert v.path_step == 2  # the marks stay on
        await pilot.press("8", "down", "enter")  # rank 2's all_reduce
        await pilot.pause()
        assert v.playhead == 13
        await pilot.press("1", "f")
        v.playhead = 0
        await pilot.pause()
        assert (v.playhead, v.zoom, v.offset_ns) == (0, 0, 0)
        await step_keys_move_the_playhead_to_the_next_step_and_show_all_of_it(pilot, v)


async def test_a_trace_without_steps_shows_the_whole_trace_s_path():
    async with app_on(shared_store()).run_test(size=SIZE) as pilot:
        v = await viewer(pilot)
        await pilot.press("8")
        await pilot.pause()
        view = v.query_one(CriticalPathView)
        assert len(table_rows(view)) == len(v.store.analysis.critical_path[0].parts)
        assert str(view.query_one("#cp-head").render()).startswith("Whole trace (no steps found)")
        before = v.playhead
        await pilot.press("right_curly_bracket")  # no steps: says so, the playhead stays
        assert v.playhead == before
