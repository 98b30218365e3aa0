"""Reading a trace for the viewer (through data/load.py, as every command does), the analysis, and the store.

No Textual here: `load_store` runs in the app's worker thread and reports progress through a callback. Nor,
until a store is built, the viewer's model (numpy, the analysis): `disttrace view` imports this module first
(StoredAhead).
"""

from __future__ import annotations

import gc
import sys
from typing import TYPE_CHECKING

from disttrace.tracer.data.load import load_trace
from disttrace.tracer.data.table import EventTable, Progress, give_back_freed_memory, part_of
from disttrace.tracer.errors import TraceError

from .model.narration import Narration, load_narration

if TYPE_CHECKING:
    from .model.store import TraceStore


def read_table(paths: list[str], progress: Progress | None = None, run: int | None = None,
               cache: bool | None = None, preview=None) -> EventTable:
    """The merged EventTable of trace dirs / events files, of one run (`run`: its number; default the only or
    the last); raises TraceError with a one-line message. `preview(head, fraction)`: given the trace's head while
    the whole is read, where that takes long (data/load.py)."""
    if not paths:
        raise TraceError("no trace given")
    return load_trace(list(paths), progress=progress, run=run, cache=cache, preview=preview)


PRELOAD_BYTES = 8 << 20  # inputs smaller than this are read (and analysed) before the app starts


class StoredAhead:
    """A large trace's valid store opened and made a bare store in a thread begun as `disttrace view` starts, before
    it imports the viewer (Textual, the widgets: most of a re-open's time to its first frame), so that the two go on
    at once: on two cores the store's read, its digest and its lanes take the second, where the app's worker would
    only begin them once the app runs. `result()`: that bare store, or None (no valid store: the app reads the trace
    as ever, and says what is wrong with it)."""

    def __init__(self, paths: list[str], run: int | None = None) -> None:
        import threading

        self._store: TraceStore | None = None
        self._thread = threading.Thread(target=self._open, args=(list(paths), run), daemon=True,
                                        name="disttrace-stored-ahead")
        self._thread.start()

    def _open(self, paths: list[str], run: int | None) -> None:
        from disttrace.tracer.data.load import load_stored

        try:
            table = load_stored(paths, run)
            if table is not None and len(table):
                self._store = bare_store(table)
        except Exception:  # noqa: BLE001 - ahead of time only: the app's own read says what went wrong
            self._store = None

    def result(self) -> TraceStore | None:
        self._thread.join()
        return self._store

    @classmethod
    def worth(cls, paths: list[str]) -> bool:
        """Whether the viewer will read these paths in its worker (not before it starts: small inputs)."""
        from disttrace.tracer.data.load import trace_size

        try:
            return trace_size(paths) >= PRELOAD_BYTES
        except (OSError, TraceError):
            return False


def row_of(table: EventTable, rank: int, ident: int) -> int:
    """The row of a rank's event `ident` in the table (-1: none): the event a user was on, found again in a longer
    table (the whole trace after its head, a followed trace that grew)."""
    import numpy as np

    from disttrace.tracer.data.table.columns import typecode

    ranks = np.frombuffer(table.rank, dtype=typecode(table.rank))
    ids = np.frombuffer(table.id, dtype=typecode(table.id))
    found = np.flatnonzero((ranks == rank) & (ids == ident))
    return int(found[0]) if len(found) else -1


def bare_store(table: EventTable) -> TraceStore:
    """The store without analysis: enough to draw the timeline and list at once."""
    from .model.store import TraceStore

    if not len(table):
        raise TraceError("the trace has no events")
    store = TraceStore(table, None)
    settle()
    return store


class background_work:
    """While a worker thread computes, let the UI thread take the GIL back within 0.5 ms rather than the default
    5 ms: every turn of the UI's event loop waits that long for it, and a key takes dozens of turns
    (benchmarks/bench_tui.py times keys while analysing)."""

    INTERVAL_S = 0.0005

    def __enter__(self):
        self.was = sys.getswitchinterval()
        sys.setswitchinterval(min(self.was, self.INTERVAL_S))

    def __exit__(self, *exc):
        sys.setswitchinterval(self.was)
        return False


def settle() -> None:
    """Move everything loaded so far out of the garbage collector's sight: a big trace is millions of objects
    without cycles, and a full collection walking them would stall the UI for seconds now and then."""
    gc.freeze()


def build_store(table: EventTable, progress: Progress | None = None) -> TraceStore:
    """The store with its analysis (matching, waits, bandwidth, problems: slower than the bare store)."""
    from disttrace.tracer.analysis import analyze_apart

    from .model.store import TraceStore

    if not len(table):
        raise TraceError("the trace has no events")
    analysis = analyze_apart(table, progress=part_of(progress, 0.0, 0.8))
    store = TraceStore(table, analysis, progress=part_of(progress, 0.8, 1.0))
    settle()
    give_back_freed_memory()  # (what building the lanes freed, kept by the allocator)
    return store


class EarlyAnalysis:
    """A large trace's first analysis, its child process (analysis/engine/child_process.py) begun as soon as the store is written,
    so that the child's start and imports overlap drawing the whole trace; on leaving, the child is killed if it
    still runs (the app quit before its analysis was wanted)."""

    child = None

    def start(self, table: EventTable) -> None:
        from disttrace.tracer.analysis import start_apart

        self.child = start_apart(table)

    def __enter__(self) -> "EarlyAnalysis":
        return self

    def __exit__(self, *exc) -> bool:
        from disttrace.tracer.analysis import stop_apart

        stop_apart(self.child)
        return False


def analysed_store(bare: TraceStore, progress: Progress | None = None, early: EarlyAnalysis | None = None
                   ) -> TraceStore:
    """The bare store with its analysis (the lanes are kept; only their waits change). A large trace's first
    analysis runs in a child process (analysis/engine/child_process.py; `early`: the one begun already): this one keeps a
    re-open's memory."""
    from disttrace.tracer.analysis import analyze_apart

    bare.keep_lanes()  # (after the first frame, before the analysis)
    child = early.child if early is not None else None
    store = bare.with_analysis(analyze_apart(bare.table, progress=progress, child=child))
    settle()
    # what building the lanes and their waits freed (kept by the allocator); here, off the first frame's path (a
    # trim takes a while; ctypes lets the UI thread run meanwhile)
    give_back_freed_memory()
    return store


def load_store(paths: list[str], progress: Progress | None = None,
               run: int | None = None, cache: bool | None = None) -> tuple[TraceStore, Narration | None]:
    table = read_table(paths, part_of(progress, 0.0, 0.6), run, cache)
    return build_store(table, part_of(progress, 0.6, 1.0)), load_narration(paths)
