"""disttrace's own traces: the rank files of one or several trace dirs (nodes) -> one aligned EventTable.

What it tolerates, with a warning each (never a crash): a torn last line (a rank killed mid-write), the zero
bytes a crashed recorder leaves at the end of its file, malformed lines, records of unknown kinds, ends without
a begin. A begin without an end is an op the rank never finished: status `unfinished`. What each rank's file lost
is kept in its RankInfo (`damage`), so that the analysis never takes the missing records for findings; the hang
watchdog's stacks records are kept in `EventTable.stacks`, aligned like the events.

Clock alignment: each rank file holds its offset to rank 0's monotonic clock measured at start and, when the job
ran long enough, again later. Times are shifted by the start offset plus the drift interpolated linearly between
the start and the last measurement (held past it).

Imports neither torch nor textual.
"""

from __future__ import annotations

import os
import time
from array import array
from bisect import bisect_right
from itertools import repeat
from operator import attrgetter

import orjson

from ...format import (COPIED, LIVE_REASONS, SNAPSHOT_INFO, BEGIN, BEGIN_EXTRA, CLOCK, END, FORMAT_VERSION, GROUP, LEFT, META, STACKS, STEP, SUMMARY,
                       WAIT, is_rank_file, says_left)
from ...errors import TraceError
from ..table.event_table import NONE, OPS, EventTable, RankInfo, text_field
from ..table.memory import gc_paused
from ..table.progress import Progress
from ..table.rows import text_column
from . import rank_batches
from .ring import has_ring, read_ring_wraps, ring_path
from .runs import find_runs, pick_run, runs_here, unreadable, written

_INT = int

def find_rank_files(path: str) -> list[str]:
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise TraceError(f"cannot read trace directory {path}: {e.strerror or e}") from None
    return [os.path.join(path, n) for n in names if is_rank_file(n)]


def trace_sources(path: str) -> list[str]:
    """The files a trace dir's events come from: its rank files and, of a black-box trace, their rings."""
    files = find_rank_files(path)
    return files + [ring_path(f) for f in files if has_ring(f)]


def is_trace_dir(path: str) -> bool:
    """A directory that holds disttrace rank files."""
    return os.path.isdir(path) and bool(find_rank_files(path))


def load_trace_dirs(paths: list[str], table: EventTable, progress: Progress | None = None,
                    run: int | None = None) -> None:
    """Load disttrace trace dirs (one per node: their rank files make one trace) into `table`.

    They may hold several runs (process-group worlds: restarts, successive jobs; runs.py): `run` picks one by
    its number; by default the only one, else the last, with a note that there are others."""
    files = run_files(paths, table, run)
    with gc_paused():
        if not read_rank_files(files, table, progress):
            raise TraceError(no_readable(files))


def run_files(paths: list[str], table: EventTable, run: int | None = None) -> list[str]:
    """The rank files of the run to read (`run`, or the reader's default) of these trace dirs; the trace's runs,
    the run's number and the warnings of finding them (unreadable files, the other runs) go to `table`."""
    rank_files = [f for p in paths for f in find_rank_files(p)]
    runs, skipped = find_runs(rank_files)
    for path in skipped:
        table.warnings.append(unreadable(path))
    if not runs:
        raise TraceError(f"{os.path.dirname(rank_files[0]) or '.'}: no readable rank files in this trace")
    chosen = pick_run(runs, run, table.warnings, " ".join(paths))
    table.runs, table.run = runs, chosen.number
    return [f.path for f in chosen.files]


def no_readable(files: list[str]) -> str:
    return f"{os.path.dirname(files[0]) or '.'}: no readable rank files in this trace"


