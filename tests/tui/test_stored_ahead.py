"""A re-open's store opened ahead (tui/loading.StoredAhead): `disttrace view` begins opening a stored trace's store
before it imports the viewer, so that the two go on at once (issue 53: a stored 1M-event trace's first frame took
1.79 s from the command's start, most of it the viewer's imports; the store's open began only once the app ran).
That the command loads neither numpy nor Textual before it: tests/tui/test_boundaries.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from disttrace.tracer.data.load import load_trace
from disttrace.tracer.data.store import cache_path
from disttrace.tui import loading
from disttrace.tui.app import DisttraceApp
from disttrace.tui.screens.viewer import ViewerScreen

from tui_helpers import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synth import write_synthetic  # noqa: E402

HOUR = 3600 * 10**9


def stored_trace(tmp_path) -> str:
    """A synthetic events file whose store is written (dated back: a file written just now is not stored)."""
    path = str(tmp_path / "events.jsonl")
    write_synthetic(path, 6_000, 8)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - HOUR))
    assert load_trace(path).origin is not None
    return path


async def test_the_store_opened_ahead_is_the_one_on_screen_and_the_trace_is_not_read_again(tmp_path, monkeypatch):
    path = stored_trace(tmp_path)
    ahead = loading.StoredAhead([path])
    bare = ahead.result()
    assert bare is not None and not bare.analysed and len(bare.table) == len(load_trace(path))

    def read_again(*args, **kwargs):
        raise AssertionError("the trace was read again")

    monkeypatch.setattr(loading, "read_table", read_again)
    app = DisttraceApp([path], ahead=ahead)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ViewerScreen), "on screen")
        assert app.screen.store.table is bare.table and len(app.screen.store.rows) == 8
    assert app.error is None


def test_none_ahead_without_a_valid_store_and_nothing_written(tmp_path):
    path = str(tmp_path / "events.jsonl")
    write_synthetic(path, 2_000, 4)
    assert loading.StoredAhead([path]).result() is None  # (never stored)
    assert not os.path.exists(cache_path([path], None, False))
    path = stored_trace(tmp_path)
    with open(path, "ab") as f:  # the trace changed since: its store is stale
        f.write(b"\n")
    assert loading.StoredAhead([path]).result() is None
    assert loading.StoredAhead([str(tmp_path / "missing")]).result() is None
