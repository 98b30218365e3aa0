"""What the analysis leaves the viewer's UI thread, which runs beside it: C loops over a whole column cut into
slices (equal to the loops they replace), numba started beside the first stages without leaving scipy hidden, and
what the analysis made moved out of the collector's sight. (How long the UI waits is measured, not asserted:
benchmarks/bench_analysis.py, "beside a UI".)"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from array import array

import numpy as np
import pytest

from disttrace.tracer.data.table import columns


def test_a_column_cut_into_slices_is_the_column(monkeypatch):
    """Each sliced C loop (columns.GIL_ROWS, made small here) equals the one call it replaces, across slices."""
    monkeypatch.setattr(columns, "GIL_ROWS", 64)
    rng = np.random.default_rng(3)
    for n in (0, 1, 63, 64, 65, 640, 1000):
        a = rng.integers(-5, 10**12, n)
        assert columns.to_list(a) == a.tolist()
        for most in (4, 200):  # (rows out of a value: fewer than a slice's, and more)
            counts = rng.integers(0, most, n)
            assert columns.repeat_each(a, counts).tolist() == np.repeat(a, counts).tolist()
            assert columns.repeat_each(a > 0, counts).tolist() == np.repeat(a > 0, counts).tolist()
        mask = a % 3 == 0
        assert columns.running_count(mask).tolist() == np.cumsum(mask).tolist()
        small = a % 5
        assert columns.from_numpy(small, "H").tolist() == small.tolist()
        assert columns.from_numpy(small, "H").typecode == "H"
        grown = array("q", [7, 8])
        assert columns.extend_from_numpy(grown, a).tolist() == [7, 8, *a.tolist()]
        assert columns.copy_of(memoryview(array("i", small.tolist()))).tolist() == small.tolist()
        assert columns.filled("i", n, -1).tolist() == [-1] * n and columns.filled("d", n).typecode == "d"
        items = list(range(n))
        columns.release(items)
        assert items == []
        for keys in (small.astype(np.int32), (a % 70000 - 3).astype(np.int32)):  # (the second: negatives too)
            got_u, got_i = columns.unique_inverse(keys)
            want_u, want_i = np.unique(keys, return_inverse=True)
            assert got_u.tolist() == want_u.tolist() and got_i.tolist() == want_i.tolist()
            assert columns.distinct(keys).tolist() == want_u.tolist() and columns.distinct(keys).dtype == keys.dtype
        ups = a.copy()  # (a running maximum carried across slices: the largest values early, then smaller)
        columns.running_max(ups)
        assert ups.tolist() == np.maximum.accumulate(a).tolist()


@pytest.mark.slow
def test_numba_starts_beside_and_scipy_is_not_left_hidden():
    """In a fresh process (numba not imported yet): warm starts it in a thread, run then calls the compiled loop;
    scipy, hidden while numba started, can be imported after."""
    pytest.importorskip("numba")
    code = """
import importlib.util, sys, time
import numpy as np
from disttrace.tracer.analysis.core import jit
jit.warm(10**6)
assert jit.run(jit._first, 10**6, np.arange(3, 6)) == 3
assert type(jit._compiled[jit._first]).__name__ == "CPUDispatcher", jit._compiled
assert sys.modules.get("scipy", "absent") is not None  # (None: still hidden)
if importlib.util.find_spec("scipy") is not None:
    import scipy.linalg
print("ok")
"""
    env = {**os.environ, "DISTTRACE_JIT": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.slow
def test_a_small_trace_never_starts_numba():
    """Below JIT_FROM events the loops run as Python: analysing a small trace neither imports numba nor starts it
    beside the stages (its start, ~0.5 s, would be longer than the whole analysis)."""
    code = """
import sys, threading
sys.path[:0] = ["..", "../.."]  # test_analysis in tests/analysis/, its synthetic.py in tests/
from test_analysis import ddp_like
a = ddp_like(12, dict.fromkeys(range(12), 20), world=4).analyze()
assert a.straggler.rank == 1
assert "numba" not in sys.modules, "numba imported"
assert not [t for t in threading.enumerate() if t.name.startswith("disttrace-jit")]
print("ok")
"""
    env = {**os.environ, "DISTTRACE_JIT": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         cwd=os.path.dirname(os.path.abspath(__file__)))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_what_a_large_analysis_made_is_out_of_the_collectors_sight(monkeypatch):
    """From FREEZE_FROM events the Analysis' objects are frozen before the collector resumes: its youngest
    generation is left nearly empty, not holding all the analysis made (which its next pass would walk)."""
    from disttrace.tracer.analysis.engine import run as engine
    from test_analysis import ddp_like

    trace = ddp_like(12, dict.fromkeys(range(12), 20), world=4)
    gc.collect()
    frozen = gc.get_freeze_count()
    try:
        monkeypatch.setattr(engine, "FREEZE_FROM", 0)
        a = trace.analyze()
        assert gc.get_freeze_count() > frozen
        assert gc.get_count()[0] < 100
        assert a.straggler is not None and a.straggler.rank == 1  # (the analysis itself unchanged)
    finally:
        gc.unfreeze()


def test_the_ends_of_every_row_are_made_once_an_analysis():
    """matching.finished_column: one read-only column within ends_kept (an analysis reads it ~7 times), the same as
    finished(); outside, made afresh (a table read while it grows must not get an old one)."""
    from test_analysis import ddp_like
    from disttrace.tracer.analysis.core.matching import ends_kept, finished, finished_column

    t = ddp_like(5, {2: 30}).table()  # (async all-reduces: rows whose end is their wait()'s)
    with ends_kept(t):
        kept = finished_column(t)
        assert finished_column(t) is kept and not kept.flags.writeable
        assert kept.tolist() == finished(t).tolist()
    assert finished_column(t) is not kept and finished_column(t).tolist() == kept.tolist()