class _RankFile:
    """The parsed records of one rank file."""

    def __init__(self, path: str, limit: int | None = None):
        self.path = path
        self.limit = limit                 # read only the whole lines of its first `limit` bytes (None: all)
        self.meta: dict | None = None
        self.groups: dict[int, tuple[str, tuple]] = {}
        self.begins: list[dict] = []
        self.ends: dict[int, dict] = {}
        self.waits: dict[int, dict] = {}
        self.late: dict[int, dict] = {}   # CUDA summaries resolved after the fact: id -> {"in"/"out": ...}
        self.clock: dict[str, dict] = {}
        self.left = False                  # the rank left the job alive (destroy_process_group, or a clean exit)
        self.other: list[dict] = []        # other kinds, kept for later issues' readers
        self.stacks: list[dict] = []       # the hang watchdog's records: where the rank was
        self.steps: list[tuple[int, str]] = []  # user step markers: (raw time, source)
        self.bad = 0
        self.first_bad = ""
        self.torn = False
        self.fast = False  # begins, ends and waits are rank_batches' records (else orjson's dicts)
        self.ring: dict | None = None  # a black-box rank's ring (ring.py): {"lines", "wraps"}
        self.step_n: list[int] = []  # the step markers' own numbers ("n"): a ring's first is not the job's first
        self.copied: int | None = None  # a snapshot's copy: when the rank copied it (its clock)
        self.read_ns: int | None = None  # when this host read it whole (its monotonic clock, the local ranks' own)


def _parse_file(path: str, careful: bool = False, limit: int | None = None) -> _RankFile:
    """The records of the rank file `path` (with `limit`: of its whole lines in its first `limit` bytes): its
    begins, ends and waits decoded by msgspec into typed records (rank_batches), or, for a file with anything odd
    in them (or `careful`), every record by orjson, a malformed one skipped and counted."""
    data = written(path, limit)
    lines = data.split(b"\n")
    torn = False
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        torn = True  # no newline after the last record: the rank died while writing it
    ring = None
    if has_ring(path):  # a black-box rank: its rank file's records, then its ring's (kept before a torn last line)
        ring_lines, wraps = read_ring_wraps(ring_path(path))
        ring = {"lines": len(ring_lines), "wraps": wraps}
        lines[len(lines) - torn:len(lines) - torn] = ring_lines
    read_ns = time.monotonic_ns() if limit is None else None
    if not careful and not torn:
        rf = _RankFile(path, limit)
        rf.ring, rf.read_ns = ring, read_ns
        begins, ends, waits, others = rank_batches.split(lines)
        recs = rank_batches.decode(begins, ends, waits)
        if recs is not None and _others(rf, others):
            rf.begins, rf.ends, rf.waits = recs
            rf.fast = True
            return rf
    rf = _RankFile(path, limit)
    rf.torn, rf.ring, rf.read_ns = torn, ring, read_ns
    loads = orjson.loads
    last = len(lines) - 1
    for n, line in enumerate(lines):
        try:
            _record(rf, loads(line))
        except Exception as e:  # noqa: BLE001 - malformed record: skip it, say so once per file
            if n == last and rf.torn:
                continue
            rf.bad += 1
            if not rf.first_bad:
                rf.first_bad = f"line {n + 1}: {type(e).__name__}"
    return rf


def _others(rf: _RankFile, lines: list) -> bool:
    """Take the records of `lines` (a rank file's lines other than its begins, ends and waits) into rf; False on a
    malformed one, or on a begin, end or wait written otherwise than the recorder writes them."""
    loads = orjson.loads
    try:
        for line in lines:
            r = loads(line)
            if type(r) is not dict or r.get("k") in (BEGIN, END, WAIT):
                return False
            _record(rf, r)
    except Exception:  # noqa: BLE001
        return False
    return True


