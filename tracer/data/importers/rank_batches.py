"""A rank file's begin, end and wait records decoded straight into typed records by msgspec, and the rank's columns
made from them: no dict per record, the tensor summaries kept as the JSON text they are in the file, the types
checked in C. It mirrors rank_files.py's `_batch` (the column path over orjson's dicts) value for value, as
event_batches.py mirrors the events reader, and takes the common case only: a record of another type than the
format's, an unknown key, a torn file, or a value out of its column's range gives None, and the caller reads the
file the careful way (reader._parse_file's orjson path, then `_columns` or event by event).

Imports neither torch nor textual.
"""

from __future__ import annotations

from array import array
from operator import attrgetter
from typing import Any, Optional, Union

import msgspec
import orjson

from ...format import BEGIN, BEGIN_EXTRA, END, WAIT, record_prefix
from ..table.event_table import NONE, OPS, text_field
from ..table.rows import text_values, json_texts

_NO = msgspec.Raw(b"")
UNSET = msgspec.UNSET
_PREFIX = {record_prefix(kind): n for n, kind in enumerate((BEGIN, END, WAIT))}  # (written compact, "k" first)
_PREFIX_LEN = len(record_prefix(BEGIN))  # (every kind's: one letter)


class _Begin(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A "b" record: format.BEGIN_FIELDS (in_: "in", async_: "async"), typed as rank_files._batch requires; what
    it keeps as it is, raw."""

    k: str
    i: int
    op: str
    t: int
    api: Optional[str] = None
    g: Optional[int] = None
    gs: int = NONE
    ps: int = NONE
    root: int = NONE
    peer: int = NONE
    tag: int = NONE
    bytes: int = 0
    dtype: Optional[str] = None
    shape: msgspec.Raw = _NO  # (decoded by orjson, as the careful path does: past 2^64 it makes a float)
    async_: Any = msgspec.field(default=None, name="async")
    site: Optional[str] = None
    origin: msgspec.Raw = _NO
    th: msgspec.Raw = _NO
    in_: msgspec.Raw = msgspec.field(default=_NO, name="in")


class _End(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """An "e" record: format.END_FIELDS."""

    k: str
    i: int
    t: int
    seq: int = NONE
    st: Any = None
    err: msgspec.Raw = _NO
    peer: Union[int, msgspec.UnsetType] = msgspec.UNSET  # (a recv from any source: its peer, at its end)
    out: msgspec.Raw = _NO
    bound: Any = None
    dev: Any = None


class _Wait(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A "w" record: format.WAIT_FIELDS."""

    k: str
    i: int
    t0: int
    t1: int


_DECODE = (msgspec.json.Decoder(list[_Begin]).decode, msgspec.json.Decoder(list[_End]).decode,
           msgspec.json.Decoder(list[_Wait]).decode)
_OPS = frozenset(OPS)


def split(lines: list) -> tuple[list, list, list, list]:
    """(begin lines, end lines, wait lines, the other lines) of a rank file's lines."""
    out: tuple[list, list, list, list] = ([], [], [], [])
    get = _PREFIX.get
    for line in lines:
        out[get(line[:_PREFIX_LEN], 3)].append(line)
    return out


def decode(begins: list, ends: list, waits: list) -> tuple[list, dict, dict] | None:
    """(begins, ends by id, waits by id) of split's lines (ends and waits: the last of an id wins, as in the
    careful path), or None when one is not a record of the format's types and keys."""
    try:
        out = [dec(b"[" + b",".join(lines) + b"]") for dec, lines in zip(_DECODE, (begins, ends, waits))]
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):  # (bad UTF-8; nested deep)
        return None
    for recs, kind in zip(out, ("b", "e", "w")):
        if recs and {r.k for r in recs} != {kind}:  # a second "k" later in the object: the last one counts
            return None
    b, e, w = out
    return b, {r.i: r for r in e}, {r.i: r for r in w}


