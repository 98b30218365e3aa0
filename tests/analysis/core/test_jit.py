"""The analysis' compiled loops in the user's cache (analysis/core/jit.py): compiled ahead by `disttrace run`, once.
(Apart from test_critical_path.py, whose truths of timing run alone: a compile is no timing truth.)"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_compiled_ahead_the_loops_are_in_the_users_cache(tmp_path, monkeypatch):
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
    # every loop ready: the next `disttrace run` asks the cache, and starts no process
    from disttrace.tracer.analysis.core import jit_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert [p.name for p in cache.glob("all-ready-*")] == [os.path.basename(jit_cache.all_ready_marker())]


def test_a_run_starts_the_compile_until_every_loop_is_ready_then_never(tmp_path, monkeypatch):
    """compile_ahead leaves `all_ready` once it finds every loop ready; `disttrace run` starts it until then. The
    marker is named by the loops' and numba's files' stamps: numba's file touched, another marker, and a compile
    (of what is not ready: here nothing) is started again."""
    from types import SimpleNamespace

    from disttrace.tracer.analysis.core import jit, jit_cache
    from disttrace.tracer.commands import run as run_command

    numba_file = tmp_path / "numba_init.py"
    numba_file.write_text("")
    monkeypatch.setattr(jit_cache, "find_spec", lambda name: SimpleNamespace(origin=str(numba_file)))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DISTTRACE_JIT", raising=False)
    (tmp_path / "cache").mkdir()
    started = []
    monkeypatch.setattr(run_command.subprocess, "Popen", lambda *a, **k: started.append(a))
    run_command._compile_ahead()
    assert len(started) == 1 and not jit_cache.all_ready()

    monkeypatch.setattr(jit, "_ready", lambda fn: True)  # (as after a compile)
    jit.compile_ahead()
    assert jit_cache.all_ready()
    run_command._compile_ahead()
    assert len(started) == 1

    os.utime(numba_file, (1, 1))  # another numba
    assert not jit_cache.all_ready()
    run_command._compile_ahead()
    assert len(started) == 2
