"""Runs: the process-group worlds that a trace dir holds.

`disttrace run` around a command that starts several jobs (a test suite whose tests spawn fresh ranks, a sweep, a
script that calls init_process_group twice, torchrun restarting a failed attempt) leaves the rank files of each in
one dir. A run is one world: the files of its ranks, one per rank. Files belong to the same run when they share
what the recorder wrote of the world's identity in its meta record (torchrun's run id and restart attempt, the
store's address, the world size, the process's init number: format.py) and were started together: sorted by their
start, a rank met a second time begins the next run. Traces recorded before those keys existed are told apart by
the second rule alone. The ranks of one run on several nodes (several trace dirs) are one run.

Finding the runs reads only each file's first line, its meta record; the reader then parses only the run it was
asked for. How each file ended (its ops, whether the rank left alive, its last record's time) is read on demand,
without parsing its events, by `disttrace runs`.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, NamedTuple

import orjson

from ...errors import TraceError
from ...format import BEGIN, CLOCK, LEFT, META, SNAPSHOTS_DIR, is_rank_file, kind_marker, says_left
from .ring import has_ring, read_ring, ring_path

_BEGIN, _LEFT, _CLOCK = kind_marker(BEGIN), kind_marker(LEFT), kind_marker(CLOCK)


class Ending(NamedTuple):
    """How a rank file ended."""
    ops: int          # its begin records
    left: bool        # the rank said it left alive (destroy_process_group, a clean exit)
    torn: bool        # its last record is cut: the rank died while writing it
    end_wall_ns: int  # its last record's time, on its wall clock


@dataclass
class RankFile:
    """What a rank file says about its run: its meta record, and how it ended (read on first use, without parsing
    its events: only `disttrace runs` needs it)."""
    path: str
    meta: dict
    ending: Ending | None = None

    def ended(self) -> Ending:
        if self.ending is None:
            data = written(self.path)
            torn = not data.endswith(b"\n")
            if has_ring(self.path):  # a black-box rank: its ops are in its ring, after its rank file's records
                data = data.rstrip(b"\n") + b"\n" + b"\n".join(read_ring(ring_path(self.path))) + b"\n"
            self.ending = Ending(data.count(_BEGIN), _left_alive(data), torn, _end_wall(data, self.meta))
        return self.ending

    @property
    def rank(self) -> int:
        return self.meta["rank"]

    @property
    def start_wall_ns(self) -> int:
        return _int(self.meta.get("wall_ns"))

    def key(self) -> tuple:
        m = self.meta
        return (_opaque(m.get("run_id")), _int(m.get("restart")), _opaque(m.get("master")),
                _int(m.get("world_size")), _opaque(m.get("init")))


@dataclass
class Run:
    """One process-group world; `number` counts from 1 in the order the runs started."""
    number: int
    files: list = field(default_factory=list)  # RankFile, by rank

    @property
    def ranks(self) -> list[int]:
        return [f.rank for f in self.files]

    @property
    def world_size(self) -> int:
        return max((_int(f.meta.get("world_size")) for f in self.files), default=0)

    @property
    def attempt(self) -> int:
        """torchrun's restart count: 0 for the first attempt."""
        return max((_int(f.meta.get("restart")) for f in self.files), default=0)

    @property
    def start_wall_ns(self) -> int:
        return min(f.start_wall_ns for f in self.files)

    @property
    def end_wall_ns(self) -> int:
        return max(f.ended().end_wall_ns for f in self.files)

    @property
    def ops(self) -> int:
        return sum(f.ended().ops for f in self.files)

    @property
    def hosts(self) -> list[str]:
        return sorted({str(f.meta.get("host", "")) for f in self.files})

    @property
    def argv(self) -> list:
        argv = self.files[0].meta.get("argv")
        return [str(a) for a in argv] if isinstance(argv, list) else []

    @cached_property
    def running(self) -> list[int]:
        """Ranks that have not left and whose process runs on this host (runs_here), looked at once: the job goes
        on."""
        return [f.rank for f in self.files if not f.ended().left and runs_here(f.meta)]

    @property
    def died(self) -> list[int]:
        """Ranks whose file stops without their saying they left, and that do not run on: they crashed or were
        killed."""
        running = set(self.running)
        return [f.rank for f in self.files if (not f.ended().left or f.ended().torn) and f.rank not in running]

    @property
    def missing(self) -> list[int]:
        """Ranks of the world with no file in the trace (not traced, or their node's dir not given)."""
        return sorted(set(range(self.world_size)) - set(self.ranks))

    @property
    def ok(self) -> bool:
        return not self.died and not self.missing

    def outcome(self) -> str:
        parts = []
        if self.running:
            parts.append(f"rank{'s' if len(self.running) > 1 else ''} {_list(self.running)} running")
        if self.died:
            parts.append(f"rank{'s' if len(self.died) > 1 else ''} {_list(self.died)} died")
        if self.missing:
            parts.append(f"rank{'s' if len(self.missing) > 1 else ''} {_list(self.missing)} not in the trace")
        return "; ".join(parts) or "ok"

    def to_json(self) -> dict:
        return {"run": self.number, "attempt": self.attempt, "start_wall_ns": self.start_wall_ns,
                "duration_ns": max(self.end_wall_ns - self.start_wall_ns, 0), "world_size": self.world_size,
                "ranks": self.ranks, "hosts": self.hosts, "ops": self.ops, "ok": self.ok, "died": self.died,
                "running": self.running, "missing": self.missing, "argv": self.argv,
                "files": [f.path for f in self.files]}


