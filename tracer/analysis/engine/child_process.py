"""The analysis of a large stored trace, computed in a child process that saves it beside the store (core/saved_analysis.py),
then mapped here as a re-open maps it: what the viewer does on a trace's first open.

Computed in the viewer's own process, an analysis leaves it much larger than a re-open of the same trace (what an
event costs is measured by benchmarks/bench_tui.py): the store's pages the analysis read stay resident in the
mapping (every column and the summaries' NaN/Inf scan), numba's compiler is loaded, and the computed arrays live on
the heap where a re-open maps the saved ones. A child gives all of that back when it exits, and its GIL is not the
UI's. It costs a process start and the saved analysis' read, so it is used only from APART_FROM events. `start`
begins it before its analysis is wanted: the viewer starts it as soon as the store is written, so that its start and
imports overlap the whole trace's first frame.

Never a new way to fail: a child that cannot run, dies or saves nothing leaves the analysis to this process (the
child's own errors are the in-process analysis' too). A progress callback that raises (the viewer quitting) kills
the child.

The child: `python -m disttrace.tracer.analysis.engine.child_process STORE FINGERPRINT` opens the store as a re-open does,
analyses (analyze saves it), and writes its progress to stdout, a JSON line [fraction, label] each.
"""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

from ...data import store
from ...data.table import EventTable, Progress
from ..core import saved_analysis
from .run import analyze
from ..core.results import Analysis

APART_FROM = 200_000
"""Events from which a stored trace's first analysis runs in a child (below, the child's start and the saved
analysis' read would be a large share of it, and the memory kept small anyway)."""

ENV = "DISTTRACE_APART"  # "0": always analyse in this process


def analyze_apart(table: EventTable, progress: Progress | None = None,
                  child: subprocess.Popen | None = None) -> Analysis:
    """analyze(table), computed in a child process where the table is large and comes from the trace store (`child`:
    the one `start` began, else one begun now); the analysis saved by an earlier run is read as analyze reads it."""
    if not _apart(table):
        return analyze(table, progress)
    if child is None:
        if (a := saved_analysis.load(table)) is not None:
            if progress is not None:
                progress(1.0, "opened the saved analysis")
            return a
        child = _start(table.origin)
    if child is not None and _follow(child, progress) and (a := saved_analysis.load(table)) is not None:
        if progress is not None:
            progress(1.0, "opened the analysis")
        return a
    return analyze(table, progress)


def start(table: EventTable) -> subprocess.Popen | None:
    """The child that analyses `table`, begun now, for analyze_apart to follow later (stop it if that never comes);
    None where analyze_apart would use none, or would read a saved analysis (one is there: stale, it starts its own)."""
    if not _apart(table) or os.path.exists(table.origin.beside(saved_analysis.KIND)):
        return None
    return _start(table.origin)


def stop(child: subprocess.Popen | None) -> None:
    """Kill a child that is still running (and reap it)."""
    if child is None:
        return
    if child.poll() is None:
        child.kill()
        child.wait()
    child.stdout.close()


def _apart(table: EventTable) -> bool:
    return (isinstance(table.origin, store.StoreOrigin) and len(table) >= APART_FROM
            and os.environ.get(ENV, "1").strip() != "0")


def _start(origin: store.StoreOrigin) -> subprocess.Popen | None:
    try:
        return subprocess.Popen(_command(origin), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)  # (its own errors: the analysis here says them)
    except OSError:
        return None


def _follow(child: subprocess.Popen, progress: Progress | None) -> bool:
    """Whether the child analysed its store and exited cleanly (its analysis then saved, unless it could not be
    written), its progress passed on. Kills the child when `progress` raises, and raises that."""
    try:
        for line in child.stdout:
            try:
                fraction, label = orjson.loads(line)
            except (orjson.JSONDecodeError, TypeError, ValueError):
                continue
            if progress is not None:
                progress(float(fraction), str(label))
        return child.wait() == 0
    finally:
        stop(child)  # (running still: progress raised, the viewer is quitting)


def _command(origin: store.StoreOrigin) -> list[str]:
    return [sys.executable, "-m", __name__, origin.path, orjson.dumps(origin.fingerprint).decode()]


def _child(path: str, fingerprint: str) -> int:
    fp = orjson.loads(fingerprint)
    try:
        table = store.read_store(path, fp)
    except (store.StoreError, OSError):
        return 2
    table.origin = store.StoreOrigin(path, fp)
    out = sys.stdout.buffer

    def progress(fraction: float, label: str) -> None:
        out.write(orjson.dumps([fraction, label]) + b"\n")
        out.flush()

    analyze(table, progress)
    return 0


if __name__ == "__main__":
    sys.exit(_child(*sys.argv[1:3]))
