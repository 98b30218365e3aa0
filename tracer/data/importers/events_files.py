"""Events files: the JSON Lines form of the event table that `disttrace events` prints (docs/FORMAT.md), written
(iter_jsonl) and read back (read_jsonl; read_range, a share of a parallel first read). Lines are decoded a batch
at a time by event_batches.py, the careful way (orjson, then table/rows.py) where that declines."""

from __future__ import annotations

import mmap
import os
import re
from functools import cache
from itertools import repeat
from typing import Iterator

import orjson

from ...errors import TraceError
from ...format import EVENTS_VERSION
from ..table.event_table import OPS, EventTable, default_group_name
from ..table.memory import gc_paused
from ..table.rows import extend
from . import event_batches
from .runs import pick


# -- JSON Lines ---------------------------------------------------------------------------------

def iter_jsonl(table: EventTable) -> Iterator[bytes]:
    """Each event as one JSON line (bytes, newline included), in table order."""
    dumps = orjson.dumps
    for i in range(len(table)):
        row = table.row(i)
        try:
            yield dumps(row) + b"\n"
        except (orjson.JSONEncodeError, TypeError):
            for key in ("in", "out", "shape", "error") + tuple(table.extra[i] or ()):
                try:
                    dumps(row[key])
                except (orjson.JSONEncodeError, TypeError):
                    row[key] = "<unprintable: nested too deeply>"
            yield dumps(row) + b"\n"


def read_jsonl(path: str, table: EventTable | None = None, progress=None, run: int | None = None) -> EventTable:
    """Read a normalized events file (what `disttrace events` prints). Lines that are not valid events are
    skipped with a warning; a file with no valid event raises TraceError. `progress(fraction, label)` is called
    now and then on large files. A file of several runs (`disttrace events --run all`) is read one run at a time:
    `run`, or the last."""
    table = table if table is not None else EventTable()
    n_before = len(table)
    fh, size = _open_events(path)
    with fh, gc_paused():
        keep = run_to_keep(path, fh, run, table)
        bad, first_bad = read_lines(path, iter(lambda: fh.readlines(_CHUNK_BYTES), []), size, table, progress,
                                    keep)
    return events_read(path, table, len(table) - n_before, bad, first_bad, progress)


def no_events(paths: list[str]) -> str:
    """What a reader says of a trace that holds no events."""
    return f"{', '.join(paths)}: the trace holds no events (did the job call torch.distributed?)"


def _open_events(path: str):
    try:
        fh = open(path, "rb")
        return fh, max(os.fstat(fh.fileno()).st_size, 1)
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}") from None


def run_to_keep(path: str, fh, run: int | None, table: EventTable) -> int | None:
    """The run of the events file to read (None: all its lines, the file holding at most one); the table's run
    number is set, and a note added when the file holds others."""
    keep, present = _run_to_keep(path, fh, run, table.warnings)
    table.run = keep if keep is not None else present[0] if len(present) == 1 else table.run
    return keep


def events_read(path: str, table: EventTable, n_read: int, bad: int, first_bad: str, progress=None) -> EventTable:
    """What read_jsonl says once the file's `n_read` events are read (into `table`, or into a parallel read's
    parts): the malformed lines skipped, or that it held no events (TraceError); each rank's source."""
    if bad:
        table.warnings.append(f"{path}: skipped {bad} malformed line(s) ({first_bad})")
    if not n_read:
        raise TraceError(f"{path}: no disttrace events in this file")
    for info in table.ranks.values():
        if not info.source:
            info.source = path
    if progress is not None:
        progress(1.0, "parsed")
    return table


def read_range(path: str, start: int, stop: int, table: EventTable, run: int | None, progress=None
               ) -> tuple[int, str]:
    """The events of the lines in bytes [start, stop) of an events file (both at a line's start) into `table`,
    of run `run` (None: every line); (malformed lines, the first one's reason, numbered in the whole file). A
    share of a parallel first read (data/store/parallel.py)."""
    fh, _ = _open_events(path)

    def chunks():
        at = start
        fh.seek(start)
        while at < stop:
            block = fh.read(min(_CHUNK_BYTES, stop - at))
            if not block:
                return
            if at + len(block) < stop:  # up to the last whole line (a line longer than a chunk: read on to its end)
                cut = block.rfind(b"\n") + 1
                if cut:
                    fh.seek(at + cut)
                    block = block[:cut]
                else:
                    block += fh.readline()
            at += len(block)
            lines = block.split(b"\n")  # (as readlines splits: at newlines only)
            if lines[-1] == b"":
                lines.pop()
            yield lines

    @cache
    def line_base() -> int:  # (counted only for a damaged share: its bad lines' numbers)
        fh2, _ = _open_events(path)
        with fh2:
            n = done = 0
            while done < start:
                block = fh2.read(min(_CHUNK_BYTES, start - done))
                if not block:
                    break
                n += block.count(b"\n")
                done += len(block)
            return n

    with fh, gc_paused():
        return read_lines(path, chunks(), stop - start, table, progress, run, line_base)


