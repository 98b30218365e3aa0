"""The viewer driven by keys (Textual's Pilot) on a small real trace: keys -> view state."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import orjson
import pytest
from textual.widgets import TabbedContent

from disttrace.tui.app import DisttraceApp
from disttrace.tui.screens.help import HelpScreen, keys_table
from disttrace.tui.screens.viewer import ViewerScreen
from disttrace.tui.widgets.timeline import Timeline

from tui_helpers import (DATA, PIPELINE_JOB, TUI_JOB, cols_where, detail_text, ev, screen_text, shared_store, store_of,
                         wait_until)

HANG = DATA / "hang.jsonl"

SIZE = (120, 40)


def app_on(path=TUI_JOB, step_mode=True, **kw) -> DisttraceApp:
    return DisttraceApp([str(path)], store=shared_store(path), step_mode=step_mode, **kw)


async def viewer(pilot) -> ViewerScreen:
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, ViewerScreen)
    return screen


# Starting the app is most of a test's time (composing, styling and drawing the screen): the checks made from the
# same start (trace, size, mode) share one app, each from the state the app opened in (each_from_the_start).

async def back_to_the_start(pilot, v: ViewerScreen) -> None:
    """As the viewer opened in step mode: on the first event, its rank focused, unzoomed, on the timeline."""
    await pilot.press("1", "f")
    v.set_reactive(ViewerScreen.playhead, -2)  # (so that setting it to the row it is on still moves everything)
    v.playhead = 0
    await pilot.pause()
    assert (v.playhead, v.selection, v.zoom, v.offset_ns, v.ring_step) == (0, 0, 0, 0, -1)
    assert v.focused_rank == v.store.rank_index[v.store.table.rank[0]]


async def each_from_the_start(pilot, v: ViewerScreen, *checks) -> None:
    """The checks one after the other in one app, the app back at its start between them."""
    for k, check in enumerate(checks):
        if k:
            await back_to_the_start(pilot, v)
        await check(pilot, v)


async def test_stepping_selecting_zooming_clicking_and_the_palette():
    async with app_on().run_test(size=SIZE) as pilot:
        await each_from_the_start(pilot, await viewer(pilot), stepping_by_event_and_by_collective,
                                  same_collective_on_other_ranks_and_matching_recv, zoom_pan_and_ranks,
                                  click_on_timeline_picks_the_event_there, command_palette_lists_the_viewer_actions)


async def stepping_by_event_and_by_collective(pilot, v):
    t = v.store.table
    assert v.playhead == 0 and v.selection == 0
    await pilot.press("n", "n", "n")
    assert v.playhead == 3 and v.selection == 3
    await pilot.press("p")
    assert v.playhead == 2
    await pilot.press("N")  # the next collective after the all_reduce: all_gather, earliest arrival
    assert t.op[v.playhead] == "all_gather"
    first = min((i for i in range(len(t)) if t.op[i] == "all_gather"), key=lambda i: t.start_ns[i])
    assert v.playhead == first
    await pilot.press("N", "N", "N")
    assert t.op[v.playhead] == "barrier"
    await pilot.press("P")
    assert t.op[v.playhead] == "broadcast"
    # the focused rank follows the playhead
    assert v.store.rows[v.focused_rank].rank == t.rank[v.playhead]


async def same_collective_on_other_ranks_and_matching_recv(pilot, v):
    t = v.store.table
    inst = v.store.instance(v.playhead)
    seen = {t.rank[v.selection]}
    for _ in range(3):
        await pilot.press("o")
        assert v.store.instance(v.selection) is inst
        seen.add(t.rank[v.selection])
    assert seen == {0, 1, 2, 3}
    assert v.playhead == 0  # o moves the selection, not the playhead
    send = next(i for i in range(len(t)) if t.op[i] == "send" and t.rank[i] == 0)
    v.playhead = send
    await pilot.press("m")
    assert t.op[v.selection] == "recv" and t.rank[v.selection] == 1 and t.peer[v.selection] == 0
    await pilot.press("m")
    assert v.selection == send


async def zoom_pan_and_ranks(pilot, v):
    await pilot.press("plus", "plus")
    assert v.zoom == 2
    await pilot.press("l")
    after_right = v.offset_ns
    await pilot.press("h", "h")
    assert v.offset_ns < after_right
    await pilot.press("minus")
    assert v.zoom == 1
    await pilot.press("f")
    assert (v.zoom, v.offset_ns) == (0, 0)
    k = v.focused_rank
    await pilot.press("j")
    assert v.focused_rank == min(k + 1, 3)
    # the selection follows to the same collective on the newly focused rank
    assert v.store.table.rank[v.selection] == v.store.rows[v.focused_rank].rank
    assert v.store.instance(v.selection) is v.store.instance(v.playhead)
    await pilot.press("k")
    assert v.focused_rank == k
    await pilot.press("down")  # arrows too (no pane takes them away)
    assert v.focused_rank == min(k + 1, 3)


async def test_play_pause_advances_the_playhead():
    async with app_on().run_test(size=SIZE) as pilot:
        v = await viewer(pilot)
        await pilot.press(">", "<", "<")  # 5 -> 10 -> 5 -> 2 events a second
        assert v.speed == 2
        await pilot.press(">", ">")  # (back to 10 a second: the events below play five times sooner than at 2)
        assert v.speed == 10
        await pilot.press("space")
        assert v.playing
        for _ in range(500):
            if v.playhead >= 3:
                break
            await pilot.pause(0.02)
        await pilot.press("space")
        assert not v.playing
        stopped = v.playhead
        assert stopped >= 3
        await pilot.pause(0.2)
        assert v.playhead == stopped


async def test_goto_search_and_the_selection_outside_the_window():
    async with app_on().run_test(size=SIZE) as pilot:
        await each_from_the_start(pilot, await viewer(pilot), selection_outside_the_window_is_not_marked,
                                  goto_and_search_prompts)


async def goto_and_search_prompts(pilot, v):
    await pilot.press("g", *"#20", "enter")
    await pilot.pause()
    assert v.playhead == 20
    await pilot.press("slash", *"barrier rank=2", "enter")
    t = v.store.table
    for _ in range(100):  # the search runs in a thread
        if t.op[v.playhead] == "barrier":
            break
        await pilot.pause(0.05)
    assert t.op[v.playhead] == "barrier" and t.rank[v.playhead] == 2


async def test_views_switch_and_help_lists_every_key_the_app_answers_to():
    async with app_on().run_test(size=SIZE) as pilot:
        v = await viewer(pilot)
        tabs = v.query_one(TabbedContent)
        for key, name in zip("2345671", ("ring", "pipeline", "waits", "links", "charts", "problems", "timeline")):
            await pilot.press(key)
            assert tabs.active == name
        await pilot.press("question_mark")
        assert isinstance(pilot.app.screen, HelpScreen)
        # the app's own bindings (F: follow the newest event, R: next run) are keys too, not only the screen's
        shown = " ".join(map(str, keys_table(pilot.app.screen.bindings_list).columns[1]._cells))
        for b in [*pilot.app.BINDINGS, *ViewerScreen.BINDINGS]:
            if b.tooltip or b.description:
                assert (b.tooltip or b.description) in shown, b
        await pilot.press("escape")
        assert isinstance(pilot.app.screen, ViewerScreen)


async def test_waits_view_jumps_to_the_straggler_and_its_rows_to_what_it_made_the_others_wait_for():
    async with app_on().run_test(size=SIZE) as pilot:
        await each_from_the_start(pilot, await viewer(pilot), waits_view_jumps_to_the_straggler,
                                  a_straggler_s_row_jumps_to_the_collective_it_made_the_others_wait_longest_for)


async def waits_view_jumps_to_the_straggler(pilot, v):
    await pilot.press("4")
    await pilot.pause()
    await pilot.press("enter")  # the collective with the most waiting: the barrier rank 2 was late to
    await pilot.pause()
    t = v.store.table
    assert t.op[v.playhead] == "barrier" and t.rank[v.playhead] == 2
    assert v.query_one(TabbedContent).active == "timeline"


async def test_a_straggler_s_row_jumps_to_the_collective_it_made_the_others_wait_longest_for():
    """(on the pipeline's trace; the 4-rank job's, after the waits view's jump above)"""
    async with app_on(PIPELINE_JOB).run_test(size=SIZE) as pilot:
        await a_straggler_s_row_jumps_to_the_collective_it_made_the_others_wait_longest_for(pilot, await viewer(pilot))


async def a_straggler_s_row_jumps_to_the_collective_it_made_the_others_wait_longest_for(pilot, v):
    """Enter on a rank of the stragglers' table: the playhead goes to that rank's event in the collective it
    arrived last to whose waiting was longest (the first of equals), as the rule reads instance by instance."""
    from textual.widgets import DataTable

    a = v.store.analysis
    jumps = 0
    for k, s in enumerate(a.stragglers):
        late = [c for c in a.collectives if c.last_arrival == s.rank and s.rank in c.ranks]
        want = max(late, key=lambda c: sum(c.waits)).row_of(s.rank) if late else None
        await pilot.press("4")
        await pilot.pause()
        table = v.query_one("#straggler-table", DataTable)
        table.focus()
        table.move_cursor(row=k)
        v.playhead = before = -1
        await pilot.press("enter")
        await pilot.pause()
        assert v.playhead == (before if want is None else want), (s.rank, want)
        jumps += want is not None
    assert jumps


async def test_the_ring_view_steps_and_plays():
    async with app_on().run_test(size=SIZE) as pilot:
        await each_from_the_start(pilot, await viewer(pilot),
                                  a_key_right_after_a_view_s_key_reaches_the_view,  # (before the ring view is built)
                                  ring_view_steps, playing_in_the_ring_view_animates_its_steps)


async def ring_view_steps(pilot, v):
    await pilot.press("2")
    await pilot.press("right_square_bracket", "right_square_bracket")
    assert v.ring_step == 1
    for _ in range(10):
        await pilot.press("right_square_bracket")
    assert v.ring_step == 5  # all_reduce over 4 ranks: 2(N-1) = 6 steps
    await pilot.press("n")
    assert v.ring_step == -1  # a new playhead starts the ring from the beginning


async def a_key_right_after_a_view_s_key_reaches_the_view(pilot, v):
    # as typed fast, or read together on a loaded machine: "2" then "]" before the ring view was built (each
    # analysis view is built when its tab is first shown) must still step the ring
    from textual import events

    assert not v.query("RingView")
    for key, char in (("2", "2"), ("right_square_bracket", "]")):
        pilot.app.post_message(events.Key(key, char))
    await pilot.pause()
    assert v.query_one(TabbedContent).active == "ring" and v.ring_step == 0


async def click_on_timeline_picks_the_event_there(pilot, v):
    tl = v.query_one(Timeline)
    # click rank 2's lane in the middle of the long barrier wait of the others: rank 2 was computing
    # (sleeping) there, so the nearest event on its lane is picked
    y = v.store.rank_index[0]
    x = tl.label_w + tl.lane_width // 2
    await pilot.click(Timeline, offset=(x, y))
    t = v.store.table
    assert t.rank[v.playhead] == 0 and t.op[v.playhead] == "barrier"


def test_detail_shows_values_wait_and_bandwidth():
    s = shared_store()
    t = s.table

    def text(row):
        return detail_text(s, row)

    bcast = next(i for i in range(len(t)) if t.op[i] == "broadcast" and t.rank[i] == 0)
    out = text(bcast)
    assert "root" in out and "[0, 1, 2, 3]" in out  # the recorded values of the broadcast tensor
    barrier = next(i for i in range(len(t)) if t.op[i] == "barrier" and t.rank[i] == 0)
    out = text(barrier)
    assert "wait_at_barrier" in out and "last to arrive: rank 2" in out
    ar = next(i for i in range(len(t)) if t.op[i] == "all_reduce")
    assert "busbw" in text(ar)
    send = next(i for i in range(len(t)) if t.op[i] == "send")
    assert "recv on rank" in text(send)


async def test_pipeline_view_shows_stages():
    from disttrace.tui.widgets.schedule import ScheduleGrid

    async with app_on(PIPELINE_JOB).run_test(size=SIZE) as pilot:
        v = await viewer(pilot)
        await pilot.press("3")
        await wait_until(pilot, lambda: bool(v.query(ScheduleGrid)), "the schedule grid")
        # a row per rank, in stage order (the ranks' own order here: the path found runs 0 → 1 → 2 → 3)
        stages = v.store.analysis.pipeline.stages
        rows = [line.split()[0] for line in screen_text(pilot.app) if line.lstrip()[:1] == "r" and " s" in line]
        assert rows[:len(stages)] == [f"r{r}" for r in stages]


# -- bad input: one line, exit 2, no traceback, no screen ----------------------------------------------

def run_view_subprocess(*args):
    return subprocess.run([sys.executable, "-m", "disttrace", "view", *map(str, args)], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def run_view(capsys, *args):
    """`disttrace view ARGS` through the real CLI, in this process (bad input never starts the app)."""
    from disttrace.tracer.cli import main

    rc = main(["view", *map(str, args)])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, rc, out, err)


@pytest.mark.parametrize("case", [pytest.param("missing", marks=pytest.mark.slow),  # (a real process: `python -m`)
                                  "not_a_trace", "empty_file", "empty_dir", "newer"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, capsys):
    if case == "missing":
        target = tmp_path / "nope"
    elif case == "not_a_trace":
        target = tmp_path / "notes.txt"
        target.write_text("hello, this is not a trace\n")
    elif case == "empty_file":
        target = tmp_path / "events.jsonl"
        target.write_text("")
    elif case == "empty_dir":
        target = tmp_path / "trace"
        target.mkdir()
    else:
        target = tmp_path / "events.jsonl"
        ev = orjson.loads(TUI_JOB.read_bytes().splitlines()[0])
        ev["v"] = 99
        target.write_bytes(orjson.dumps(ev) + b"\n")
    proc = run_view_subprocess(target) if case == "missing" else run_view(capsys, target)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("disttrace view: error:"), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    if case == "newer":
        assert "newer" in lines[0]


def test_no_terminal_is_one_line_and_exit_2(capsys, monkeypatch):
    # under pytest stdout is captured, not a terminal: the viewer refuses before it draws (were it started, the
    # patched run fails the test instead of hanging it)
    monkeypatch.setattr(DisttraceApp, "run", lambda self: pytest.fail("the viewer started without a terminal"))
    proc = run_view(capsys, TUI_JOB)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "disttrace view: error: the viewer needs a terminal, and stdin and stdout are not one; "
        "`disttrace report TRACE` writes the analysis as text"], proc.stderr
    # --follow too, before it waits for a job's first events
    proc = run_view(capsys, "--follow", TUI_JOB)
    assert proc.returncode == 2 and "needs a terminal" in proc.stderr and len(proc.stderr.splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("tty", ["none", "stdin", "stdout"])
def test_no_terminal_refused_in_a_real_process(tty):
    """`disttrace view T </dev/null >out` and its halves: one line, exit 2, no escape codes, no hang."""
    import os
    import pty

    master = slave = None
    if tty != "none":
        master, slave = pty.openpty()
    stdin = slave if tty == "stdin" else subprocess.DEVNULL
    stdout = slave if tty == "stdout" else subprocess.PIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "disttrace", "view", str(TUI_JOB)], stdin=stdin, stdout=stdout,
                              stderr=subprocess.PIPE, timeout=60)
        written = proc.stdout or b""
        if tty == "stdout":
            os.set_blocking(master, False)
            try:
                written = os.read(master, 65536)
            except (BlockingIOError, OSError):
                written = b""
    finally:
        for fd in (master, slave):
            if fd is not None:
                os.close(fd)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert err.count("\n") == 1 and "needs a terminal" in err, err
    not_one = {"none": "stdin and stdout are not one", "stdin": "stdout is not one", "stdout": "stdin is not one"}
    assert not_one[tty] in err, err
    assert b"\x1b" not in written, written[:200]


