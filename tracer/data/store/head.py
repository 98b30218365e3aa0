"""The head of a large trace: its first few megabytes, read in process while the whole is read in parallel, so
that the viewer shows the trace's beginning in a fraction of a second rather than after the whole first read
(which grows with the trace), as a log viewer shows a file's first page before it has indexed the rest.

The head is the whole truth of a stretch of time, never a sample: every event that starts before its end time
`t_cut` is in it and nothing after. Of a trace dir, each rank file's first bytes are read (its lines are in the
rank's time order) and the events after the earliest rank's last one read are dropped; of an events file, its
first bytes, used only when their events are in time order (what `disttrace events` writes; a file of another
order has no head). An op begun before the cut whose end record lies beyond what was read shows unfinished (it
is, as far as the head knows): the viewer says it shows a head, and the head is never analysed or stored.

Imports neither torch nor textual; numpy on use.
"""

from __future__ import annotations

import os

from ..importers import events_files, rank_files
from ..table.columns import typecode
from ..table.event_table import EventTable
from ..table.memory import gc_paused

HEAD_BYTES = 8 << 20        # what the head reads in all, or
HEAD_SHARE = 128            # 1/128th of a larger trace (10M events of 1,024 ranks: 40 MB, its first step)
MAX_HEAD_BYTES = 64 << 20   # up to this
FILE_HEAD_BYTES = 16 << 10  # and at least this of each rank file


def head_bytes(total: int) -> int:
    """How much of a trace of `total` bytes its head reads."""
    return min(max(HEAD_BYTES, total // HEAD_SHARE), MAX_HEAD_BYTES)


def read_head(plan) -> tuple[EventTable, float] | None:
    """The head of the trace a parallel first read is about to read by `plan` (data/store/parallel.py's Plan), and the
    fraction of its bytes that it read; None where it has none (events out of time order, nothing read)."""
    table = EventTable()
    table.runs, table.run = plan.head.runs, plan.head.run  # (which run of the trace: the plan found it)
    if plan.kind == "dirs":
        files = [f for share in plan.shares for f in share["files"]]
        sizes = {f: _size(f) for f in files}
        limit = max(head_bytes(sum(sizes.values())) // max(len(files), 1), FILE_HEAD_BYTES)
        with gc_paused():
            rank_files.read_rank_files(files, table, limit=limit)
        if not len(table):
            return None
        table.sort()
        partial = {f for f, size in sizes.items() if size > limit}
        _cut(table, {r for r, info in table.ranks.items() if info.source in partial})
        done = sum(min(size, limit) for size in sizes.values())
        total = sum(sizes.values())
    else:
        path, (_, total), run = plan.paths[0], plan.shares[-1]["range"], plan.shares[0]["run"]
        with open(path, "rb") as fh:
            fh.seek(min(head_bytes(total), total))
            fh.readline()  # on to the next line's start
            done = fh.tell()
        events_files.read_range(path, 0, done, table, run)
        if not len(table) or not _in_time_order(table):
            return None
        table.sort()
    # a cut file's last records are not damage (the whole read says what is)
    table.warnings, table.notes = [], []
    for info in table.ranks.values():
        info.damage = ""
    return table, done / max(total, 1)


def _cut(table: EventTable, partial: set) -> None:
    """Drop the events that start after the earliest of the cut ranks' last events: beyond it, those ranks' events
    were not read."""
    import numpy as np

    if not partial:
        return
    start = np.frombuffer(table.start_ns, dtype=typecode(table.start_ns))
    rank = np.frombuffer(table.rank, dtype=typecode(table.rank))
    last = np.full(int(rank.max()) + 1, -1, dtype=np.int64)
    np.maximum.at(last, rank, start)  # each rank's last start
    cut = [last[r] for r in partial if r < len(last) and last[r] >= 0]
    if cut:
        n = int(np.searchsorted(start, min(cut), side="right"))
        del start, rank  # (views of the columns: an array exporting its buffer cannot shrink)
        table.keep_first(n)


def _in_time_order(table: EventTable) -> bool:
    import numpy as np

    start = np.frombuffer(table.start_ns, dtype=typecode(table.start_ns))
    return bool((start[1:] >= start[:-1]).all())


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


__all__ = ["FILE_HEAD_BYTES", "HEAD_BYTES", "HEAD_SHARE", "MAX_HEAD_BYTES", "head_bytes", "read_head"]
