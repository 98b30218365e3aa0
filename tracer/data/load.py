"""Any trace a user names -> one EventTable, through the importers' registry.

An importer says which paths it reads (`claims`) and loads all of those at once (`load`): the trace dirs of one
job's nodes make one trace. Each path goes to the first importer in IMPORTERS that claims it, so the more
particular formats come first and the events file, which claims any file, last. Another trace format is its
module in importers/, filling the table through EventTable.add_rows / append / table/rows.extend, and one line
here.

The door of data/ for commands/ and tui/ (with the table package, data/table/, for the table's types): what they
use of the importers and the store is imported from here (pyproject.toml's import contracts).

Imports neither torch nor textual.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from ..errors import TraceError
from ..format import RING_SUFFIX
from .importers import flightrec, kineto
from .importers.events_files import iter_jsonl, no_events, read_jsonl
from .importers.rank_files import (find_rank_files, is_trace_dir, load_trace_dirs, run_info, trace_sources,
                                   written_size)
from .importers.ring import ring_written
from .importers.runs import find_runs, find_snapshots, runs_here, snapshots_note, unreadable
from .store import head, node_stores, parallel
from .store.parallel import PARALLEL_BYTES
from .store.arrays import read_arrays, write_arrays
from .store.cache import (FILE_SUFFIX, PartsFailed, StoreOrigin, cached_load, enabled as store_enabled, source_digest,
                          stored)
from .store.codec import StoreError, read_store
from .table.event_table import EventTable
from .table.progress import Progress


@dataclass(frozen=True)
class Importer:
    name: str
    claims: Callable[[str], bool]
    """Whether a path (a file or a directory) is in this format."""
    load: Callable[[list[str], EventTable, "Progress | None", "int | None"], None]
    """Load the paths claimed into the table: (paths, table, progress, run)."""
    sources: Callable[[str], list[str]] | None = None
    """The files a path's events come from, watched by the trace store (None: not kept in the store)."""
    plan: Callable[[list[str], "int | None"], "parallel.Plan | None"] | None = None
    """How a first read of the paths splits across processes (store/parallel.py); None: it does not."""
    merge: Callable[[list[str], "int | None", str, dict], bool] | None = None
    """Writes the store of several paths from each one's own store, if it can: (paths, run, target, fingerprint)
    -> whether it did (store/node_stores.py); None: it never can."""


def _load_fr_dirs(paths: list[str], table: EventTable, progress, run) -> None:
    for p in paths:  # Flight Recorder dumps hold one run
        flightrec.load_fr_dir(p, table)


def _load_events_files(paths: list[str], table: EventTable, progress, run) -> None:
    for p in paths:
        read_jsonl(p, table, progress, run)


def _load_store_files(paths: list[str], table: EventTable, progress, run) -> None:
    if len(paths) > 1 or len(table):
        raise TraceError("a trace store file opens on its own")
    try:
        loaded = read_store(paths[0])
    except (StoreError, OSError, ImportError) as e:
        raise TraceError(f"{paths[0]}: cannot open this trace store ({e})") from None
    table.__dict__.update(loaded.__dict__)


IMPORTERS: tuple[Importer, ...] = (
    Importer("disttrace trace dir", is_trace_dir, load_trace_dirs, trace_sources, parallel.plan_trace_dirs,
             node_stores.merge),
    Importer("PyTorch profiler (Kineto) traces", kineto.claims, kineto.load_kineto, kineto.source_files),
    Importer("Flight Recorder dumps", flightrec.is_fr_dir, _load_fr_dirs, flightrec.source_files),
    Importer("disttrace trace store (a .disttrace.arrow file)", lambda p: _is_store_file(p) and os.path.isfile(p),
             _load_store_files),
    Importer("normalized events file (disttrace events)", os.path.isfile, _load_events_files, lambda p: [p],
             lambda paths, run: parallel.plan_events_file(paths[0], run) if len(paths) == 1 else None),
)


Preview = Callable[[EventTable, float], None]
"""Takes a large trace's head (store/head.py) and the fraction of the trace it holds, before the whole is read."""