async def test_problems_view_jumps_to_the_hang():
    async with app_on(HANG).run_test(size=SIZE) as pilot:
        v = await viewer(pilot)
        await pilot.press("7")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        t = v.store.table
        # the hang: rank 3 never entered the last all_reduce; the others' never-finished events are where it shows
        assert t.op[v.playhead] == "all_reduce" and t.status[v.playhead] == "unfinished"
        assert v.query_one(TabbedContent).active == "timeline"


async def test_loads_in_the_worker_then_shows_the_analysis():
    # no preloaded store: the worker reads the trace, shows the timeline, then adopts the analysis
    app = DisttraceApp([str(TUI_JOB)])
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(600):
            if isinstance(app.screen, ViewerScreen) and app.screen.store.analysed and not app.screen.analysis_label:
                break
            await pilot.pause(0.05)
        v = app.screen
        assert isinstance(v, ViewerScreen) and v.store.analysed and v.analysis_label == ""
        # each analysis tab gets its view when first shown
        assert not v.query("WaitsView")
        await pilot.press("4")
        assert v.query("WaitsView") and not v.query("#waits .pending")
        await pilot.press("2")
        assert v.query("RingView")
        await pilot.press("1")
        await pilot.press("N", "N")  # from before the first event: the all_reduce, then the all_gather
        assert v.store.table.op[v.playhead] == "all_gather"


