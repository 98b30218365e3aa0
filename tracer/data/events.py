"""The normalized event table: the contract between the reader and everything that reads traces.

One row per torch.distributed operation on one rank, columns stored as arrays (not a dict per event) so
that a million-event trace fits in about a hundred MB and analyses can loop over plain ints: integers in typed
arrays, texts and shapes dictionary-encoded, tensor summaries as JSON text, fields most events lack kept sparse
(columns.py). This module imports neither torch nor textual.

`EventTable.row(i)` gives one event as the normalized dict documented in docs/FORMAT.md; `iter_jsonl`
and `read_jsonl` convert to and from the JSON Lines form that `disttrace events` prints.
"""

from __future__ import annotations

import gc
import mmap
import os
import re
from functools import cache
from itertools import repeat
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import orjson

from ..format import EVENTS_VERSION, is_user_file
from . import event_batches
from .columns import CodedColumn, JsonColumn, SparseColumn, json_key, permuted, typecode, writable
from ..errors import TraceError  # noqa: F401 - importable from here too, where it was first defined

#: The canonical op names; every API variant maps onto one of these.
OPS = (
    "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
    "reduce_scatter", "all_to_all", "barrier", "send", "recv",
)
COLLECTIVE_OPS = frozenset(OPS) - {"send", "recv"}
P2P_OPS = frozenset({"send", "recv"})

Progress = Callable[[float, str], None]  # progress(fraction done, what is being done)


def part_of(progress: Progress | None, lo: float, hi: float) -> Progress | None:
    """A progress callback for a part of the work, the stretch [lo, hi] of the whole (None for None)."""
    if progress is None:
        return None
    return lambda f, label: progress(lo + (hi - lo) * f, label)


NONE = -1  # stands for null in the integer columns (ranks, seqs and times are never negative)

_INT_COLUMNS = ("rank", "gid", "group_seq", "peer", "root", "bytes", "start_ns", "end_ns",
                "wait_start_ns", "wait_end_ns", "seq", "tag", "id", "user_step")
_STR_COLUMNS = ("op", "api", "dtype", "status", "site", "host")
_OBJ_COLUMNS = ("shape", "in_", "out", "error", "extra")
RANK_LIMIT = 2 ** 31  # ranks (rank, peer, root) and group indexes are 4-byte columns


@dataclass(frozen=True)
class Group:
    """A process group as seen in the trace: `name` is the same string on every rank of it."""

    name: str
    ranks: tuple[int, ...]


@dataclass
class RankInfo:
    """What the trace knows about one global rank."""

    rank: int
    host: str = ""
    pid: int = 0
    world_size: int = 0
    backend: str = ""
    clock_offset_ns: int = 0          # added to this rank's raw clock to get rank 0's timeline
    clock_uncertainty_ns: int = 0
    clock_drift_ns: int | None = None  # the last offset measured minus the start offset, when measured again
    source: str = ""                  # file it came from
    damage: str = ""                  # what its file lost ("2 malformed records skipped; torn last record")
    left: bool = False                # its file says it left the job alive (destroy_process_group, a clean exit)


