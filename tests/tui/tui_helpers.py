"""Small hand-made traces for the viewer's model tests (known times, so results are known exactly)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from disttrace.tracer.analysis import analyze
from disttrace.tracer.data.importers.events_files import read_jsonl
from disttrace.tracer.data.table import EventTable
from disttrace.tui.model.store import TraceStore

DATA = Path(__file__).parent / "data"
TUI_JOB = DATA / "tui_job.jsonl"          # 4 ranks: all_reduce, all_gather, reduce_scatter, broadcast, barrier, ring
PIPELINE_JOB = DATA / "pipeline_job.jsonl"  # 4 stages x 4 micro-batches, send/recv
# `disttrace run --memory torchrun --nproc_per_node=2 tests/jobs/mem_train.py ddp` (its rank files renamed, the
# paths in it made relative): DDP, Adam; rank 1 keeps 2 MiB a step from step 20 (a leak), rank 0 an 8 MiB buffer
MEM_DDP = DATA / "mem_ddp"


def ev(rank, op, start, end, **kw) -> dict:
    d = {"v": 1, "rank": rank, "host": "h", "op": op, "group": "g", "group_ranks": [0, 1], "start_ns": start,
         "end_ns": end, "bytes": kw.pop("bytes", 8)}
    d.update(kw)
    return d


def table_of(events) -> EventTable:
    t = EventTable()
    for e in events:
        t.append(e)
    t.sort()
    return t


def store_of(events) -> TraceStore:
    t = table_of(events)
    return TraceStore(t, analyze(t))


def fixture_store(path=TUI_JOB) -> TraceStore:
    t = read_jsonl(str(path))
    t.sort()
    return TraceStore(t, analyze(t))


@cache
def shared_store(path=TUI_JOB) -> TraceStore:
    """fixture_store(path), read and analysed once per process: for tests that hand it to the viewer, which never
    changes a store it is given (only its loading path adopts one); a test that changes its store takes its own."""
    return fixture_store(path)


def memory_trace(tmp_path) -> str:
    """A copy of MEM_DDP in tmp_path (a reader may write its store beside the trace), its path relative to
    tmp_path, the working directory after (the header shows the path)."""
    import os
    import shutil

    shutil.copytree(MEM_DDP, tmp_path / "mem_ddp")
    os.chdir(tmp_path)
    return "mem_ddp"


def detail_text(store: TraceStore, row: int, width: int = 100) -> str:
    """The detail pane's fields for an event row, as plain text."""
    import io

    from rich.console import Console

    from disttrace.tui.widgets.detail import detail_table

    c = Console(width=width, record=True, file=io.StringIO())
    c.print(detail_table(store, row))
    return c.export_text()


def steps_trace():
    """3 ranks, 6 steps of compute, all_reduce, compute, all_gather (tests/synthetic.py, times in ms): rank 2
    arrives 1 ms late at every all_reduce, rank 1 8 ms later still in steps 2 and 4. The critical path of a step
    is rank 2's, but in steps 2 and 4 it starts with rank 1's 18 ms of compute, then hops to rank 2."""
    from synthetic import MS, Trace

    tr = Trace(3)
    t = 0
    for k in range(6):
        starts = {r: t + 10 * MS for r in range(3)}
        if k in (2, 4):
            starts[1] += 8 * MS
        starts[2] += 1 * MS
        end = max(starts.values()) + 2 * MS
        tr.coll("all_reduce", starts, end, nbytes=4096, site="train.py:40 in step")
        tr.coll("all_gather", {r: end + 3 * MS + r * MS // 2 for r in range(3)}, end + 6 * MS, nbytes=1024,
                site="train.py:52 in step")
        t = end + 6 * MS
    return tr


def steps_store() -> TraceStore:
    t = steps_trace().table()
    t.sort()
    return TraceStore(t, analyze(t))


@cache
def shared_steps_store() -> TraceStore:
    """steps_store(), made once per process, for the viewer (as shared_store)."""
    return steps_store()


def cols_where(timeline, y: int, drawn) -> list[int]:
    """The columns of the timeline's line y (past its rank label) whose style drawn(style) holds."""
    cols, x = [], 0
    for seg in list(timeline.render_line(y))[1:]:  # the rank label first
        if seg.style is not None and drawn(seg.style):
            cols.extend(range(x, x + len(seg.text)))
        x += len(seg.text)
    return cols


def screen_text(app) -> list[str]:
    """The lines on the app's screen as a person reads them (the top screen: a modal prompt is drawn alone)."""
    update = app.screen._compositor.render_full_update()
    return ["".join(strip.text for strip in line) for line in update.strips]


async def wait_until(pilot, condition, what: str, timeout_s: float = 10.0) -> None:
    """Let the app run until condition() holds (a condition, not a fixed sleep); fail with `what` if it never does."""
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout_s} s")
        await pilot.pause(0.02)
