"""Snapshots of every view on committed traces of real jobs (tests/tui/data), at a fixed terminal size.

Update after a deliberate change with: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

from pathlib import Path

import pytest

from disttrace.tui.app import DisttraceApp
from disttrace.tui.model.narration import Narration

from tui_helpers import DATA, PIPELINE_JOB, TUI_JOB, shared_steps_store, shared_store

PP_1F1B = DATA / "pp_1f1b.jsonl"  # tests/jobs/pp_schedules.py --schedule=1f1b, 2 ranks
PIPELINE_DEMO = DATA / "pipeline_demo.jsonl"  # `disttrace demo pipeline-parallel`: GPipe, then 1F1B
GOLDEN = Path(__file__).parent.parent / "golden" / "traces"  # tests/golden/test_golden.py says what each holds


def demo_narration() -> Narration:
    import json

    d = json.loads((DATA / "pipeline_demo.narration.json").read_text())
    return Narration(d["title"], d["intro"], [(s["match"], s["text"]) for s in d["steps"]], d["summary"],
                     d.get("view", ""))

SIZE = (120, 40)


def app_on(path=TUI_JOB, step_mode=True, **kw) -> DisttraceApp:
    # the header shows the path: only the file name, so the snapshots do not depend on where the repo is
    return DisttraceApp([path.name], store=shared_store(path), step_mode=step_mode, **kw)


def test_timeline_start(snap_compare):
    # browsing (not --step): the playhead waits before the first event, the status line says what to press
    assert snap_compare(app_on(step_mode=False), terminal_size=SIZE)


def test_timeline_at_the_straggler_barrier(snap_compare):
    # the barrier rank 2 came late to: the others' waiting part (▒), selection on every rank
    assert snap_compare(app_on(), press=["N", "N", "N", "N"], terminal_size=SIZE)


def test_timeline_zoomed_small_terminal(snap_compare):
    assert snap_compare(app_on(), press=["N", "plus", "plus", "plus", "j"], terminal_size=(80, 24))


def test_ring_view_all_reduce_step(snap_compare):
    assert snap_compare(app_on(), press=["2", "right_square_bracket", "right_square_bracket"], terminal_size=SIZE)


def test_ring_view_hand_written_ring(snap_compare):
    assert snap_compare(app_on(), press=["g", *"#22", "enter", "2"], terminal_size=SIZE)


def test_pipeline_view(snap_compare):
    # a forward-only pipeline of 4 stages: its schedule grid has forwards only
    assert snap_compare(app_on(PIPELINE_JOB), press=["3"], terminal_size=SIZE)


def test_pipeline_schedule_grid(snap_compare):
    # torch.distributed.pipelining's 1F1B on 2 stages: its second iteration (]), the playhead on its third event
    # (micro-batch 1's forward highlighted on both stages), the textbook grid under it, each stage's idle time
    assert snap_compare(app_on(PP_1F1B), press=["3", "right_square_bracket", "n", "n"], terminal_size=SIZE)


def test_pipeline_schedule_grid_small_zoomed(snap_compare):
    # 80x24: the iteration's bubble and the grid, zoomed in twice on the playhead's computation
    assert snap_compare(app_on(PP_1F1B), press=["3", "right_square_bracket", "n", "n", "plus", "plus"],
                        terminal_size=(80, 24))


def test_pipeline_demo_opens_on_its_grid_with_its_narration(snap_compare):
    # the pipeline demo's trace (GPipe, then 1F1B): the narration of its second message above the grid
    assert snap_compare(app_on(PIPELINE_DEMO, narration=demo_narration()), press=["n"], terminal_size=(100, 30))


def test_waits_view_narrow(snap_compare):
    # 90 columns: the collectives' table goes under the ranks and steps, every column of it on screen
    assert snap_compare(app_on(), press=["4"], terminal_size=(90, 32))


def test_waits_view_wide(snap_compare):
    assert snap_compare(app_on(), press=["4"], terminal_size=(160, 40))


def test_critical_path_view_narrow(snap_compare):
    # step 2 of the hand-timed steps (} twice): rank 1's late compute, then rank 2 to the step's end, marked on the
    # timeline; 90 columns: the causes under the path's parts
    app = DisttraceApp(["steps.jsonl"], store=shared_steps_store(), step_mode=True)
    assert snap_compare(app, press=["8", "right_curly_bracket", "right_curly_bracket"], terminal_size=(90, 32))


def test_critical_path_view_wide(snap_compare):
    app = DisttraceApp(["steps.jsonl"], store=shared_steps_store(), step_mode=True)
    assert snap_compare(app, press=["8", "right_curly_bracket", "right_curly_bracket"], terminal_size=(160, 40))


def test_links_view(snap_compare):
    assert snap_compare(app_on(), press=["5"], terminal_size=SIZE)


def test_charts_view(snap_compare):
    assert snap_compare(app_on(), press=["6"], terminal_size=SIZE)


def test_problems_view_with_a_hang(snap_compare):
    assert snap_compare(app_on(DATA / "hang.jsonl"), press=["7"], terminal_size=SIZE)


def test_help_screen(snap_compare):
    assert snap_compare(app_on(), press=["question_mark"], terminal_size=SIZE)


def test_narration_pane(snap_compare):
    narration = Narration("All-reduce, step by step", "Four ranks will sum their tensors.",
                          [({"op": "all_reduce", "rank": 1}, "Rank 1 enters the all_reduce first and waits.")], "")
    assert snap_compare(app_on(narration=narration, step_mode=False), terminal_size=SIZE)  # narration steps anyway


@pytest.mark.slow  # (no process: the diff of two 40-step runs takes seconds, too long for the contributors' loop)
def test_diff_view(snap_compare):
    # `disttrace view ddp_slow --baseline ddp_none`: rank 3 slower by 80 ms in one span of every step; the verdict,
    # the explanation (that span), the steps and ops that moved
    from disttrace.tracer.analysis import analysed, compare
    from disttrace.tracer.data.load import load_trace
    from disttrace.tui.model.store import TraceStore
    from disttrace.tui.model.baseline import set_baseline

    a, b = (analysed(load_trace(str(GOLDEN / name), cache=False), name) for name in ("ddp_none", "ddp_slow"))
    d = compare(a, b)
    set_baseline(d)
    try:
        app = DisttraceApp(["ddp_slow"], store=TraceStore(d.b_side.table, d.b_side.analysis), step_mode=True)
        assert snap_compare(app, press=["9"], terminal_size=SIZE)
    finally:
        set_baseline(None)


@pytest.mark.parametrize("size", [(80, 24), SIZE])
def test_run_view(snap_compare, tmp_path, monkeypatch, size):
    """The Run tab (tab 0) on a black-box trace's aggregates (tests/agg_files.py: rank 1 40 ms slower from step 40 of
    60, seeded): each rank's time in collectives per window, the straggler's sentence."""
    from agg_files import simulate
    from disttrace.tui.loading import load_store

    simulate(str(tmp_path / "bb"), slow=(1, 40, 40.0))
    monkeypatch.chdir(tmp_path)  # the header shows the path: a relative one, the same wherever the test runs
    store, _ = load_store(["bb"])
    assert snap_compare(DisttraceApp(["bb"], store=store, step_mode=True), press=["0"], terminal_size=size)


def test_memory_view(snap_compare, tmp_path, monkeypatch):
    """The Memory tab (key M) at 80x24 on a real --memory trace (tests/tui/data/mem_ddp: DDP, a leak on rank 1 from
    step 20, an extra buffer on rank 0): the peak, the chart with the steps, the breakdown and the formula."""
    from disttrace.tui.loading import load_store
    from tui_helpers import memory_trace

    monkeypatch.chdir(tmp_path)
    path = memory_trace(tmp_path)
    store, _ = load_store([path])
    assert snap_compare(DisttraceApp([path], store=store, step_mode=True), press=["M"], terminal_size=(80, 24))