async def command_palette_lists_the_viewer_actions(pilot, v):
    titles = [c.title for c in pilot.app.get_system_commands(v)]
    assert any(t.startswith("next collective") for t in titles)
    assert any(t.startswith("ring view") for t in titles)
    cmd = next(c for c in pilot.app.get_system_commands(v) if c.title.startswith("next event"))
    result = cmd.callback()  # what the palette does when the command is chosen
    if inspect.isawaitable(result):
        await result
    await pilot.pause()
    assert v.playhead == 1


async def playing_in_the_ring_view_animates_its_steps(pilot, v):
    await pilot.press("2", ">")  # 10 steps a second
    first = v.playhead
    seen = []  # every step the view was given (polling it missed steps on a loaded machine)
    v.watch(v, "ring_step", lambda step: seen.append(step) if v.playhead == first else None, init=False)
    await pilot.press("space")
    for _ in range(500):
        await pilot.pause(0.02)
        if v.playhead != first:
            break
    await pilot.press("space")
    seen = [step for step in seen if step >= 0]
    # the steps of the 4-rank all_reduce one after the other, up to the last of its 2(N-1) = 6
    assert seen == sorted(seen) and seen[-1] == 5 and len(seen) >= 3
    assert v.store.instance(v.playhead) is not v.store.instance(first)  # then the next collective