def _record(rf: _RankFile, r: dict) -> None:
    """Take one parsed record into rf; raises on a malformed one."""
    k = r["k"]
    if k == BEGIN:
        rf.begins.append(r)
    elif k == END:
        rf.ends[r["i"]] = r
    elif k == WAIT:
        rf.waits[r["i"]] = r
    elif k == SUMMARY:
        rf.late.setdefault(r["i"], {})[r["which"]] = r.get("s")
    elif k == GROUP:
        name = group_name(r)
        ranks = tuple(r["ranks"])
        if not all(type(x) is int and 0 <= x < 2 ** 31 for x in ranks):
            raise TypeError("group ranks must be integers")
        rf.groups[r["g"]] = (name, ranks)
    elif k == META:
        rf.meta = r
    elif k == STEP:
        if type(r["t"]) is not int:
            raise TypeError("step time must be an integer")
        rf.steps.append((r["t"], text_field(r.get("src"))))
        if type(r.get("n")) is int:
            rf.step_n.append(r["n"])
    elif k == CLOCK:
        rf.clock[r.get("phase", "start")] = r
        rf.left = rf.left or says_left(r)
    elif k == LEFT:
        rf.left = True
    elif k == STACKS:
        if type(r["t"]) is not int:
            raise TypeError("stacks time must be an integer")
        rf.stacks.append(r)
    elif k == COPIED:
        if type(r["t"]) is not int:
            raise TypeError("copied time must be an integer")
        rf.copied = r["t"]
    else:
        rf.other.append(r)


def group_name(r: dict) -> str:
    """A group record's name: torch names the default group "0", which reads like a rank in messages: "world"."""
    return "world" if r.get("desc") == "default_pg" else (text_field(r.get("name")) or text_field(r.get("desc")))


def _ns(record: dict | None, key: str) -> int | None:
    v = record.get(key) if isinstance(record, dict) else None
    return v if type(v) is int and abs(v) < 2 ** 62 else None


def _clock(rf: _RankFile) -> tuple | None:
    return clock_of(rf.clock)


def clock_of(records: dict[str, dict]) -> tuple | None:
    """A rank's clock alignment from its clock records (phase -> record), raw ns -> aligned ns =
    t + o0 + round((min(max(t, t0), t1) - t0) * slope): the
    start offset o0 plus the drift, interpolated linearly between the start and the last measurement (t0, t1), and
    held at its ends: extrapolated from a short baseline (the first re-measurement is a second after the start),
    the measurements' error would grow with the time past it. (o0, t0, t1, slope), slope None: no drift measured;
    None: no offset. _offset_fn and _aligned apply it (and the aggregates' reader, importers/aggregates.py)."""
    start, end = records.get("start"), records.get("end")
    o0 = _ns(start, "offset_ns")
    if o0 is None:
        return None
    o1, t0, t1 = _ns(end, "offset_ns"), _ns(start, "mono_ns"), _ns(end, "mono_ns")
    if o1 is not None and t0 is not None and t1 is not None and t1 > t0 and _drifted(start, end):
        return o0, t0, t1, (o1 - o0) / (t1 - t0)
    return o0, t0, t1, None


def _drifted(start: dict, end: dict) -> bool:
    """Whether the two measurements tell a drift: the offset moved by more than their uncertainties together. (A
    loaded node's slow round trips make a "drift" within the measurements' own error, which on ranks of one machine
    moved one rank's events past its peers': docs/PERFORMANCE.md.)"""
    moved = abs(_ns(end, "offset_ns") - _ns(start, "offset_ns"))
    return moved > (_ns(start, "uncertainty_ns") or 0) + (_ns(end, "uncertainty_ns") or 0)


def _offset_fn(rf: _RankFile):
    """(raw ns -> aligned ns, one time at a time (_clock); the start offset; its uncertainty; the drift, or None)."""
    clock = _clock(rf)
    if clock is None:
        return (lambda t: t), 0, 0, None
    o0, t0, t1, slope = clock
    unc = _ns(rf.clock.get("start"), "uncertainty_ns") or 0
    end = rf.clock.get("end")
    drift = None
    if _ns(end, "offset_ns") is not None:  # measured again: its uncertainty counts, the drift is told if not applied
        unc = max(unc, _ns(end, "uncertainty_ns") or 0)
        drift = _ns(end, "offset_ns") - o0
    if slope is not None:
        return (lambda t: t + o0 + round((min(max(t, t0), t1) - t0) * slope)), o0, unc, drift
    return (lambda t: t + o0), o0, unc, drift