def written(path: str, limit: int | None = None) -> bytes:
    """The bytes a rank file holds: what its recorder wrote (one that died leaves its preallocated tail zeroed);
    with `limit`, its whole lines among the first `limit` bytes (a trace's head, data/store/head.py)."""
    try:
        with open(path, "rb") as f:
            data = f.read() if limit is None else f.read(limit)
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}") from None
    if limit is not None and len(data) == limit:
        data = data[:data.rfind(b"\n") + 1]
    return data.rstrip(b"\0")


def unreadable(path: str) -> str:
    """What is said of a rank file without a readable meta record (scan gives None): it is skipped."""
    return f"{path}: no metadata record; file skipped (not a disttrace rank file?)"


def scan(path: str) -> RankFile | None:
    """The run facts of one rank file from its first line; None when it has no readable meta record (the reader
    says so)."""
    try:
        with open(path, "rb") as f:
            first = f.readline()
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        meta = orjson.loads(first)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(meta, dict) or meta.get("k") != META or type(meta.get("rank")) is not int:
        return None
    return RankFile(path, meta)


def runs_here(meta: dict) -> bool:
    """Whether the rank's process runs now, on this host: the meta's host is this one and its pid a live process
    (not a zombie) that began before the meta record was written, not a later one given the same number. A rank of
    another host: False (this host cannot tell)."""
    pid = _int(meta.get("pid"))
    if pid <= 0 or meta.get("host") != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)  # (PermissionError: another user's process now holds that number, not the rank)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True  # (no /proc: the pid's process exists, which is all this host can say)
    fields = stat[stat.rfind(b")") + 2:].split()  # state is the 3rd field, the start time (ticks since boot) the 22nd
    if fields[:1] in ([b"Z"], [b"X"]):
        return False
    try:
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return True
    mono = _int(meta.get("mono_ns"))
    return mono <= 0 or started_s <= mono / 1e9 + 1.0


def _left_alive(data: bytes) -> bool:
    """Whether a record says the rank left alive (format.says_left): the "left" record, else an old trace's
    clock "end" record (the few clock records are parsed; nothing else is)."""
    if _LEFT in data:
        return True
    at = data.find(_CLOCK)
    while at >= 0:
        start, end = data.rfind(b"\n", 0, at) + 1, data.find(b"\n", at)
        end = len(data) if end < 0 else end
        try:
            rec = orjson.loads(data[start:end])
            if isinstance(rec, dict) and says_left(rec):
                return True
        except orjson.JSONDecodeError:
            pass
        at = data.find(_CLOCK, end)
    return False


def _end_wall(data: bytes, meta: dict) -> int:
    """The wall time of the file's last timed record: its monotonic time moved onto the meta's wall clock."""
    mono0, wall0 = _int(meta.get("mono_ns")), _int(meta.get("wall_ns"))
    end = len(data)
    for _ in range(64):  # the last few records; a torn one, or one without a time, is passed over
        start = data.rfind(b"\n", 0, end - 1) + 1
        try:
            rec = orjson.loads(data[start:end])
            t = rec.get("t", rec.get("mono_ns")) if isinstance(rec, dict) else None
            if type(t) is int:
                return wall0 + (t - mono0)
        except orjson.JSONDecodeError:
            pass
        if start == 0:
            break
        end = start - 1
    return wall0