def marked_cols(tl: Timeline, y: int) -> list[int]:
    from disttrace.tui.widgets.palette import BG_SELECTED

    return cols_where(tl, y, lambda style: style.bgcolor == BG_SELECTED)


async def selection_outside_the_window_is_not_marked(pilot, v):
    """An event selected left of the visible window marks no cell: column 0 keeps its own look (the selection
    was drawn there as if it were in the window)."""
    tl = v.query_one(Timeline)
    sel = v.selection
    assert sel >= 0
    y = v.store.rank_index[v.store.table.rank[sel]]
    assert marked_cols(tl, y)  # at zoom 0 the selected first event is marked
    await pilot.press(*["plus"] * 4)
    # pan right until the selection (and its collective on the other ranks) ends left of the window
    marked = [row for rows in tl._highlight_rows().values() for row in rows]
    assert sel in marked
    end = max(v.store.end_of(row) for row in marked) - v.store.t0
    while v.offset_ns <= end:
        before = v.offset_ns
        await pilot.press("l")
        assert v.offset_ns > before
    assert v.selection == sel
    assert all(tl.col_of(v.store.end_of(row) - 1) < 0 for row in marked)
    for k in range(len(v.store.rows)):
        assert 0 not in marked_cols(tl, k), f"lane {k}: column 0 marked for a selection left of the window"