def _aligned(raw, clock):
    """_offset_fn's alignment of a numpy array of raw times (int64, each < 2^62), in numpy: the same arithmetic
    (float64 products, rounded half to even as Python's round)."""
    import numpy as np

    if clock is None:
        return raw
    o0, t0, t1, slope = clock
    if slope is None:
        return raw + o0
    return raw + o0 + np.rint((np.clip(raw, t0, t1) - t0) * slope).astype(np.int64)


aligned = _aligned  # (public: the aggregates' reader aligns its windows so, importers/aggregates.py)


def read_rank_files(files: list[str], table: EventTable, progress: Progress | None = None,
                    limit: int | None = None) -> int:
    """Parse each rank file (with `limit`: its whole lines in its first `limit` bytes) and add its ops to `table`
    in turn: only one file's records are held at a time (a trace's every parsed record at once would take several
    times the trace's table). Returns how many files were readable."""
    total = sum(max(os.path.getsize(f), 1) for f in files)
    done = read = 0
    for path in files:
        rf = _parse_file(path, limit=limit)
        done += max(os.path.getsize(path), 1)
        if rf.meta is None or not isinstance(rf.meta.get("rank"), int):  # (runs.scan read it: it changed since)
            table.warnings.append(unreadable(path))
            continue
        v = rf.meta.get("v", 1)
        if isinstance(v, int) and v > FORMAT_VERSION:
            raise TraceError(f"{path}: written by a newer disttrace (trace format v{v}, this reads "
                             f"v{FORMAT_VERSION}); upgrade disttrace")
        _append_rank(rf, table)
        read += 1
        if progress:
            progress(done / total, "reading")
    return read


def _append_rank(rf: _RankFile, table: EventTable) -> None:
    meta = rf.meta
    rank = meta["rank"]
    host = text_field(meta.get("host"))
    align, offset, unc, drift = _offset_fn(rf)
    clock = _clock(rf)
    gids = {g: table.group_id(name, ranks) for g, (name, ranks) in rf.groups.items()}  # (a careful re-read: the same)
    step_ends = _step_ends(rf)
    cols = None
    if rf.fast:
        cols = _columns(rf, table, rank, host, gids, step_ends, clock)
        if cols is None:  # a value the typed records do not take as they are: the careful way, from the start
            _append_rank(_parse_file(rf.path, careful=True, limit=rf.limit), table)
            return
    table.ranks[rank] = RankInfo(rank=rank, host=host, pid=_ns(meta, "pid") or 0,
                                 world_size=_ns(meta, "world_size") or 0, backend=text_field(meta.get("backend")),
                                 clock_offset_ns=offset, clock_uncertainty_ns=unc, clock_drift_ns=drift,
                                 source=rf.path, left=rf.left)
    if rf.stacks:
        table.stacks[rank] = [dict(s, t=align(s["t"])) for s in rf.stacks]
    if rf.bad:
        table.warnings.append(f"{rf.path}: skipped {rf.bad} malformed record(s) ({rf.first_bad})")
    if rf.torn:
        table.warnings.append(f"{rf.path}: last record torn (rank {rank} died while writing it, or is still "
                              f"writing); ignored")
    if "start" in rf.clock and "error" in rf.clock["start"]:
        table.warnings.append(f"rank {rank}: clock not aligned ({rf.clock['start']['error']})")
    skipped = 0
    if cols is None:
        try:
            cols = _columns(rf, table, rank, host, gids, step_ends, clock)
        except Exception:  # noqa: BLE001 - some record is odd or damaged: event by event, skipping the bad ones
            cols, skipped = _rows(rf, table, rank, host, gids, step_ends, align)
    if rf.ring is not None:
        _ring_steps(rf, cols)
    table.add_rows(cols)
    if skipped:
        table.warnings.append(f"{rf.path}: skipped {skipped} malformed event(s)")
    orphan = len(set(rf.ends) - set(_begin_values(rf, "i")))
    if rf.ring is not None:  # ends and waits whose begin the ring overwrote: its nature, not damage
        info = table.ranks[rank].ring = _ring_info(rf, align, orphan)
        if info["live"]:  # a snapshot of a job that ran on: its copy's moment (a blocked rank's newest record is
            # older), else that record
            table.ranks[rank].live_ns = info["copied_ns"] if info["copied_ns"] != NONE else info["end_ns"]
        orphan = 0
    if rf.read_ns is not None and rf.copied is None and not rf.left and runs_here(meta):
        table.ranks[rank].live_ns = align(rf.read_ns)  # its own file, read while it ran on
    if orphan:
        table.warnings.append(f"{rf.path}: {orphan} end record(s) without a begin")
    # what this rank's file lost, for the analysis to say (and never to take the missing records as findings)
    lost = [f"{n} {what}" for n, what in ((rf.bad, "malformed record(s) skipped"),
                                          (skipped, "malformed event(s) skipped"),
                                          (orphan, "end record(s) without their begin")) if n]
    table.ranks[rank].damage = "; ".join(lost + ["torn last record"] * rf.torn)


