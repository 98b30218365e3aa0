"""Shared fixtures: real traced torchrun jobs, made once per test session and shared across tests.

Starting torchrun costs seconds (every rank imports torch), so tests ask the session-scoped `traced`
factory for a trace of a job script in tests/jobs/; the same (script, nproc, args, options) is traced once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness import aborted_at_exit, run_traced

# The tests lie in folders that mirror the code (record/, data/, analysis/, commands/, tui/, demos/). pytest imports
# each test module by its file name (no __init__.py: names are unique across the folders), and a few import helpers
# from another folder's module (test_store's `age`, test_schedule's `gpipe_sync`): every test folder is on the path,
# after the one pytest puts first for the module it imports.
for _folder in sorted(p for p in Path(__file__).parent.iterdir() if p.is_dir() and any(p.glob("test_*.py"))):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


@pytest.fixture(scope="session")
def traced(tmp_path_factory):
    """traced(script, nproc=2, args=(), summaries="full", run_args=(), expect_rc=0) -> Path of the trace dir.

    Traces tests/jobs/SCRIPT under torchrun once per session per distinct call."""
    cache: dict = {}

    def make(script: str, nproc: int = 2, args=(), summaries: str = "full", run_args=(), expect_rc: int | None = 0):
        key = (script, nproc, tuple(map(str, args)), summaries, tuple(run_args))
        if key not in cache:
            out = tmp_path_factory.mktemp(Path(script).stem) / "trace"
            proc = run_traced(script, out, nproc, args, summaries, run_args)
            if expect_rc == 0 and aborted_at_exit(proc):
                # torch's own abort at exit (harness.EXIT_ABORT), not the job's doing nor disttrace's: once more
                out = tmp_path_factory.mktemp(Path(script).stem) / "trace"
                proc = run_traced(script, out, nproc, args, summaries, run_args)
            if expect_rc is not None and proc.returncode != expect_rc:
                raise AssertionError(f"traced job {script} exited {proc.returncode}, expected {expect_rc}\n"
                                     f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")
            cache[key] = (out, proc)
        return cache[key][0]

    return make
