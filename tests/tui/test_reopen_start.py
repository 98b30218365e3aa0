"""What a re-open's start costs (issue 53: a stored 1M-event trace's first frame took 1.79 s from `disttrace view`'s
start, most of it imports): the store opened ahead (tui/loading.StoredAhead: the command begins opening a stored
trace's store before it imports the viewer, so that the two go on at once; that it loads neither numpy nor Textual
before: tests/tui/test_boundaries.py), and the package's bytecode kept where PYTHONDONTWRITEBYTECODE is set."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
        await wait_until(pilot, lambda: isinstance(app.screen, ViewerScreen) and app.screen.shown.is_set(), "on screen")
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


@pytest.mark.slow  # (a fresh interpreter)
def test_the_command_keeps_its_bytecode_where_pythondontwritebytecode_is_set(tmp_path):
    # an editable install has no bytecode of its own: every command compiled the package again (0.35 s of a re-open)
    repo = Path(__file__).resolve().parents[2]
    for part in ("tracer", "tui"):
        shutil.copytree(repo / part, tmp_path / "disttrace" / part, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path)}
    code = "from disttrace.tracer.cli import main; main(['view', '--help'])"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, cwd=tmp_path)
    assert list((tmp_path / "disttrace" / "tui").glob("__pycache__/cli.*.pyc"))