def columns(begins: list, ends: dict, waits: dict, late: dict, rank: int, host: str, gids: dict, step_ends: list,
            clock, aligned) -> dict | None:
    """reader._batch's columns of decode's records ("gid" as a list, None for an unknown group); None on a value
    that _batch would refuse (the caller reads the file the careful way then). `late`: the CUDA summaries written
    after the fact (id -> {"in"/"out": object}); aligned(raw, clock): reader._aligned."""
    import numpy as np

    n = len(begins)

    def get(key) -> list:
        return list(map(attrgetter(key), begins))

    def ints(values: list, typecode: str = "q") -> array:
        out = array(typecode, values)  # OverflowError past the column's range
        if n and min(out) < -1:
            raise ValueError("negative")
        return out

    def times(raw: list, have=None) -> array:
        raw = np.frombuffer(ints(raw), np.int64)
        if n and raw.max() >= 1 << 62:
            raise ValueError("time out of range")
        out = aligned(raw, clock)
        if n and (out if have is None else out[have]).min(initial=0) < -1:
            raise ValueError("time before the epoch")
        if have is not None:
            out = np.where(have, out, NONE)
        return array("q", out.tobytes())

    ops = get("op")
    if not set(ops) <= _OPS:
        return None
    try:
        ids = ints(get("i"))
        es = list(map(ends.get, ids))
        has_end = np.array([e is not None for e in es], bool)
        raw_t = get("t")
        start = times(raw_t)
        end = times([e.t if e is not None else 0 for e in es], has_end)
        if waits:
            ws = list(map(waits.get, ids))
            has_wait = np.array([w is not None for w in ws], bool)
            wait_start = times([w.t0 if w is not None else 0 for w in ws], has_wait)
            wait_end = times([w.t1 if w is not None else 0 for w in ws], has_wait)
        else:
            wait_start = wait_end = array("q", [NONE]) * n
        peer = get("peer")
        if any(e.peer is not UNSET for e in ends.values()):
            peer = [e.peer if p == NONE and e is not None and e.peer is not UNSET else p for p, e in zip(peer, es)]
        cols = {"rank": array("i", [rank]) * n, "group_seq": ints(get("gs")), "peer": ints(peer, "i"),
                "root": ints(get("root"), "i"), "bytes": ints(get("bytes")), "start_ns": start, "end_ns": end,
                "wait_start_ns": wait_start, "wait_end_ns": wait_end,
                "seq": ints([e.seq if e is not None else NONE for e in es]), "tag": ints(get("tag")), "id": ids,
                "pair_seq": ints(get("ps"))}
        shapes = [s if s else b"null" for s in map(bytes, get("shape"))]
        shape = orjson.loads(b"[" + b",".join(shapes) + b"]") if n else []
    except (OverflowError, ValueError, TypeError, orjson.JSONDecodeError):
        return None
    if step_ends:  # (each op's step by its raw begin time, as the markers' times are raw)
        cols["user_step"] = array("i", np.searchsorted(np.array(step_ends, np.int64), np.array(raw_t, np.int64),
                                                       side="right").astype(np.int32).tobytes())
    else:
        cols["user_step"] = array("i", [NONE]) * n
    ins = get("in_")
    outs = [e.out if e is not None else _NO for e in es]
    if late:
        for k, i in enumerate(ids):
            lt = late.get(i)
            if lt is not None:
                if "in" in lt:
                    ins[k] = msgspec.Raw(orjson.dumps(lt["in"]))
                if "out" in lt:
                    outs[k] = msgspec.Raw(orjson.dumps(lt["out"]))
    ins, outs = json_texts(ins), json_texts(outs)
    if ins is None or outs is None:
        return None
    apis = get("api")
    try:
        error = [_raw_text(e.err) if e is not None else None for e in es]
        extra = [_extra(b, e) for b, e in zip(begins, es)] if _any_extra(begins, ends) else [None] * n
    except orjson.JSONDecodeError:
        return None
    cols.update({
        "op": ops,
        "api": apis if all(apis) else [a or op for a, op in zip(apis, ops)],
        "dtype": text_values(get("dtype")),
        "status": [("error" if e.st == "error" else "ok") if e is not None else "unfinished" for e in es],
        "site": text_values(get("site")),
        "host": [host] * n,
        "shape": shape,
        "in_": ins, "out": outs,
        "error": error,
        "extra": extra,
        "async_op": bytearray(1 if a else 0 for a in get("async_")),
        "gid": list(map(gids.get, get("g"))),
    })
    return cols


def _raw_text(raw) -> str | None:
    """reader's `text_field(e.get("err")) or None` of a raw value (b"": none)."""
    return text_field(orjson.loads(bytes(raw))) or None if raw else None


def _any_extra(begins: list, ends: dict) -> bool:
    return (any(b.origin or b.th for b in begins)
            or any(e.bound is not None or e.dev is not None for e in ends.values()))


def _extra(b: _Begin, e: _End | None) -> dict | None:
    """reader._extra of the records: the event's keys that have no column of their own, or None."""
    extra = None
    if b.origin or b.th:
        extra = {k: orjson.loads(bytes(raw)) for k in BEGIN_EXTRA if (raw := getattr(b, k))}
    if e is not None and e.bound:
        extra = dict(extra or (), end_is_bound=True)
    if e is not None and type(e.dev) is int and 0 <= e.dev < 2 ** 63:
        extra = dict(extra or (), device_ns=e.dev)
    return extra


__all__ = ["columns", "decode", "split"]
