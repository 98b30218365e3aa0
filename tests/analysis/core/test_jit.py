"""The analysis' compiled loops in the user's cache (analysis/core/jit.py): compiled ahead by `disttrace run`, once.
(Apart from test_critical_path.py, whose truths of timing run alone: a compile is no timing truth.)"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_compiled_ahead_the_loops_are_in_the_users_cache(tmp_path):
    """jit.compile_ahead (what `disttrace run` starts beside the job, at the lowest priority) compiles every loop
    into the user's cache, none beside the source, and marks each ready; a second start finds nothing to do."""
    pytest.importorskip("numba")
    import disttrace.tracer.analysis as pkg
    from disttrace.tracer.analysis.core import jit
    from disttrace.tracer.commands import run as run_command

    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "DISTTRACE_JIT")}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    beside = {p for p in glob.glob(os.path.join(os.path.dirname(pkg.__file__), "**", "*.nb*"), recursive=True)}
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", run_command._COMPILE_AHEAD], env=env, capture_output=True,
                             text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-2000:]
    cache = tmp_path / "disttrace" / "numba"
    assert len(list((cache / "ready").iterdir())) == len(jit.LOOPS)
    loops = {"backward_walk", "propagation", "what_if_loop", "nonfinite_scan"}
    assert {p.name.split(".")[0] for p in cache.rglob("*.nbi")} >= loops
    assert {p for p in glob.glob(os.path.join(os.path.dirname(pkg.__file__), "**", "*.nb*"),
                                 recursive=True)} == beside