def _run_to_keep(path: str, fh, run: int | None, warnings: list) -> tuple[int | None, list[int]]:
    """(the run to read of an events file: None when it holds at most one and none was asked for; the runs in
    it). The runs are found by the bytes that start each line (`{"v":3,"run":N,`, as `disttrace events` writes
    them): no parsing."""
    try:
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
            present = _runs_in(m)
    except (OSError, ValueError):  # an empty file, or one that cannot be mapped: read it whole
        present = []
    if (run is None and len(present) <= 1) or (run == 0 and not present):  # (a file without run numbers: run 0)
        return run, present
    return pick(present, run, warnings,
                lambda ns: f"{path}: this file holds {len(ns)} runs; reading the last, run {ns[-1]} "
                           f"(pick one with --run N)",
                lambda ns: f"{path}: no run {run} in this events file; its runs: "
                           f"{', '.join(map(str, ns)) or 'none (it has no run numbers)'}"), present


_RUN_KEY = re.compile(rb'"run":(\d{1,9}),')
_FIND_EACH = 1000  # runs up to which each number is looked for by a byte search; beyond, one regex pass


def _runs_in(m) -> list[int]:
    """The run numbers in an events file, by byte searches at memchr speed (no pass of Python over the lines):
    the first event's and the last's, and each number between them that some line holds. A span of numbers too
    wide for that (a damaged file) is read by one regular-expression pass instead."""
    first = _RUN_KEY.search(m, 0, 1 << 16)
    if first is None:
        return []
    last = _RUN_KEY.findall(m, max(len(m) - (1 << 16), 0))
    lo, hi = sorted((int(first.group(1)), int(last[-1]) if last else int(first.group(1))))
    if hi - lo > _FIND_EACH:
        return sorted({int(k) for k in _RUN_KEY.findall(m)})
    return [k for k in range(lo, hi + 1) if k in (lo, hi) or m.find(b'"run":%d,' % k) >= 0]


def read_lines(path, chunks, size, table, progress, keep_run: int | None = None, line_base=lambda: 0
               ) -> tuple[int, str]:
    """The events of `chunks` (lists of lines) into `table`: (malformed lines, the first one's reason). Lines are
    numbered from line_base() + 1, called only if some line is malformed."""
    bad = 0
    first_bad = ""
    done = lineno = 0
    next_progress = _PROGRESS_BYTES
    for lines in chunks:  # streamed: the file is never held whole in memory
        for k in range(0, len(lines), _BATCH):
            batch = lines[k:k + _BATCH]
            lineno += len(batch)
            typed = event_batches.decode(batch)  # the common case, fast; else the careful way, below
            if typed is not None:
                _check_version(path, event_batches.versions(typed))
                if keep_run is not None:
                    typed = [ev for ev, r in zip(typed, event_batches.runs(typed)) if r == keep_run]
                if not typed:
                    continue
                cols = event_batches.columns(table, typed, _OP_SET, default_group_name)
                if cols is not None:
                    table.add_rows(cols)
                    continue
            events, skipped, why = _parsed(batch, lineno - len(batch), line_base)
            bad += skipped
            first_bad = first_bad or why
            _check_version(path, list(map(dict.get, events, repeat("v", len(events)))))
            if keep_run is not None:
                events = [ev for ev in events if ev.get("run") == keep_run]
            skipped, why = extend(table, events)
            bad += skipped
            first_bad = first_bad or why
        done += sum(map(len, lines))
        if progress is not None and done >= next_progress:
            next_progress = done + _PROGRESS_BYTES
            progress(done / size, "reading events")
    return bad, first_bad


def _check_version(path: str, versions: list) -> None:
    newer = [v for v in versions if type(v) is int and v > EVENTS_VERSION]
    if newer:
        raise TraceError(f"{path}: written by a newer disttrace (events format v{max(newer)}, this reads "
                         f"v{EVENTS_VERSION}); upgrade disttrace")


# Lines are parsed a batch of _BATCH at a time and made into columns at once, while the batch's dicts are still
# in the CPU's caches: parsing thousands ahead costs more per line than parsing a few hundred (docs/PERFORMANCE.md).
_BATCH = 256
_CHUNK_BYTES = 4 << 20
_PROGRESS_BYTES = 16 << 20


class _Malformed(str):
    """Why a line is not JSON, in its place among the parsed lines."""


def _parsed(lines: list, lineno: int, line_base=lambda: 0) -> tuple[list, int, str]:
    """(the JSON objects of `lines`, numbered from line_base() + lineno + 1; how many were malformed; the first
    one's reason). Blank lines are skipped quietly."""
    try:
        events = list(map(orjson.loads, lines))  # C speed for the common case: every line is valid
    except orjson.JSONDecodeError:
        events = []
        for n, line in enumerate(lines, line_base() + lineno + 1):
            try:
                events.append(orjson.loads(line))
            except orjson.JSONDecodeError as e:
                if line.strip():
                    events.append(_Malformed(f"line {n}: {e}"[:200]))
    if set(map(type, events)) <= {dict}:
        return events, 0, ""
    bad = [k for k, ev in enumerate(events) if type(ev) is not dict]
    first = events[bad[0]]
    why = first if type(first) is _Malformed else f"line {line_base() + lineno + bad[0] + 1}: not a JSON object"
    return [ev for ev in events if type(ev) is dict], len(bad), why


_OP_SET = frozenset(OPS)