def _columns(rf: _RankFile, table: EventTable, rank: int, host: str, gids: dict, step_ends: list,
             clock) -> dict | None:
    """The columns of the rank's ops at once, for a file whose every begin is well-formed: each field taken from
    all the begins by one map() of dict.get (or of an attribute of rank_batches' records), the times aligned in
    numpy (faster than event by event, and faster again from the typed records). Raises on the
    first odd value, before changing anything (the caller goes event by event then, _rows, whose checks these
    mirror); of typed records, returns None instead (the caller reads the file again, the careful way)."""
    if type(rank) is not int or not 0 <= rank < 2 ** 31:
        if rf.fast:
            return None
        raise ValueError("rank")
    if rf.fast:
        cols = rank_batches.columns(rf.begins, rf.ends, rf.waits, rf.late, rank, host, gids, step_ends, clock,
                                    _aligned)
        if cols is None:
            return None
    else:
        # (what some end record holds, looked for once)
        peer_at_end, errors = (any(key in e for e in rf.ends.values()) for key in ("peer", "err"))
        cols = _batch(rf.begins, rf, rank, host, gids, step_ends, clock, peer_at_end, errors)
    if None in cols["gid"]:  # (last: nothing above may raise after the table has a group added)
        unknown = table.group_id("unknown", ())
        cols["gid"] = [unknown if g is None else g for g in cols["gid"]]
    cols["gid"] = array("i", cols["gid"])
    return cols