@pytest.mark.draws_ahead
async def test_the_lanes_that_n_scrolls_to_are_drawn_ahead():
    """With more ranks than lines, the next event is on a rank off screen: n scrolls the timeline there, and the
    lanes it shows were drawn while the view rested (drawn cold, a screen of them took a key 50-75 ms at 10M
    events, 1,024 ranks)."""
    from disttrace.tui.model.lod import Lane

    n_ranks = 60
    events = [ev(r, "all_reduce", 1000 * (60 * k + r), 1000 * (60 * k + r) + 500, group="world",
                 group_ranks=list(range(n_ranks)), seq=k) for k in range(3) for r in range(n_ranks)]
    async with DisttraceApp(["many_ranks"], store=store_of(events), step_mode=True).run_test(size=(100, 24)) as pilot:
        v = await viewer(pilot)
        timeline = v.query_one(Timeline)
        height = timeline.scrollable_content_region.height
        assert height < n_ranks
        v.playhead = next(  # the first event of the last rank on screen
            i for i in range(v.store.n_events) if v.store.table.rank[i] == height - 1)
        await pilot.pause(0.3)
        for _ in range(200):  # the view rests: everything planned is drawn, nothing more planned
            if not timeline._ahead and timeline._ahead_timer is None:
                break
            await pilot.pause(0.05)
        assert not timeline._ahead and timeline._ahead_timer is None
        timeline.AHEAD_DELAY_S = 1e6  # nothing drawn ahead after the key: what it shows was there before it
        drawn = []
        real = Lane.glyph_keys

        def counted(self, *args):
            drawn.append(1)
            return real(self, *args)

        Lane.glyph_keys = counted
        try:
            await pilot.press("n")
            await pilot.pause(0.1)
        finally:
            Lane.glyph_keys = real
        assert v.store.table.rank[v.playhead] == height and timeline.scroll_y > 0  # scrolled to the rank below
        assert drawn == []


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (200, 50)])
async def test_the_prompts_show_what_is_typed(size):
    """`/` and `g`: the typed text is on screen at every size (a bordered input once showed only its borders)."""
    from disttrace.tui.screens.prompt import Prompt

    async with app_on().run_test(size=size) as pilot:
        await viewer(pilot)
        for key, label in (("slash", "search"), ("g", "go to")):
            await pilot.press(key)
            await wait_until(pilot, lambda: isinstance(pilot.app.screen, Prompt), "prompting")
            await pilot.press(*"all_gat")
            await pilot.pause()
            lines = screen_text(pilot.app)
            at = next(i for i, line in enumerate(lines) if line.strip().startswith(label))
            assert "all_gat" in lines[at + 1], "\n".join(lines[at - 1:])
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(pilot.app.screen, ViewerScreen), "back to the viewer")