@dataclass
class EventTable:
    """Columnar events, sorted by start_ns (ties by rank). Integer nulls are stored as NONE (-1)."""

    rank: array = field(default_factory=lambda: array("i"))
    gid: array = field(default_factory=lambda: array("i"))          # index into groups
    group_seq: array = field(default_factory=lambda: array("q"))
    peer: array = field(default_factory=lambda: array("i"))
    root: array = field(default_factory=lambda: array("i"))
    bytes: array = field(default_factory=lambda: array("q"))
    start_ns: array = field(default_factory=lambda: array("q"))
    end_ns: array = field(default_factory=lambda: array("q"))
    wait_start_ns: array = field(default_factory=lambda: array("q"))  # async ops: when wait() was called
    wait_end_ns: array = field(default_factory=lambda: array("q"))    # async ops: when wait() returned
    seq: array = field(default_factory=lambda: array("q"))            # backend sequence number (Flight Recorder's id)
    tag: array = field(default_factory=lambda: array("q"))
    id: array = field(default_factory=lambda: array("q"))             # per-rank event number
    # the user-marked training step (disttrace.tracer.mark_step, torch.profiler's step()); NONE: the rank marked
    # none. A column, not `extra`: a marked trace has it on every row (4 bytes here, a dict each there)
    user_step: array = field(default_factory=lambda: array("i"))
    op: CodedColumn = field(default_factory=CodedColumn)
    api: CodedColumn = field(default_factory=CodedColumn)
    dtype: CodedColumn = field(default_factory=CodedColumn)
    status: CodedColumn = field(default_factory=CodedColumn)
    site: CodedColumn = field(default_factory=CodedColumn)
    host: CodedColumn = field(default_factory=CodedColumn)
    shape: CodedColumn = field(default_factory=lambda: CodedColumn(key=json_key))
    in_: JsonColumn = field(default_factory=JsonColumn)    # the tensor summaries, as JSON text (columns.py)
    out: JsonColumn = field(default_factory=JsonColumn)
    error: SparseColumn = field(default_factory=SparseColumn)
    extra: SparseColumn = field(default_factory=SparseColumn)   # any other keys of the event, or None
    async_op: bytearray = field(default_factory=bytearray)
    groups: list = field(default_factory=list)  # list[Group]
    ranks: dict = field(default_factory=dict)   # rank -> RankInfo
    warnings: list = field(default_factory=list)
    # what an importer could and could not know (not damage): the report's notes (data/kineto.py)
    notes: list = field(default_factory=list)
    # rank -> the hang watchdog's "stacks" records (docs/FORMAT.md), in file order, "t" aligned like the events
    stacks: dict = field(default_factory=dict)
    # the runs (process-group worlds, data/runs.py) of the trace dirs read, and the number of the one in the table
    # (0: not read from rank files)
    runs: list = field(default_factory=list)
    run: int = 0
    # the trace store this table was opened from or written to (data/store.py's StoreOrigin), None: none; where
    # the analysis keeps its results for the next open
    origin: object = field(default=None, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.rank)

    # -- building -----------------------------------------------------------------------------
    def group_id(self, name: str, ranks: Iterable[int], _cache: dict | None = None) -> int:
        """Index of the group (name, ranks), adding it if new."""
        key = Group(str(name), tuple(int(r) for r in ranks))
        index = self.__dict__.setdefault("_group_index", {})
        gid = index.get(key)
        if gid is None:
            gid = index[key] = len(self.groups)
            self.groups.append(key)
        return gid

    def add_rows(self, cols: dict) -> None:
        """The one way rows enter the table: the columns of ROW_COLUMNS, all of one length and already checked by
        whoever built them (`append`, `extend`, the readers), appended together; each new rank registered."""
        for name in _INT_COLUMNS:  # (a column mapped from the store is read-only: copied before it grows)
            setattr(self, name, writable(getattr(self, name)))
        for name in ROW_COLUMNS:
            getattr(self, name).extend(cols[name])
        rank, host = cols["rank"], cols["host"]
        for r in set(rank) - self.ranks.keys():
            self.ranks[r] = RankInfo(rank=r, host=host[rank.index(r)])

    def append(self, ev: dict) -> None:
        """Append one normalized event dict (missing optional keys are null). Raises KeyError/TypeError/ValueError on
        an event that lacks the required keys or has wrong types, before changing anything: readers turn that
        into a warning and the columns stay the same length."""
        op = ev["op"]
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}")
        rank = _int(ev["rank"])
        start = _int(ev["start_ns"])
        if rank < 0 or start < 0:
            raise ValueError("negative rank or time")
        for key in ("rank", "peer", "root"):
            if type(v := ev.get(key)) is int and v >= RANK_LIMIT:
                raise ValueError(f"{key} out of range")
        ranks = ev.get("group_ranks") or ()
        if not isinstance(ranks, (list, tuple)) or not all(type(r) is int for r in ranks):
            raise TypeError("group_ranks must be a list of integers")
        ints = (_opt_int(ev.get("group_seq")), _opt_int(ev.get("peer")), _opt_int(ev.get("root")),
                _opt_int(ev.get("bytes"), 0), _opt_int(ev.get("end_ns")), _opt_int(ev.get("wait_start_ns")),
                _opt_int(ev.get("wait_end_ns")), _opt_int(ev.get("seq")), _opt_int(ev.get("tag")),
                _opt_int(ev.get("id")), _opt_int(ev.get("step")))
        if ints[-1] >= RANK_LIMIT:
            raise ValueError("step out of range")
        status = ev.get("status") or ("ok" if ev.get("end_ns") is not None else "unfinished")
        texts = (text_field(ev.get("api")) or op, text_field(ev.get("dtype")), text_field(status),
                 text_field(ev.get("site")), text_field(ev.get("host")))
        group = text_field(ev.get("group")) or _default_group_name(ranks)
        extra = {k: v for k, v in ev.items() if k not in _KNOWN_KEYS}
        # everything is checked: from here on nothing raises, so all columns grow together
        row = dict(zip(("group_seq", "peer", "root", "bytes", "end_ns", "wait_start_ns", "wait_end_ns", "seq", "tag",
                        "id", "user_step"), ints))
        row.update(zip(("api", "dtype", "status", "site", "host"), texts))
        row.update(rank=rank, gid=self.group_id(group, ranks), start_ns=start, op=op, shape=ev.get("shape"),
                   in_=ev.get("in"), out=ev.get("out"), error=ev.get("error"), extra=extra or None,
                   async_op=1 if ev.get("async_op") else 0)
        self.add_rows({name: (v,) for name, v in row.items()})

    def sort(self) -> None:
        """Sort rows by (start_ns, rank, id) in place. In numpy: a key tuple per row would cost ~150 bytes and a
        Python call each (1.5 GB and ~10 s at 10M rows); rank files are concatenated, so every trace dir sorts."""
        import numpy as np

        n = len(self)
        if n < 2:
            return
        start, rank, ident = (np.frombuffer(c, dtype=typecode(c)) for c in (self.start_ns, self.rank, self.id))
        order = np.lexsort((ident, rank, start))
        if (order[1:] > order[:-1]).all():
            return  # already in order (what `disttrace events` writes): nothing to do
        for name in _INT_COLUMNS:
            setattr(self, name, permuted(getattr(self, name), order))
        for name in _STR_COLUMNS + _OBJ_COLUMNS:
            setattr(self, name, getattr(self, name).take(order))
        self.async_op = bytearray(np.frombuffer(self.async_op, dtype=np.uint8)[order].tobytes())

    def keep_first(self, n: int) -> None:
        """Keep the first n rows (of a sorted table: the events that start before a time)."""
        for name in _INT_COLUMNS:
            col = writable(getattr(self, name))
            del col[n:]
            setattr(self, name, col)
        for name in _STR_COLUMNS + _OBJ_COLUMNS:
            getattr(self, name).truncate(n)
        del self.async_op[n:]

    # -- reading ------------------------------------------------------------------------------
    def row(self, i: int) -> dict:
        """Event i as the normalized dict of docs/FORMAT.md."""
        g = self.groups[self.gid[i]]
        ev = {
            "v": EVENTS_VERSION,
            "run": self.run,
            "rank": self.rank[i],
            "host": self.host[i],
            "op": self.op[i],
            "api": self.api[i],
            "group": g.name,
            "group_ranks": list(g.ranks),
            "group_seq": _null(self.group_seq[i]),
            "seq": _null(self.seq[i]),
            "peer": _null(self.peer[i]),
            "root": _null(self.root[i]),
            "tag": _null(self.tag[i]),
            "bytes": self.bytes[i],
            "dtype": self.dtype[i] or None,
            "shape": self.shape[i],
            "async_op": bool(self.async_op[i]),
            "start_ns": self.start_ns[i],
            "end_ns": _null(self.end_ns[i]),
            "wait_start_ns": _null(self.wait_start_ns[i]),
            "wait_end_ns": _null(self.wait_end_ns[i]),
            "status": self.status[i],
            "error": self.error[i],
            "in": self.in_[i],
            "out": self.out[i],
            "site": self.site[i] or None,
            "id": _null(self.id[i]),
        }
        if not self.run:  # not read from rank files (an events file of one run, a Flight Recorder dump)
            del ev["run"]
        if self.user_step[i] != NONE:
            ev["step"] = self.user_step[i]
        if self.extra[i]:
            ev.update(self.extra[i])
        return ev

    def group_ranks(self, i: int) -> tuple[int, ...]:
        return self.groups[self.gid[i]].ranks

    def duration_ns(self, i: int) -> int | None:
        end = self.end_ns[i]
        return None if end == NONE else end - self.start_ns[i]

    def world_ranks(self) -> list[int]:
        return sorted(self.ranks)

    def damage_summary(self) -> str:
        """What the ranks' files lost ("rank 1: torn last record; rank 2: ..."), or "" for an intact trace."""
        return "; ".join(f"rank {r}: {info.damage}" for r, info in sorted(self.ranks.items()) if info.damage)

    def damage_line(self) -> str:
        """The damage as the report and the viewer say it first, or "" for an intact trace."""
        damaged = self.damage_summary()
        return f"damaged trace: {damaged}. No finding here rests on the missing records." if damaged else ""


