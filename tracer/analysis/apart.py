"""The analysis of a large stored trace, computed in a child process that saves it beside the store (saved.py),
then mapped here as a re-open maps it: what the viewer does on a trace's first open.

Computed in the viewer's own process, a 1M-event analysis left it ~370 MB larger than a re-open of the same trace
(one more event cost 531 bytes against 140): the store's pages the analysis read stay resident in the mapping
(~190 MB: every column and the summaries' NaN/Inf scan), numba's compiler is loaded (~60 MB of code), and the
computed arrays live on the heap where a re-open maps the saved ones. A child gives all of that back when it
exits, and its GIL is not the UI's. It costs a process start and the saved analysis' read (~0.5 s), so it is used
only from APART_FROM events.

Never a new way to fail: a child that cannot run, dies or saves nothing leaves the analysis to this process (the
child's own errors are the in-process analysis' too). A progress callback that raises (the viewer quitting) kills
the child.

The child: `python -m disttrace.tracer.analysis.apart STORE FINGERPRINT` opens the store as a re-open does,
analyses (analyze saves it), and writes its progress to stdout, a JSON line [fraction, label] each.
"""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

from ..data import store
from ..data.events import EventTable, Progress
from . import saved
from .engine import analyze
from .model import Analysis

APART_FROM = 200_000
"""Events from which a stored trace's first analysis runs in a child (below, the child's start and the saved
analysis' read would be a large share of it, and the memory kept small anyway)."""

ENV = "DISTTRACE_APART"  # "0": always analyse in this process


def analyze_apart(table: EventTable, progress: Progress | None = None) -> Analysis:
    """analyze(table), computed in a child process where the table is large and comes from the trace store; the
    analysis saved by an earlier run is read as analyze reads it."""
    origin = table.origin
    if (not isinstance(origin, store.StoreOrigin) or len(table) < APART_FROM
            or os.environ.get(ENV, "1").strip() == "0"):
        return analyze(table, progress)
    if (a := saved.load(table)) is not None:
        if progress is not None:
            progress(1.0, "opened the saved analysis")
        return a
    if _run_child(origin, progress) and (a := saved.load(table)) is not None:
        if progress is not None:
            progress(1.0, "opened the analysis")
        return a
    return analyze(table, progress)


def _run_child(origin: store.StoreOrigin, progress: Progress | None) -> bool:
    """Whether a child analysed the store at `origin` and exited cleanly (its analysis then saved, unless it could
    not be written). Kills the child when `progress` raises, and raises that."""
    try:
        child = subprocess.Popen(_command(origin), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)  # (its own errors: the analysis here says them)
    except OSError:
        return False
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
        if child.poll() is None:  # (progress raised: the viewer is quitting)
            child.kill()
            child.wait()
        child.stdout.close()


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