async def test_browsing_starts_before_the_first_event_and_one_numbering_in_go_to_the_list_the_detail_and_status():
    """`g` #16 lands on the list's #16, which the detail pane and the status line call #16 too (200 columns: the
    list has room for its # column)."""
    async with app_on(step_mode=False).run_test(size=(200, 50)) as pilot:
        v = await viewer(pilot)
        # browsing starts before the first event
        assert v.playhead == -1 and v.selection == -1
        await pilot.press("n")
        assert v.playhead == 0 and v.selection == 0
        await pilot.press("g", "#", "1", "6", "enter")
        await wait_until(pilot, lambda: v.playhead == 16, "on #16")
        await pilot.pause()
        lines = screen_text(pilot.app)
        status = next(line for line in lines if "❚❚" in line)
        assert f"#16 of {v.store.n_events} @" in status, status
        assert "17/" not in status
        listed = next(line for line in lines if line.startswith("▶"))  # the list's line with the playhead
        assert listed.split()[1] == "16", listed
        assert "#16 on rank" in detail_text(v.store, 16)


async def test_the_detail_pane_shows_every_column_beside_its_scrollbar():
    """80×24: the barrier's fields overflow the pane, its scrollbar shows, and no field loses its last column
    under it (the fields were rendered a column wider than shown: "FR'" for "FR's op_id"). Browsing: before the
    first event the pane holds one short line, without a scrollbar, until `g` brings the long event."""
    from disttrace.tui.widgets.detail import DetailPane

    async with app_on(step_mode=False).run_test(size=(80, 24)) as pilot:
        v = await viewer(pilot)
        await pilot.press("g", "#", "1", "6", "enter")
        pane = v.query_one(DetailPane)
        await wait_until(pilot, lambda: v.selection == 16 and pane._shown[0] == 16, "showing #16")
        await pilot.pause()
        assert pane.show_vertical_scrollbar
        lines = screen_text(pilot.app)
        top = pane.content_region.y
        rendered = [strip.text.rstrip() for strip in pane._lines[: pane.content_region.height]]
        assert any(len(text) >= pane.scrollable_content_region.width - 1 for text in rendered)  # one fills its width
        for i, text in enumerate(rendered):
            assert text.strip() in lines[top + i], (text, lines[top + i])


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_a_long_narration_scrolls_to_its_last_line(size):
    """A narration longer than its box (the pipeline and ZeRO-1 demos' last lessons): the border says there is
    more, PgDn brings the last line on screen, and the next event's text starts at its top again."""
    from disttrace.tui.model.narration import Narration
    from disttrace.tui.widgets.detail import NarrationPane

    lesson = "\n".join(f"lesson line {k}: what the ranks did at this step" for k in range(40))
    narration = Narration("a long lesson", "intro", [({"rank": 0}, lesson), ({}, "short")], "")
    async with app_on(narration=narration).run_test(size=size) as pilot:
        v = await viewer(pilot)
        pane = v.query_one(NarrationPane)
        v.playhead = v.store.table.rank.index(0)  # rank 0's first event: the long lesson
        await wait_until(pilot, lambda: pane.border_subtitle == "▼ more: PgDn", "saying there is more")
        assert not any("lesson line 39" in line for line in screen_text(pilot.app))
        for _ in range(10):
            await pilot.press("pagedown")
        await wait_until(pilot, lambda: pane.border_subtitle == "▲ PgUp", "at the end")
        await pilot.pause()
        assert any("lesson line 39" in line for line in screen_text(pilot.app))
        await pilot.press("pageup")
        await wait_until(pilot, lambda: pane.border_subtitle == "▲▼ PgUp / PgDn", "in the middle")
        row = next(i for i in range(len(v.store.table)) if v.store.table.rank[i] != 0)
        v.playhead = row  # an event of another rank: the short text, from its top
        await wait_until(pilot, lambda: pane.scroll_y == 0 and pane.border_subtitle == "", "at the next text's top")


async def chart_text(app, key: str, chart: str, size) -> str:
    """The screen's text once the view of `key` shows its chart (id `chart`), lines joined."""
    async with app.run_test(size=size) as pilot:
        v = await viewer(pilot)
        await pilot.press(key)
        await wait_until(pilot, lambda: bool(v.query(f"#{chart}")), f"showing {chart}")
        await pilot.pause()
        return " ".join(line.strip() for line in screen_text(pilot.app))


async def test_at_80x24_the_charts_the_path_view_and_the_ring_view_say_what_they_show():
    async with app_on().run_test(size=(80, 24)) as pilot:
        await each_from_the_start(pilot, await viewer(pilot), at_80x24_the_charts_keep_their_titles,
                                  at_80x24_the_path_view_shows_its_root_causes,
                                  the_ring_view_says_a_collectives_schedule_is_a_model)


async def at_80x24_the_charts_keep_their_titles(pilot, v):
    """plotext leaves out a title wider than the plot: the chart writes it itself, wrapped."""
    await pilot.press("6")
    await wait_until(pilot, lambda: bool(v.query("#bw-chart")), "showing the charts")
    await pilot.pause()
    text = " ".join(line.strip() for line in screen_text(pilot.app))
    assert "busbw (GB/s) against message size (bytes): measured (median per size) and the α-β model" in text
    assert "durations of all_reduce (ms)" in text