# The columns that hold one value per row (EventTable.add_rows appends to all of them at once)
ROW_COLUMNS = _INT_COLUMNS + _STR_COLUMNS + _OBJ_COLUMNS + ("async_op",)

_KNOWN_KEYS = frozenset({
    "v", "run", "rank", "host", "op", "api", "group", "group_ranks", "group_seq", "seq", "peer", "root", "tag",
    "bytes", "dtype", "shape", "async_op", "start_ns", "end_ns", "wait_start_ns", "wait_end_ns", "status", "error",
    "in", "out", "site", "id", "step",
})


def _default_group_name(ranks) -> str:
    return "ranks:" + ",".join(str(r) for r in ranks)


def _int(v: Any) -> int:
    if type(v) is not int:
        raise TypeError(f"expected an integer, got {type(v).__name__}")
    if not -2 < v < 2 ** 63:
        raise ValueError("integer out of range")
    return v


def text_field(v: Any) -> str:
    """A string field as a string: numbers are spelled out, anything else (lists, objects) is dropped."""
    if type(v) is str:
        return v
    if type(v) in (int, float, bool):
        return str(v)
    return ""


def _opt_int(v: Any, default: int = NONE) -> int:
    return default if v is None else _int(v)


def _null(v: int):
    return None if v == NONE else v


