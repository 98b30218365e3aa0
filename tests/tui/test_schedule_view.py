"""The Pipeline tab's schedule grid (tui/model/schedule.py, tui/widgets/schedule.py) on checked-in traces of real
jobs: torch.distributed.pipelining's 1F1B on 2 ranks (pp_1f1b.jsonl: tests/jobs/pp_schedules.py --schedule=1f1b,
4 iterations of 4 micro-batches) and the pipeline demo (pipeline_demo.jsonl and its narration: a GPipe iteration,
then a 1F1B one)."""

from __future__ import annotations

import json

from disttrace.tui.app import DisttraceApp
from disttrace.tui.model.narration import Narration
from disttrace.tui.model.schedule import BLANK, CUT, IDLE, ScheduleModel
from disttrace.tui.screens.viewer import ViewerScreen
from disttrace.tui.widgets.schedule import ScheduleGrid
from disttrace.tui.widgets.pipeline import PipelineView

from tui_helpers import DATA, PIPELINE_JOB, shared_store, screen_text, wait_until

PP_1F1B = DATA / "pp_1f1b.jsonl"
GPIPE_WARMUP = DATA / "gpipe_warmup.jsonl"  # tests/jobs/pp_gpipe_warmup.py: its first iteration 356 ms, then 86, 65
DEMO = DATA / "pipeline_demo.jsonl"
SIZE = (120, 40)
MS = 1_000_000


def demo_narration() -> Narration:
    d = json.loads((DATA / "pipeline_demo.narration.json").read_text())
    return Narration(d["title"], d["intro"], [(s["match"], s["text"]) for s in d["steps"]], d["summary"],
                     d.get("view", ""))


def app_on(path, **kw) -> DisttraceApp:
    return DisttraceApp([path.name], store=shared_store(path), step_mode=True, **kw)


async def pipeline_tab(pilot) -> tuple[ViewerScreen, PipelineView, ScheduleGrid]:
    await pilot.pause()
    v = pilot.app.screen
    assert isinstance(v, ViewerScreen)
    if v.query_one("TabbedContent").active != "pipeline":
        await pilot.press("3")
    await wait_until(pilot, lambda: bool(v.query(ScheduleGrid)), "the grid shown")
    return v, v.query_one(PipelineView), v.query_one(ScheduleGrid)


# -- the model --------------------------------------------------------------------------------------------------

def test_the_model_holds_each_iteration_s_cells_in_stage_order():
    store = shared_store(PP_1F1B)
    m = ScheduleModel(store)
    assert [it.index for it in m.iterations] == [0, 1, 2, 3] and {it.kind for it in m.iterations} == {"1F1B"}
    for n in range(4):
        cells = m.cells[n]
        for r in (0, 1):
            mine = [c for c in cells if c.rank == r]
            assert sorted(c.label for c in mine) == ["B0", "B1", "B2", "B3", "F0", "F1", "F2", "F3"]
        # 1F1B on 2 stages: the first stage runs two forwards before its first backward, the last one alternates
        order = [c.label for c in sorted((c for c in cells if c.rank == 0), key=lambda c: c.start_ns)]
        assert order == ["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"]
        order = [c.label for c in sorted((c for c in cells if c.rank == 1), key=lambda c: c.start_ns)]
        assert order == ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]


def test_the_playhead_s_iteration_and_computation():
    store = shared_store(PP_1F1B)
    m = ScheduleModel(store)
    t = store.table
    for n in range(4):
        first = m.first_row(n)
        assert m.at(first) == n
        assert t.rank[first] == 0 and t.op[first] == "send"  # the first stage sends its first forward's output
        assert m.cell_at(n, first).label == "F0"
    # each of rank 1's recvs of an activation feeds the forward of the same micro-batch
    recvs = [i for i in range(len(t)) if t.rank[i] == 1 and t.op[i] == "recv" and t.api[i] != "recv_object_list"
             and t.api[i] != "recv"]
    labels = [m.cell_at(m.at(i), i).label for i in recvs]
    assert labels[:4] == ["F0", "F1", "F2", "F3"]
    assert m.neighbour(0, -1) is None and m.neighbour(0, 1) == 1 and m.position(2) == (3, 4)