def _batch(begins: list, rf: _RankFile, rank: int, host: str, gids: dict, step_ends: list, clock,
           peer_at_end: bool, errors: bool) -> dict:
    """_columns of the rank's `begins` ("gid" as a list, None for an unknown group). (Taking them a few hundred
    at a time, while their dicts are in the CPU's caches, gains nothing here: unlike the events reader's, they
    were all parsed before.)"""
    import numpy as np

    ends, waits, late = rf.ends, rf.waits, rf.late
    n = len(begins)

    def get(key, default=None) -> list:
        return list(map(dict.get, begins, repeat(key, n), repeat(default, n)))

    def ints(values: list, typecode: str = "q") -> array:
        if not set(map(type, values)) <= _INT_TYPE:  # (array() would take a bool or an int subclass)
            raise TypeError("not an integer")
        out = array(typecode, values)  # OverflowError past the column's range
        if n and min(out) < -1:
            raise ValueError("negative")
        return out

    def times(records: list | None, key: str) -> array:
        """The times `key` of `records` (None: the begins; a None record: no time) aligned, as a column."""
        have = None if records is None else np.array([r is not None for r in records], bool)
        raw = get(key) if records is None else [r[key] if r is not None else 0 for r in records]
        raw = np.frombuffer(ints(raw), np.int64)
        if n and raw.max() >= 1 << 62:
            raise ValueError("time out of range")
        out = _aligned(raw, clock)
        if n and (out if have is None else out[have]).min(initial=0) < -1:
            raise ValueError("time before the epoch")  # (as _rows checks each: -1 is NONE, the least it takes)
        if have is not None:
            out = np.where(have, out, NONE)
        return array("q", out.tobytes())

    ids = ints(get("i"))
    ops = get("op")
    if not set(ops) <= _OP_SET:
        raise ValueError("op")
    gid = list(map(gids.get, get("g")))
    es = list(map(ends.get, ids))
    ws = list(map(waits.get, ids)) if waits else [None] * n
    start = times(None, "t")
    end = times(es, "t")
    if waits:
        wait_start, wait_end = times(ws, "t0"), times(ws, "t1")
    else:
        wait_start = wait_end = array("q", [NONE]) * n
    peer = get("peer", NONE)
    if peer_at_end:  # (a recv from any source: its peer is known at its end)
        peer = [e["peer"] if p == NONE and e is not None and "peer" in e else p for p, e in zip(peer, es)]
    if step_ends:
        user_step = array("i", np.searchsorted(np.array(step_ends, np.int64), np.array(get("t"), np.int64),
                                               side="right").astype(np.int32).tobytes())
    else:
        user_step = array("i", [NONE]) * n
    apis = get("api")
    return {
        "rank": array("i", [rank]) * n, "group_seq": ints(get("gs", NONE)), "peer": ints(peer, "i"),
        "root": ints(get("root", NONE), "i"), "bytes": ints(get("bytes", 0)), "start_ns": start, "end_ns": end,
        "wait_start_ns": wait_start, "wait_end_ns": wait_end,
        "seq": ints([(e or b).get("seq", NONE) for b, e in zip(begins, es)]), "tag": ints(get("tag", NONE)),
        "id": ids, "user_step": user_step, "pair_seq": ints(get("ps", NONE)),
        "op": ops,
        "api": apis if set(map(type, apis)) == {str} and all(apis) else
        [text_field(a) or op for a, op in zip(apis, ops)],
        "dtype": text_column(get("dtype")),
        "status": [("error" if e.get("st") == "error" else "ok") if e else "unfinished" for e in es],
        "site": text_column(get("site")),
        "host": [host] * n,
        "shape": get("shape"),
        "in_": get("in") if not late else
        [b.get("in") if (lt := late.get(i)) is None or "in" not in lt else lt["in"] for b, i in zip(begins, ids)],
        "out": [(e.get("out") if e else None) if (lt := late.get(i)) is None or "out" not in lt else lt["out"]
                for e, i in zip(es, ids)],
        "error": [text_field(e.get("err")) or None if e else None for e in es] if errors else [None] * n,
        "extra": list(map(_extra, begins, es)) if any(map(_has_extra, begins, es)) else [None] * n,
        "async_op": bytearray(1 if a else 0 for a in get("async")),
        "gid": gid,
    }


_INT_TYPE = {int}
_OP_SET = frozenset(OPS)


def _has_extra(b: dict, e: dict | None) -> bool:
    return any(k in b for k in BEGIN_EXTRA) or (e is not None and ("bound" in e or "dev" in e))


def _extra(b: dict, e: dict | None) -> dict | None:
    """The event's keys that have no column of their own (docs/FORMAT.md), or None."""
    extra = None
    if any(k in b for k in BEGIN_EXTRA):
        extra = {k: b[k] for k in BEGIN_EXTRA if k in b}
    if e and e.get("bound"):
        extra = dict(extra or (), end_is_bound=True)
    if e and type(e.get("dev")) is int and 0 <= e["dev"] < 2 ** 63:  # NCCL's completion hook (CUDA events)
        extra = dict(extra or (), device_ns=e["dev"])
    return extra