async def at_80x24_the_path_view_shows_its_root_causes(pilot, v):
    """80×24: the root causes' table had room for its header only; now each table keeps rows, and the view
    scrolls (tab brings the causes' table into view)."""
    from textual.widgets import DataTable

    await pilot.press("8")
    await wait_until(pilot, lambda: bool(v.query("#cause-table")), "showing the path view")
    await pilot.pause()
    causes = v.query_one("#cause-table", DataTable)
    assert causes.size.height >= 5 and causes.row_count >= 4
    await pilot.press("tab")
    await wait_until(pilot, lambda: causes.has_focus, "in the causes' table")
    await pilot.pause()
    cause = v.store.analysis.causes[0]
    lines = screen_text(pilot.app)
    from disttrace.tracer.units import fmt_ns_short

    caused = fmt_ns_short(cause.caused_wait_ns)
    assert any(line.split()[:2] == [f"r{cause.rank}", cause.kind] and caused in line for line in lines), lines


async def test_at_80x24_the_waits_view_says_its_tables_scroll():
    """80×24: the steps' table shows 4 of the 6 steps; its title says how many there are and how to reach them."""
    from textual.widgets import DataTable

    from tui_helpers import steps_store

    async with DisttraceApp(["steps.jsonl"], store=steps_store()).run_test(size=(80, 24)) as pilot:
        v = await viewer(pilot)
        await pilot.press("4")
        await wait_until(pilot, lambda: bool(v.query("#step-table")), "showing the waits view")
        await pilot.pause()
        table = v.query_one("#step-table", DataTable)
        assert table.row_count == 6 and table.size.height - 1 < 6  # (a header line, then fewer rows than steps)
        text = " ".join(line.strip() for line in screen_text(pilot.app))
        assert "6 steps found (tab, ↑↓: scroll; enter:" in text, text  # (its last word on the next line)
        assert ("12 collectives where ranks waited, by total wait (tab, ↑↓: scroll; enter: show in the timeline)"
                in text), text
        await pilot.press("tab")
        await wait_until(pilot, lambda: table.has_focus, "in the steps' table")
        await pilot.press(*["down"] * 5)
        await pilot.pause()
        # the last step, scrolled to (its row beside a row of the ranks' table, on the left)
        assert any(re.search(r"(^|\s)5\s+19ms\s", line) for line in screen_text(pilot.app))


async def the_ring_view_says_a_collectives_schedule_is_a_model(pilot, v):
    """A recorded all_reduce's ring is the textbook schedule for its size, not what was measured: the view says
    so; a ring written by hand with send/recv shows its recorded messages, and says that instead."""
    await pilot.press("2", "right_square_bracket")
    await wait_until(pilot, lambda: bool(v.query("RingView")), "showing the ring view")
    await pilot.pause()
    text = " ".join(line.strip() for line in screen_text(pilot.app))
    assert "all_reduce of group 0" in text and "Step 1 of 6" in text
    assert "A model, not a measurement: the chunks a ring algorithm would move for an op of this size." in text
    await pilot.press("g", *"#22", "enter")
    await wait_until(pilot, lambda: v.playhead == 22, "on the hand-written ring")
    await pilot.pause()
    text = " ".join(line.strip() for line in screen_text(pilot.app))
    assert "Hand-written send/recv exchange" in text and "recorded messages" in text, text
    assert "A model" not in text


async def test_a_black_box_trace_says_it_is_a_window_in_the_header_and_the_problems_tab(tmp_path):
    """A black-box trace holds the rings' last ops, not the run: the header says so from the first frame, and the
    Problems tab gives the report's notes (the window's steps and ops) above the problems."""
    from ringfiles import rank_files_of, to_black_box
    from synthetic import MS, Trace

    tr = Trace(2)
    for k in range(40):
        tr.coll("all_reduce", dict.fromkeys(range(2), k * 10 * MS), k * 10 * MS + MS, nbytes=1024,
                site="train.py:30 in step")
    to_black_box(rank_files_of(tr, tmp_path / "plain"), tmp_path / "box", {0: 3000, 1: 4000})
    async with DisttraceApp([str(tmp_path / "box")]).run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, ViewerScreen) and pilot.app.screen.store.analysed,
                         "the analysis")
        v = await viewer(pilot)
        assert "black box: the rings' last ops" in pilot.app.sub_title, pilot.app.sub_title
        await pilot.press("7")
        await wait_until(pilot, lambda: v.query("#analysis-notes"), "the Problems tab's notes")
        text = " ".join(line.strip() for line in screen_text(pilot.app))
        assert "notes: black-box trace: a window, not the whole run" in text, text
        assert v.query_one("#analysis-notes")