def load_trace(paths: list[str] | str, progress: Progress | None = None, run: int | None = None,
               cache: bool | None = None, settled: bool = False, preview: Preview | None = None) -> EventTable:
    """Load trace dirs (one per node), Flight Recorder dumps or events files into one sorted EventTable; `run`
    picks one run of a trace that holds several (data/importers/runs.py).

    Every format but the store itself is read through the trace store (store/): its valid copy beside
    the trace is opened instead of parsing, else the trace is parsed and the store written. `cache`: False never
    reads nor writes it (a live trace: --follow); None: as DISTTRACE_CACHE says (on unless "0"). `settled`: no
    process writes the trace any more (its job exited), so that files written just now may be stored.
    `preview`: called with the trace's head when the whole is read in parallel (a first read of a large trace)."""
    if isinstance(paths, str):
        paths = [paths]
    claimed = _claimed(paths)

    def parse() -> EventTable:
        table = EventTable()
        for importer, mine in claimed.items():
            importer.load(mine, table, progress, run)
        if len(table) == 0:
            raise TraceError(no_events(paths))
        table.sort()
        return table

    if cache is None:
        cache = store_enabled()
    through = _through_store(paths, claimed) if cache else None
    if through is not None:
        importer, sources, dirs = through
        build = _builder(importer, paths, run, sources, progress, preview)
        return cached_load(paths, run, sources, dirs, parse, progress, build, settled)
    return parse()


def load_stored(paths: list[str], run: int | None = None) -> EventTable | None:
    """The trace as load_trace gives it where that is its valid store, opened; else None (no store that holds,
    the store off, an input that is not read through one, a path no importer claims): nothing is parsed."""
    try:
        claimed = _claimed(list(paths))
    except TraceError:
        return None
    through = _through_store(paths, claimed) if store_enabled() else None
    if through is None:
        return None
    _, sources, dirs = through
    return stored(paths, run, sources, dirs)


def _claimed(paths: list[str]) -> dict:
    """{importer: its paths}, each path to the first importer that claims it; TraceError for none."""
    if not paths:
        raise TraceError("no trace given")
    claimed: dict[Importer, list[str]] = {}
    for p in paths:
        importer = next((i for i in IMPORTERS if i.claims(p)), None)
        if importer is None:
            raise TraceError(_unclaimed(p))
        claimed.setdefault(importer, []).append(p)
    return claimed


def _through_store(paths: list[str], claimed: dict) -> tuple | None:
    """(importer, its source files, whether the paths are dirs) where the trace is read through the store:
    directories (any number: one job's nodes), or one file (its store is named after it); else None."""
    importer = next(iter(claimed)) if len(claimed) == 1 else None
    dirs = all(os.path.isdir(p) for p in paths)
    if importer is None or importer.sources is None or not (dirs or len(paths) == 1):
        return None
    return importer, [f for p in paths for f in importer.sources(p)], dirs


def _builder(importer: Importer, paths: list[str], run: int | None, sources: list[str],
             progress: Progress | None, preview: Preview | None = None):
    """How a first read writes the store of these paths, as cached_load's `build`: from the paths' own stores
    where the importer can merge them (several nodes' dirs, each stored when its job ended), else by the parallel
    read (None: neither; the trace is read in process)."""
    parallel_build = _parallel_builder(importer, paths, run, sources, progress, preview)
    if importer.merge is None or len(paths) < 2:
        return parallel_build

    def build(target: str, fingerprint: dict) -> None:
        if progress is not None:
            progress(0.0, "merging the nodes' stores")
        if importer.merge(paths, run, target, fingerprint):
            return
        if parallel_build is None:
            raise PartsFailed("no stores to merge; too small to split")
        parallel_build(target, fingerprint)

    return build