def stacks_site(stacks: dict) -> str:
    """Where a rank was when the watchdog recorded its stacks (a "stacks" record): the main thread's innermost
    frame of user code, and what it was calling ("train.py:12 in main → wait"). The live hang diagnosis and the
    analysis' hang problems both say this; the record may come from a damaged file, so anything odd is skipped."""
    threads = stacks.get("threads") if isinstance(stacks, dict) else None
    threads = [t for t in threads if isinstance(t, dict)] if isinstance(threads, list) else []
    main = next((t for t in threads if t.get("name") == "MainThread"), threads[0] if threads else None)
    frames = main.get("frames") if main else None
    frames = [(text_field(f[0]), text_field(f[1]), text_field(f[2])) for f in frames
              if isinstance(f, list) and len(f) >= 3] \
        if isinstance(frames, list) else []
    if not frames:
        return "(no Python stack)"
    user = [k for k, f in enumerate(frames) if is_user_file(f[0])]
    if not user:
        return "{}:{} in {}".format(*frames[-1])
    k = user[-1]
    calling = f" → {frames[-1][2]}" if k < len(frames) - 1 else ""
    return "{}:{} in {}".format(*frames[k]) + calling


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
    share of a parallel first read (data/parallel.py)."""
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
    if run is not None:
        if run not in present and (present or run != 0):
            runs = ", ".join(map(str, present)) or "none (it has no run numbers)"
            raise TraceError(f"{path}: no run {run} in this events file; its runs: {runs}")
        return run, present
    if len(present) > 1:
        warnings.append(f"{path}: this file holds {len(present)} runs; reading the last, run {present[-1]} "
                        f"(pick one with --run N)")
        return present[-1], present
    return None, present


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


class gc_paused:
    """Pause the cyclic garbage collector while millions of acyclic objects are made: left on, it walks
    everything alive again and again as the allocations pile up (the reading then takes several times longer)."""

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            gc.enable()
        return False


def give_back_freed_memory() -> None:
    """Return the heap pages that freed objects held to the system. C's allocator keeps freed memory for reuse, so
    a process that made and dropped millions of objects (a parse, an analysis) keeps its peak resident: a viewer
    that read 1M events with summaries and opened the store it wrote kept ~600 MB it no longer used. glibc's
    malloc_trim; elsewhere (macOS, musl) the allocator decides."""
    import ctypes
    import sys

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    if "pyarrow" in sys.modules:  # Arrow's own allocator (mimalloc, jemalloc) keeps what it freed too
        pool = sys.modules["pyarrow"].default_memory_pool()
        if hasattr(pool, "release_unused"):
            pool.release_unused()


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
                cols = event_batches.columns(table, typed, _OP_SET, _default_group_name)
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
# in the CPU's caches: parsing thousands ahead costs half as much again per line (measured: orjson 1.0 us a line
# kept 256 at a time, 1.5 us kept 8,192 at a time, against 1.05 us keeping nothing).
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


def extend(table: EventTable, events: list) -> tuple[int, str]:
    """Append many normalized event dicts at once, a column at a time (fast); if any event is malformed, fall
    back to one at a time so that the good ones are kept. Returns (skipped, first reason)."""
    if not events:
        return 0, ""
    try:
        cols = _columns(table, events)
    except Exception:  # noqa: BLE001 - some event is malformed: find which, keep the rest
        skipped, why = 0, ""
        for ev in events:
            try:
                table.append(ev)
            except Exception as e:  # noqa: BLE001
                skipped += 1
                why = why or f"{type(e).__name__}: {e}"[:200]
        return skipped, why
    table.add_rows(cols)
    return 0, ""


def _columns(table: EventTable, evs: list) -> dict:
    """Every column of `evs`, validated; raises on the first malformed event (nothing is appended then). Each
    field is taken from all the events by one map() of dict.get (C speed: a list comprehension costs half as much
    again)."""
    n = len(evs)

    def get(key) -> list:
        return list(map(dict.get, evs, repeat(key, n)))

    def ints(key, default=NONE, typecode="q"):
        values = get(key)
        if None in values:
            values = list(map({None: default}.get, values, values))  # null -> default; the rest as it is
        if not set(map(type, values)) <= _INT_TYPE:  # (array() would take a bool as 0/1, as append does not)
            raise TypeError(f"{key} must be an integer")
        out = array(typecode, values)  # OverflowError past the column's range
        if min(out, default=0) < -1:
            raise ValueError(f"negative {key}")
        return out

    ops = get("op")
    if not set(ops) <= _OP_SET:
        raise ValueError(f"unknown op in {set(ops) - _OP_SET}")
    ranks, starts = get("rank"), get("start_ns")
    if not set(map(type, ranks)) | set(map(type, starts)) <= _INT_TYPE:  # (array() would take a bool)
        raise TypeError("rank and start_ns must be integers")
    rank, start = array("i", ranks), array("q", starts)
    if min(rank) < 0 or min(start) < 0:
        raise ValueError("negative rank or time")
    cache: dict = table.__dict__.setdefault("_group_keys", {})
    gid = array("i")
    for name, ranks in zip(get("group"), get("group_ranks")):
        ranks = ranks or ()
        # groups of the same name (every rank's "tp") differ by their ranks: key by name, first rank and size (the
        # table's, for every batch: a group is looked up once)
        key = None
        if (name is None or type(name) is str) and type(ranks) in (list, tuple):
            key = (name, ranks[0] if ranks else -1, len(ranks))
        hit = cache.get(key)
        if hit is not None and hit[0] == ranks:
            gid.append(hit[1])
            continue
        if not isinstance(ranks, (list, tuple)) or not all(type(r) is int for r in ranks):
            raise TypeError("group_ranks must be a list of integers")
        g = table.group_id(text_field(name) or _default_group_name(ranks), ranks)
        if key is not None:
            cache[key] = (ranks, g)
        gid.append(g)
    end = ints("end_ns")
    statuses = get("status")
    if not all(statuses):  # no status: ok if it ended
        statuses = [st if st else "ok" if e != NONE else "unfinished" for st, e in zip(statuses, end)]
    known, n_known = _KNOWN_KEYS, len(_KNOWN_KEYS)
    apis = get("api")
    return {
        "rank": rank, "gid": gid, "group_seq": ints("group_seq"), "peer": ints("peer", typecode="i"),
        "root": ints("root", typecode="i"),
        "bytes": ints("bytes", 0), "start_ns": start, "end_ns": end, "wait_start_ns": ints("wait_start_ns"),
        "wait_end_ns": ints("wait_end_ns"), "seq": ints("seq"), "tag": ints("tag"), "id": ints("id"),
        "user_step": ints("step", typecode="i"),
        "op": ops,
        "api": apis if set(map(type, apis)) == {str} and all(apis) else
        [a if type(a) is str and a else text_field(a) or o for a, o in zip(apis, ops)],
        "dtype": text_column(get("dtype")),
        "status": text_column(statuses),
        "site": text_column(get("site")),
        "host": text_column(get("host")),
        "shape": get("shape"),
        "in_": get("in"),
        "out": get("out"),
        "error": get("error"),
        "extra": [None] * n if set().union(*evs) <= known else  # (one C pass over the batch's keys)
        [({k: v for k, v in e.items() if k not in known} or None) if len(e) > n_known or not e.keys() <= known
         else None for e in evs],
        "async_op": bytearray(1 if a else 0 for a in get("async_op")),
    }


_OP_SET = frozenset(OPS)
_INT_TYPE = {int}


def text_column(values: list) -> list:
    """A text column as strings (text_field of each), without a call per value when all are strings already."""
    return values if set(map(type, values)) == {str} else list(map(text_field, values))
