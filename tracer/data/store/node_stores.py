"""The store of a trace of several nodes' dirs, merged from the stores each node's `disttrace run` wrote of its own.

Each node's launcher stores its dir when its job ends (commands/run.py). The nodes' dirs opened together are a
trace of their own (its store in the first dir, named by a hash of them all), whose first read parsed every rank
file again. Where each dir's store is valid and holds exactly what a read of
the whole takes from that dir, those stores are the whole's parts, merged as a parallel read's are
(merge_parts: groups and dictionaries made one, the rows sorted), in a fraction of a parse's time.

Exactly what a read takes: the whole trace is one run with no warning of finding it (no unreadable file, no other
run), every dir's store holds one run, and the whole's rank files are those runs' files, dir after dir. Anything else
(a dir without a valid store, a restart, an unreadable file, ranks interleaved across the dirs) returns False, and
the trace is read as before. The merged table names the files as each node's store does (as its launcher spelled
them), as any store does (docs/FORMAT.md).

Imports neither torch nor textual.
"""

from __future__ import annotations

import os

from ...errors import TraceError
from ..importers.rank_files import run_files, trace_sources
from ..table.event_table import EventTable
from . import cache
from .codec import StoreError, read_store
from .merge import merge_parts


def merge(paths: list[str], run: int | None, target: str, fingerprint: dict) -> bool:
    """Write the store of the trace dirs `paths` (run `run`) to `target` from the dirs' own stores; False (nothing
    written) where those are not exactly the whole's parts."""
    parts = [cache.cache_path([p], None, True) for p in paths]
    if len(paths) < 2 or not all(map(os.path.isfile, parts)):
        return False  # (before the runs are found, which reads every rank file's first line: the read does it again)
    head = EventTable()
    try:
        files = run_files(paths, head, run)
    except TraceError:
        return False
    if head.warnings or len(head.runs) != 1:
        return False
    at = 0
    for p, part in zip(paths, parts):
        try:
            fp, _ = cache.fingerprint([p], None, trace_sources(p))
            table = read_store(part, fp)  # (valid: the same files, undamaged)
        except (TraceError, StoreError, OSError):
            return False
        if len(table.runs) != 1 or table.run != table.runs[0].number:
            return False
        stored = [os.path.realpath(f.path) for f in table.runs[0].files]
        if stored != [os.path.realpath(f) for f in files[at:at + len(stored)]]:
            return False
        at += len(stored)
    if at != len(files):
        return False

    def finish(whole: EventTable, n: int, records: list) -> None:
        if not n:  # (no events: the read says so, in the reader's words)
            raise StoreError("no events")

    try:
        merge_parts(parts, head, target, fingerprint, finish, whole_stores=True)
    except StoreError:
        return False
    return True


__all__ = ["merge"]