def _parallel_builder(importer: Importer, paths: list[str], run: int | None, sources: list[str],
                      progress: Progress | None, preview: Preview | None = None):
    """The parallel first read of these paths, as cached_load's `build` (None: the importer has none, or the
    trace is too small to split: then neither its runs are scanned twice nor a temp file made for nothing). Its
    plan is made only when it is needed: the store missing or stale. `preview` gets the trace's head first."""
    if importer.plan is None or parallel.workers() < 2:
        return None
    try:
        if sum(os.path.getsize(f) for f in sources) < parallel.PARALLEL_BYTES:
            return None
    except OSError:
        return None

    def build(target: str, fingerprint: dict) -> None:
        plan = importer.plan(paths, run)
        if plan is None:
            raise PartsFailed("too small to split")
        if preview is not None:
            try:
                found = head.read_head(plan)
            except Exception:  # noqa: BLE001 - a preview only: the whole read says what is wrong with the trace
                found = None
            if found is not None:
                preview(*found)
        parallel.build(plan, target, fingerprint, progress)

    return build


def _is_store_file(path: str) -> bool:
    return path.endswith(FILE_SUFFIX)


def _unclaimed(path: str) -> str:
    if not os.path.exists(path):
        return f"{path}: no such file or directory"
    if os.path.isdir(path):
        return f"{path}: not a disttrace trace (no rank-*.jsonl files in it)"
    return f"{path}: not a trace directory or events file"


def trace_size(paths) -> int:
    """Bytes of the files a trace's events come from (a directory: its importer's `sources`, not the store's dir
    nor other files beside them); of a rank file, what was written so far: it grows while a job runs (--follow);
    of a black-box ring, what its writer wrote in all (more than it holds once it wrapped); of a gzipped file, its
    JSON's (a profiler trace compresses well). Whether the viewer reads a trace before it starts, and whether a
    followed trace grew."""
    total = 0
    for p in paths:
        if os.path.isfile(p):
            total += _size(p)
        elif os.path.isdir(p):  # (a dir no importer claims yet, as a followed trace before its job began: none)
            importer = next((i for i in IMPORTERS if i.sources is not None and i.claims(p)), IMPORTERS[0])
            size = _size if importer is not IMPORTERS[0] else written_size  # (a rank file grows: what it holds)
            total += sum((ring_written if f.endswith(RING_SUFFIX) else size)(f) for f in importer.sources(p))
    return total


def _size(path: str) -> int:
    """A file's size; of a .gz file, what it holds: gzip's trailer says it (ISIZE, modulo 2^32)."""
    try:
        size = os.path.getsize(path)
        if path.endswith(".gz") and size >= 18:  # (the smallest gzip member: a 10-byte header, an 8-byte trailer)
            with open(path, "rb") as f:
                f.seek(-4, os.SEEK_END)
                size = max(size, int.from_bytes(f.read(4), "little"))
        return size
    except OSError:
        return 0


# what commands/ and tui/ use of the importers and the store (they import nothing else of data/ but data/table/)
def has_aggregates(paths):
    """Whether the trace dirs hold a black box's aggregates (importers/aggregates.py). Imported here, not at the
    module's top: it imports numpy, which `disttrace view` must not load before it opens the store
    (tests/tui/test_boundaries.py)."""
    from .importers.aggregates import has_aggregates as has

    return has(paths)


def read_aggregates(paths, run=None):
    """The black box's aggregates of the trace dirs (an importers.aggregates.Aggregates), or None: see
    has_aggregates for why the import is here."""
    from .importers.aggregates import read_aggregates as read

    return read(paths, run)


def has_memory(paths) -> bool:
    """Whether the trace dirs hold memory samples (`disttrace run --memory`'s `.mem` files): see has_aggregates for
    why the import is here."""
    from .importers.memory_files import has_memory as has

    return has(list(paths))


def read_memory(table):
    """The memory samples of a table's ranks (`disttrace run --memory`: importers/memory_files.py's MemoryTrace), or
    None: see has_aggregates for why the import is here."""
    from .importers.memory_files import read_memory as read

    return read(table)


__all__ = ["IMPORTERS", "Importer", "load_trace", "load_stored", "trace_size",
           "find_rank_files", "find_runs", "find_snapshots", "run_info", "runs_here", "snapshots_note", "unreadable",
           "iter_jsonl", "read_jsonl",
           "PARALLEL_BYTES", "StoreError", "StoreOrigin", "read_arrays", "source_digest", "store_enabled",
           "write_arrays", "has_aggregates", "read_aggregates", "has_memory", "read_memory"]