def group(files: list[RankFile]) -> list[Run]:
    """The runs these rank files make up, numbered in the order they started."""
    by_key: dict[tuple, list[RankFile]] = {}
    for f in files:
        by_key.setdefault(f.key(), []).append(f)
    runs: list[list[RankFile]] = []
    for same in by_key.values():
        current: dict[int, RankFile] = {}
        for f in sorted(same, key=lambda f: (f.start_wall_ns, f.rank, f.path)):
            if f.rank in current:  # this rank again: the world before ended, this is the next one
                runs.append(list(current.values()))
                current = {}
            current[f.rank] = f
        runs.append(list(current.values()))
    runs.sort(key=lambda fs: (min(f.start_wall_ns for f in fs), min(f.path for f in fs)))
    return [Run(n, sorted(fs, key=lambda f: f.rank)) for n, fs in enumerate(runs, 1)]


def pick(numbers: list[int], which: int | None, warnings: list[str], others: Callable[[list[int]], str],
         missing: Callable[[list[int]], str]) -> int:
    """The default-run rule, one for every kind of trace (a trace dir's runs, an events file's): the run asked for
    (its number), or the only one, or the last, with the note `others(numbers)` that says there are others;
    TraceError(missing(numbers)) where the run asked for is not there."""
    if which is None:
        if len(numbers) > 1:
            warnings.append(others(numbers))
        return numbers[-1]
    if which not in numbers:
        raise TraceError(missing(numbers))
    return which


def pick_run(runs: list[Run], which: int | None, warnings: list[str], trace: str = "TRACE") -> Run:
    """The run of a trace dir to read, by `pick`."""
    number = pick([r.number for r in runs], which, warnings,
                  lambda ns: f"this trace holds {len(ns)} runs (process-group worlds, e.g. restarts or successive "
                             f"jobs); showing the last, run {ns[-1]}: list them with `disttrace runs "
                             f"{trace}`, pick one with --run N",
                  lambda ns: f"no run {which} in this trace: it holds run{'s' if len(ns) > 1 else ''} "
                             f"{_list(ns)} (see `disttrace runs {trace}`)")
    return next(r for r in runs if r.number == number)


def _int(v) -> int:
    return v if type(v) is int and abs(v) < 2 ** 62 else 0


def _opaque(v):
    """A meta value compared only for equality, made hashable: a damaged file may hold a list or a dict there
    (any nesting deep), which all compare equal."""
    return v if v is None or isinstance(v, (str, int, float)) else type(v).__name__


def _list(xs: list[int]) -> str:
    return ", ".join(map(str, xs))


def find_snapshots(path: str) -> list[dict]:
    """A black-box trace dir's snapshots (SNAPSHOTS_DIR/NNNNNN-REASON/, each a trace dir of its own), oldest first:
    {"path", "seq", "reason", "wall_ns", "by_rank"} from its snapshot.json (its name's where that is unreadable)."""
    folder = os.path.join(path, SNAPSHOTS_DIR)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    out = []
    for name in names:
        snap = os.path.join(folder, name)
        try:
            if not any(map(is_rank_file, os.listdir(snap))):
                continue
        except OSError:
            continue
        seq, _, reason = name.partition("-")
        info = {"path": snap, "seq": int(seq) if seq.isdigit() else None, "reason": reason, "wall_ns": None,
                "by_rank": None}
        try:
            with open(os.path.join(snap, "snapshot.json"), "rb") as f:
                said = orjson.loads(f.read())
            if isinstance(said, dict):
                info.update({k: said[k] for k in ("seq", "reason", "wall_ns", "by_rank") if k in said})
        except (OSError, orjson.JSONDecodeError):
            pass
        out.append(info)
    return out


def snapshots_note(paths: list[str]) -> str:
    """The report's note on the snapshots of these trace dirs ("" for none)."""
    snaps = [s for p in paths for s in find_snapshots(p)]
    if not snaps:
        return ""
    listed = ", ".join(f"{os.path.basename(s['path'])}" for s in snaps[-8:])
    return (f"{len(snaps)} snapshot(s) of the black box beside this trace ({listed}; the latest last): each is a "
            f"trace of its own, `disttrace report {snaps[-1]['path']}`")


def find_runs(files: list[str]) -> tuple[list[Run], list[str]]:
    """Scan rank files and group them: (runs, the files without a readable meta record)."""
    scanned, unreadable = [], []
    for path in files:
        rf = scan(path)
        (scanned.append(rf) if rf is not None else unreadable.append(path))
    return group(scanned), unreadable


__all__ = ["Ending", "RankFile", "Run", "find_runs", "find_snapshots", "group", "pick", "pick_run", "scan",
           "snapshots_note", "unreadable", "written"]