def test_one_iteration_in_columns():
    store = shared_store(PP_1F1B)
    m = ScheduleModel(store)
    rows, ideal, ns = m.layout(0, 100, 0, 0)
    assert [r.label for r in rows] == ["r0 s0", "r1 s1"] and [r.label for r in ideal] == ["s0", "s1"]
    assert ns * 100 == m.span(0)
    for row in rows + ideal:
        drawn = [k for k in row.cols if k >= 0]
        assert set(drawn) == set(range(len(row.cells)))  # every computation gets columns, in time order
        assert drawn == sorted(drawn, key=lambda k: row.cells[k].start_ns)
        assert IDLE in row.cols and CUT not in row.cols  # (no start-up wait in this trace's iterations)
    # zoomed in 4x on the middle: a quarter of the span, the columns of the window only
    rows4, _, ns4 = m.layout(0, 100, 2, m.span(0) // 2)
    assert ns4 == ns / 4 and BLANK not in rows4[0].cols[:10]


def test_the_textbook_grid_s_idle_time_by_where_it_comes_from():
    """GPipe on 2 stages drawn ideally: stage 1 fills for a forward and drains for a backward, stage 0 waits between
    its last forward and its first backward for stage 1's last forward and first backward (the schedule's own wait:
    the idle table puts it beside the measured waits); 1F1B's stage 0 holds 2 micro-batches, GPipe's all 4."""
    m = ScheduleModel(shared_store(DEMO))
    assert [it.kind for it in m.iterations] == ["GPipe", "1F1B"]
    d = m.durations(0)
    (w0, c0, between0, held0), (w1, c1, between1, held1) = m.ideal_idle(0)
    assert (w0, c0, between0, held0) == (0, 0, d["F"] + d["B"], 4)
    assert (w1, c1, between1, held1) == (d["F"], d["B"], 0, 4)
    assert [x[3] for x in m.ideal_idle(1)] == [2, 1]


def test_a_narrow_cell_keeps_its_micro_batch():
    """A cell too narrow for F3' (interleaved 1F1B at 80 columns) drops its kind (its colour tells it), then its
    virtual stage's mark: the micro-batch stays."""
    from disttrace.tui.model.schedule import Cell
    from disttrace.tui.widgets.schedule import _fit

    later = Cell(0, 4, "F", 3, 0, 1)  # rank 0's second virtual stage of 4 ranks
    assert [_fit(later, 4, run) for run in (5, 3, 2, 1)] == ["F3'  ", "F3'", "3'", "3"]
    assert [_fit(Cell(1, 1, "B", 12, 0, 1), 4, run) for run in (3, 2, 1)] == ["B12", "12", "1"]


# -- the view ---------------------------------------------------------------------------------------------------

async def test_the_grid_follows_the_playhead_and_steps_by_iteration():
    async with app_on(PP_1F1B).run_test(size=SIZE) as pilot:
        v, view, grid = await pipeline_tab(pilot)
        assert grid.iteration == 0 and "Iteration 1 of 4" in "\n".join(screen_text(pilot.app))
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: grid.iteration == 1, "the next iteration on ]")
        assert v.playhead == grid.model.first_row(1) and grid.here.label == "F0"
        screen = "\n".join(screen_text(pilot.app))
        assert "Iteration 2 of 4 (step 1): 1F1B, P = 2, M = 4." in screen and "textbook" in screen
        for _ in range(3):
            await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: grid.iteration == 3, "the last iteration")
        await pilot.press("left_square_bracket")
        await wait_until(pilot, lambda: grid.iteration == 2, "back one iteration on [")
        # n moves the playhead event by event: the grid's computation follows it
        before = grid.here
        await pilot.press("n", "n")
        await wait_until(pilot, lambda: grid.here != before, "the playhead's computation to move")


