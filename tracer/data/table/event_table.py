"""The normalized event table: the contract between the importers and everything that reads traces.

One row per torch.distributed operation on one rank, columns stored as arrays (not a dict per event) so
that a million-event trace fits in a few bytes a field and analyses can loop over plain ints: integers in typed
arrays, texts and shapes dictionary-encoded, tensor summaries as JSON text, fields most events lack kept sparse
(columns.py). This module imports neither torch nor textual.

`EventTable.row(i)` gives one event as the normalized dict documented in docs/FORMAT.md (the fields of
format.EVENT_FIELDS); importers/events_files.py converts to and from the JSON Lines form that `disttrace events`
prints.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Iterable

from ...format import EVENT_FIELDS, EVENTS_VERSION
from .columns import CodedColumn, JsonColumn, SparseColumn, json_key, permuted, typecode, writable


#: The canonical op names; every API variant maps onto one of these.
OPS = (
    "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
    "reduce_scatter", "all_to_all", "barrier", "send", "recv",
)
COLLECTIVE_OPS = frozenset(OPS) - {"send", "recv"}
P2P_OPS = frozenset({"send", "recv"})

NONE = -1  # stands for null in the integer columns (ranks, seqs and times are never negative)

INT_COLUMNS = ("rank", "gid", "group_seq", "peer", "root", "bytes", "start_ns", "end_ns",
                "wait_start_ns", "wait_end_ns", "seq", "tag", "id", "user_step", "pair_seq")
STR_COLUMNS = ("op", "api", "dtype", "status", "site", "host")
OBJ_COLUMNS = ("shape", "in_", "out", "error", "extra")
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
    # a black-box rank's ring (data/importers/ring.py): what its window holds (ops, dropped ends whose begin was
    # overwritten, wraps, ring_ops asked for, start_ns and end_ns of its oldest and newest record); None: not a ring
    ring: dict | None = None
    # where its records end when they were read while it ran on (aligned ns; NONE: they end where it stopped): a
    # live snapshot's copy, or its own file read while its process ran (data/importers/rank_files.py). The
    # analysis' window ends at the earliest (analysis/core/window.py's live_end)
    live_ns: int = NONE


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
    # a P2P op's number among its rank's earlier ones of the same direction, peer and tag (the pair's sequence
    # number, as group_seq is the group's): what matches a black box's sends with recvs after its ring wrapped.
    # NONE: a collective, or a source that has none (Flight Recorder, Kineto, traces before it was recorded)
    pair_seq: array = field(default_factory=lambda: array("q"))
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
    # what an importer could and could not know (not damage): the report's notes (data/importers/kineto.py)
    notes: list = field(default_factory=list)
    # rank -> the hang watchdog's "stacks" records (docs/FORMAT.md), in file order, "t" aligned like the events
    stacks: dict = field(default_factory=dict)
    # the runs (process-group worlds, importers/runs.py) of the trace dirs read, and the number of the one in the table
    # (0: not read from rank files)
    runs: list = field(default_factory=list)
    run: int = 0
    # the trace store this table was opened from or written to (data/store/'s StoreOrigin), None: none; where
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
        for name in INT_COLUMNS:  # (a column mapped from the store is read-only: copied before it grows)
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
                _opt_int(ev.get("id")), _opt_int(ev.get("step")), _opt_int(ev.get("pair_seq")))
        if ints[-2] >= RANK_LIMIT:
            raise ValueError("step out of range")
        status = ev.get("status") or ("ok" if ev.get("end_ns") is not None else "unfinished")
        texts = (text_field(ev.get("api")) or op, text_field(ev.get("dtype")), text_field(status),
                 text_field(ev.get("site")), text_field(ev.get("host")))
        group = text_field(ev.get("group")) or default_group_name(ranks)
        extra = {k: v for k, v in ev.items() if k not in KNOWN_KEYS}
        # everything is checked: from here on nothing raises, so all columns grow together
        row = dict(zip(("group_seq", "peer", "root", "bytes", "end_ns", "wait_start_ns", "wait_end_ns", "seq", "tag",
                        "id", "user_step", "pair_seq"), ints))
        row.update(zip(("api", "dtype", "status", "site", "host"), texts))
        row.update(rank=rank, gid=self.group_id(group, ranks), start_ns=start, op=op, shape=ev.get("shape"),
                   in_=ev.get("in"), out=ev.get("out"), error=ev.get("error"), extra=extra or None,
                   async_op=1 if ev.get("async_op") else 0)
        self.add_rows({name: (v,) for name, v in row.items()})

    def sort(self) -> None:
        """Sort rows by (start_ns, rank, id) in place. In numpy: a key tuple per row would cost an object and a
        Python call each (gigabytes at 10M rows); rank files are concatenated, so every trace dir sorts."""
        import numpy as np

        n = len(self)
        if n < 2:
            return
        start, rank, ident = (np.frombuffer(c, dtype=typecode(c)) for c in (self.start_ns, self.rank, self.id))
        order = np.lexsort((ident, rank, start))
        if (order[1:] > order[:-1]).all():
            return  # already in order (what `disttrace events` writes): nothing to do
        for name in INT_COLUMNS:
            setattr(self, name, permuted(getattr(self, name), order))
        for name in STR_COLUMNS + OBJ_COLUMNS:
            setattr(self, name, getattr(self, name).take(order))
        self.async_op = bytearray(np.frombuffer(self.async_op, dtype=np.uint8)[order].tobytes())

    def keep_first(self, n: int) -> None:
        """Keep the first n rows (of a sorted table: the events that start before a time)."""
        for name in INT_COLUMNS:
            col = writable(getattr(self, name))
            del col[n:]
            setattr(self, name, col)
        for name in STR_COLUMNS + OBJ_COLUMNS:
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
        if self.pair_seq[i] != NONE:
            ev["pair_seq"] = self.pair_seq[i]
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
ROW_COLUMNS = INT_COLUMNS + STR_COLUMNS + OBJ_COLUMNS + ("async_op",)

KNOWN_KEYS = frozenset(EVENT_FIELDS)  # (the others are kept in `extra`)


def default_group_name(ranks) -> str:
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