def _rows(rf: _RankFile, table: EventTable, rank: int, host: str, gids: dict, step_ends: list, align):
    """(the columns of the rank's ops, how many were skipped): event by event, each checked on its own, a
    malformed one skipped. What _columns does at once for an intact file."""
    ends, waits, late = rf.ends, rf.waits, rf.late
    int_names = ("rank", "gid", "group_seq", "peer", "root", "bytes", "start_ns", "end_ns", "wait_start_ns",
                 "wait_end_ns", "seq", "tag", "id", "user_step", "pair_seq")
    cols = {name: array(getattr(table, name).typecode) for name in int_names}
    cols.update({name: [] for name in ("op", "api", "dtype", "status", "site", "host", "shape", "in_", "out", "error",
                                       "extra")}, async_op=bytearray())
    cols_int = [cols[name] for name in int_names]
    limits = [2 ** 31 if col.typecode == "i" else 2 ** 63 for col in cols_int]  # what each column holds
    op_col, api, dtype, status, site, hosts, shape, in_, out, error, extra_col, async_op = (
        cols[name] for name in ("op", "api", "dtype", "status", "site", "host", "shape", "in_", "out", "error",
                                "extra", "async_op"))
    skipped = 0
    for b in rf.begins:
        try:
            i = b["i"]
            op = b["op"]
            if op not in OPS:
                raise ValueError(op)
            gid = gids.get(b.get("g"))
            if gid is None:
                gid = table.group_id("unknown", ())
            t = _INT(b["t"])
            start = align(t)
            e = ends.get(i)
            w = waits.get(i)
            values = (rank, gid, b.get("gs", NONE), _peer(b, e), b.get("root", NONE), b.get("bytes", 0), start,
                      align(_INT(e["t"])) if e else NONE, align(_INT(w["t0"])) if w else NONE,
                      align(_INT(w["t1"])) if w else NONE, (e or b).get("seq", NONE), b.get("tag", NONE), i,
                      bisect_right(step_ends, t) if step_ends else NONE, b.get("ps", NONE))
            # validate all before appending any, so that columns stay the same length
            for v, limit in zip(values, limits):
                if type(v) is not int or not -2 < v < limit:
                    raise TypeError("not an integer in range")
            texts = (text_field(b.get("api")) or op, text_field(b.get("dtype")), text_field(b.get("site")))
        except Exception:  # noqa: BLE001
            skipped += 1
            continue
        for col, v in zip(cols_int, values):
            col.append(v)
        op_col.append(op)
        api.append(texts[0])
        dtype.append(texts[1])
        status.append(("error" if e.get("st") == "error" else "ok") if e else "unfinished")
        site.append(texts[2])
        hosts.append(host)
        shape.append(b.get("shape"))
        lt = late.get(i)
        in_.append(b.get("in") if lt is None or "in" not in lt else lt["in"])
        out.append((e.get("out") if e else None) if lt is None or "out" not in lt else lt["out"])
        error.append(text_field(e.get("err")) or None if e else None)
        extra_col.append(_extra(b, e))
        async_op.append(1 if b.get("async") else 0)
    return cols, skipped