async def test_the_tab_opens_on_the_first_steady_iteration_and_the_warm_up_one_is_marked():
    """A hand-written GPipe whose first iteration holds 267 ms of start-up waits (356 ms against 86 and 65): the tab
    opened before the playhead moved shows the first steady iteration, on its own scale; [ reaches the warm-up one,
    marked as such and as left out of the mean bubble."""
    async with DisttraceApp([GPIPE_WARMUP.name], store=shared_store(GPIPE_WARMUP)).run_test(size=SIZE) as pilot:
        v, view, grid = await pipeline_tab(pilot)
        m = grid.model
        assert v.playhead == -1 and grid.iteration == 1 and m.span(1) < 100 * MS, (grid.iteration, m.span(0))
        assert [it.warmup for it in m.iterations] == [True, False, False]
        screen = " ".join(" ".join(screen_text(pilot.app)).split())
        assert "Iteration 2 of 3 (step 1): GPipe" in screen and "warm-up" not in screen.split("textbook")[0], screen
        assert "the schedule's bubble 58.8% (the steady iterations' mean)" in screen, screen
        await pilot.press("left_square_bracket")
        await wait_until(pilot, lambda: grid.iteration == 0, "the warm-up iteration on [")
        screen = " ".join(" ".join(screen_text(pilot.app)).split())
        assert "Iteration 1 of 3 (step 0, warm-up, not in the mean bubble): GPipe" in screen, screen
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: grid.iteration == 1, "back to the first steady iteration on ]")


async def test_the_grid_zooms_on_the_playhead_s_computation_and_pans():
    async with app_on(PP_1F1B).run_test(size=SIZE) as pilot:
        v, view, grid = await pipeline_tab(pilot)
        assert pilot.app.focused is grid
        await pilot.press("right_square_bracket", "n", "n", "n")  # iteration 2's third event
        await wait_until(pilot, lambda: grid.here is not None, "a computation at the playhead")
        await pilot.press("plus", "plus")
        assert grid.zoom == 2
        here = grid.here
        it = grid.model.iterations[grid.iteration]
        window = grid.model.span(grid.iteration) / 4
        assert grid.offset_ns <= here.start_ns - it.start_ns and here.end_ns - it.start_ns <= grid.offset_ns + window
        start = grid.offset_ns
        await pilot.press("right")
        assert grid.offset_ns > start
        assert v.zoom == 0  # the timeline's zoom is its own
        await pilot.press("f")
        assert (grid.zoom, grid.offset_ns) == (0, 0)


async def test_the_demo_opens_on_the_grid_with_its_narration():
    async with DisttraceApp([DEMO.name], store=shared_store(DEMO), narration=demo_narration()).run_test(
            size=(100, 30)) as pilot:
        v, view, grid = await pipeline_tab(pilot)
        assert v.query_one("TabbedContent").active == "pipeline"
        await wait_until(pilot, lambda: "GPipe, forward of micro-batch 0" in "\n".join(screen_text(pilot.app)),
                         "the first message's narration above the grid")
        screen = "\n".join(screen_text(pilot.app))
        assert "Iteration 1 of 2 (step 0): GPipe" in screen and "(P−1)/(M+P−1) = (2−1)/(4+2−1)" in screen
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: "Iteration 2 of 2 (step 1): 1F1B" in "\n".join(screen_text(pilot.app)),
                         "the 1F1B iteration")


async def test_a_pipeline_without_backwards_is_drawn_too():
    async with app_on(PIPELINE_JOB).run_test(size=SIZE) as pilot:
        v, view, grid = await pipeline_tab(pilot)
        rows = [line for line in screen_text(pilot.app) if line.lstrip().startswith(("r0 s0", "r3 s3"))]
        assert len(rows) == 2 and all("F0" in r and "F3" in r and "B" not in r.split(maxsplit=2)[2] for r in rows)
        assert "forward only" in "\n".join(screen_text(pilot.app))