async def test_run_tab_charts_the_whole_run_of_a_black_box_trace(tmp_path):
    """Tab 0: each rank's time in collectives per window over the whole run (the black box's aggregates) and the
    straggler's sentence; a trace without aggregates says how to get them."""
    from agg_files import simulate
    from disttrace.tui.loading import load_store

    simulate(str(tmp_path), slow=(1, 40, 40.0))
    store, _ = load_store([str(tmp_path)])
    for size in ((80, 24), SIZE):
        text = await chart_text(DisttraceApp([str(tmp_path)], store=store), "0", "run-chart", size)
        assert "rank 1 from step 40 on, +" in text
        assert "time in collectives a step (ms), per window and rank" in text
    await absent_tab_says_why("run", "0", "No whole-run aggregates in this trace")


async def absent_tab_says_why(tab: str, key: str, says: str) -> None:
    """On a trace without what the tab shows (tui_job.jsonl): no tab, and its key says how to get it."""
    app = app_on()
    told = []
    app.notify = lambda message, **kw: told.append(message)
    async with app.run_test(size=SIZE) as pilot:
        v = await viewer(pilot)
        assert not v.query(f"#{tab}")
        await pilot.press(key)
        await pilot.pause()
        assert v.query_one(TabbedContent).active == "timeline"
        assert any(m.startswith(says) for m in told), told


async def test_memory_tab_at_80x24_and_120x40(tmp_path, monkeypatch):
    """Key M on a trace recorded with --memory (tests/tui/data/mem_ddp): the run's peak with its op and line, the
    leak and the imbalance, the chart with the step numbers under it, the chosen step's breakdown per rank and the
    formula's row, the formula beside (120) or under (80); a trace without memory has no tab and M says why."""
    from disttrace.tui.loading import load_store
    from tui_helpers import memory_trace

    monkeypatch.chdir(tmp_path)
    path = memory_trace(tmp_path)
    store, _ = load_store([path])
    for size in ((80, 24), SIZE):
        text = re.sub(r"\s+", " ", await chart_text(DisttraceApp([path], store=store), "M", "memory-chart", size))
        assert "M Memory" in text and "▲ peak 25.6 MiB on rank 1 in step 29: aten.div.Tensor at mem_train.py:56" in text
        assert "leak: rank 1 from step 20 (activations)" in text and "4 8 12 16 20 24 28" in text
        assert "step 1 params grads optim. activ. temp. comm outside peak" in text, text
        assert "rank 0 1MiB 1MiB 2.01MiB 9.07MiB" in text and "formula 1MiB 1MiB 2.01MiB" in text
        assert "DDP: (4 + 4 + 8)Ψ; Ψ = 263,168 values" in text
        if size == SIZE:
            assert "measured/predicted: params 1.00, grads 1.00," in text  # (beside the breakdown)
    await absent_tab_says_why("memory", "M", "No memory samples in this trace: `disttrace run --memory`")


async def test_memory_tab_picks_the_previous_and_next_step_with_brackets(tmp_path, monkeypatch):
    """[ and ] on the Memory tab: the breakdown, its title, the note on its peak and the chart's chosen window move
    to the previous or next step (of the first steady, step 1); past step 0 the screen says it is the first."""
    from disttrace.tui.loading import load_store
    from tui_helpers import memory_trace

    monkeypatch.chdir(tmp_path)
    path = memory_trace(tmp_path)
    store, _ = load_store([path])
    async with DisttraceApp([path], store=store).run_test(size=(80, 24)) as pilot:
        v = await viewer(pilot)
        await pilot.press("M")
        await wait_until(pilot, lambda: bool(v.query("#memory-chart")), "showing the memory chart")
        view = v.query_one("MemoryView")
        window = view.figures.chart.chosen

        def text():
            return re.sub(r"\s+", " ", " ".join(line.strip() for line in screen_text(pilot.app)))

        await pilot.pause()
        assert "step 1 (first steady; [ ] another)" in text()
        await pilot.press("right_square_bracket", "right_square_bracket")
        await pilot.pause()
        assert "step 3 params grads" in text() and "step 3 (picked; [ ] another): peak 13.6MiB on rank 0" in text()
        assert "rank 1 1MiB 1MiB 2.01MiB 64KiB" in text()  # (step 1's activations: 1.07MiB)
        assert view.figures.chart.chosen[0] > window[1]  # the chosen window moved right, past step 1's
        told = []
        monkeypatch.setattr(v, "notify", lambda message, **kw: told.append(message))
        await pilot.press(*["left_square_bracket"] * 4)
        await pilot.pause()
        assert "step 0 params grads" in text() and told == ["this is the first step"]