def _ring_info(rf: _RankFile, align, orphan: int) -> dict:
    """What a black-box rank's ring holds (RankInfo.ring): its ops, the ends and waits whose begin it had
    overwritten (dropped), how often it wrapped, the first step it holds whole (by the job's markers; None: it
    holds none), the time of its oldest and newest record (aligned): an op of this
    rank begun before `start_ns` is outside the window, not missing (analysis/core/window.py)."""
    begins = _begin_values(rf, "t")
    ends = [e.t if rf.fast else e.get("t") for e in rf.ends.values()]
    times = [t for t in begins + ends + [t for t, _ in rf.steps] if type(t) is int]
    waits = set(rf.waits) - set(_begin_values(rf, "i")) - set(rf.ends)
    box = rf.meta.get("black_box") if isinstance(rf.meta.get("black_box"), dict) else {}
    # the first step it holds whole: the one its first marker begins (every one, of a ring that never wrapped; of
    # markers from two sources, numbered from the window's start: _ring_steps)
    first_step = (0 if not rf.ring["wraps"] else None if not rf.step_n else
                  1 if len({src for _, src in rf.steps}) > 1 else min(rf.step_n))
    return {"ops": len(begins), "dropped": orphan + len(waits), "wraps": rf.ring["wraps"], "first_step": first_step,
            "ring_ops": _ns(box, "ring_ops"), "start_ns": align(min(times)) if times else NONE,
            "end_ns": align(max(times)) if times else NONE, "live": _live_snapshot(rf.path),
            "copied_ns": align(rf.copied) if rf.copied is not None else NONE}


def _live_snapshot(path: str) -> bool:
    """Whether the rank file is in a snapshot taken of a job that ran on (format.LIVE_REASONS): its snapshot.json
    says so."""
    try:
        with open(os.path.join(os.path.dirname(path), SNAPSHOT_INFO), "rb") as f:
            info = orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(info, dict) and info.get("reason") in LIVE_REASONS


def _ring_steps(rf: _RankFile, cols: dict) -> None:
    """A ring's ops numbered by the job's steps, not the window's: its first marker's own number says how many
    came before it (of one source: a job that marks each step both ways numbers both)."""
    import numpy as np

    if not rf.step_n or len({src for _, src in rf.steps}) > 1:
        return
    before = min(rf.step_n) - 1
    steps = np.frombuffer(cols["user_step"], np.int32).copy()
    steps[steps != NONE] += before
    cols["user_step"] = array("i", steps.tobytes())


def _step_ends(rf: _RankFile) -> list[int]:
    """The raw times of the rank's marked step ends, sorted: an op's step is how many come before its begin. A
    job that marks one step end both ways (mark_step() and the profiler's step()) marks it once: a marker from
    the other source than the last one kept, with no op begun between the two, is that same end again."""
    marks = sorted(rf.steps)
    if len({src for _, src in marks}) < 2:
        return [t for t, _ in marks]
    begins = sorted(_begin_values(rf, "t"))
    ends: list[int] = []
    last_src = ""
    for t, src in marks:
        if ends and src != last_src and bisect_right(begins, t) == bisect_right(begins, ends[-1]):
            continue
        ends.append(t)
        last_src = src
    return ends


def _begin_values(rf: _RankFile, key: str) -> list[int]:
    """The begins' integer values of `key` ("i", "t"), where they are integers."""
    if rf.fast:
        return list(map(attrgetter(key), rf.begins))
    return [v for b in rf.begins if type(v := b.get(key)) is int]


def _peer(b: dict, e: dict | None) -> int:
    p = b.get("peer", NONE)
    if p == NONE and e is not None and "peer" in e:
        return e["peer"]
    return p


def written_size(path: str, tail: int = 16 << 20) -> int:
    """Bytes a rank has written so far: the recorder grows its file in zeroed chunks, so the file size says
    little; the first zero byte of the last chunk marks the end of what was written."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            start = max(0, size - tail)
            f.seek(start)
            data = f.read()
    except OSError:
        return 0
    zero = data.find(b"\0")
    return size if zero < 0 else start + zero


def run_info(path: str) -> dict | None:
    """The launcher's run.json of a trace dir (command, host, exit code), if there is one."""
    try:
        with open(os.path.join(path, "run.json"), "rb") as f:
            info = orjson.loads(f.read())
        return info if isinstance(info, dict) else None
    except (OSError, orjson.JSONDecodeError):
        return None


__all__ = ["find_rank_files", "is_trace_dir", "load_trace_dirs", "no_readable", "read_rank_files", "run_files",
           "run_info", "trace_sources", "written_size", "FORMAT_VERSION"]
