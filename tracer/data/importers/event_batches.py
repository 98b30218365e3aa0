"""A batch of an events file's lines decoded straight into the table's columns, by msgspec against the events
format's schema: no dict per event, the tensor summaries kept as the JSON text they are in the file (never
parsed), the types checked in C: faster than orjson's dicts made into columns (table/rows.py `_columns`, which it
mirrors value for value), which made the first read of a large trace several times slower than merely parsing its
JSON (docs/PERFORMANCE.md).

It takes the common case only: a batch with a malformed line, an unknown key (kept in `extra` by the careful
path), or a value of another type than the format's (a string for a number, `true` for an integer) returns None,
and the caller reads that batch the careful way, event by event where it must (table/rows.extend).

Imports neither torch nor textual.
"""

from __future__ import annotations

from array import array
from operator import attrgetter
from typing import Any, Optional

import msgspec
import orjson

from ..table.rows import text_values, json_texts


class _Event(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One line of the events format (docs/FORMAT.md): its every key, typed as the careful path requires; the
    ones that path only tests for truth or keeps as they are: Any."""

    rank: int
    op: str
    start_ns: int
    v: Any = None
    run: Any = None
    host: Optional[str] = None
    api: Optional[str] = None
    group: Optional[str] = None
    group_ranks: msgspec.Raw = msgspec.Raw(b"")  # (as text: a group is looked up by it, decoded once)
    group_seq: Optional[int] = None
    seq: Optional[int] = None
    peer: Optional[int] = None
    root: Optional[int] = None
    tag: Optional[int] = None
    bytes: Optional[int] = None
    dtype: Optional[str] = None
    shape: Any = None
    async_op: Any = None
    end_ns: Optional[int] = None
    wait_start_ns: Optional[int] = None
    wait_end_ns: Optional[int] = None
    status: Optional[str] = None
    error: Any = None
    in_: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="in")
    out: msgspec.Raw = msgspec.Raw(b"")
    site: Optional[str] = None
    id: Optional[int] = None
    step: Optional[int] = None
    pair_seq: Optional[int] = None


_decode = msgspec.json.Decoder(list[_Event]).decode
_get = {name: attrgetter(name) for name in _Event.__struct_fields__}


def decode(lines: list) -> list | None:
    """The events of `lines` (each one JSON object, with or without its newline; no blank line), or None when
    one is not an event of the format's types and keys."""
    try:
        return _decode(b"[" + b",".join(lines) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):  # (bad UTF-8; nested deep)
        return None


def versions(evs: list) -> list:
    return list(map(_get["v"], evs))


def runs(evs: list) -> list:
    return list(map(_get["run"], evs))


def columns(table, evs: list, ops: frozenset, group_name) -> dict | None:
    """EventTable.add_rows' columns of `evs` (decode's), as events._columns makes them; None on a value out of
    its column's range (the careful path then says which). `group_name(ranks)`: a group's name when it has none."""
    n = len(evs)

    def get(key) -> list:
        return list(map(_get[key], evs))

    def ints(key, default=-1, typecode="q"):
        values = get(key)
        if None in values:
            if values.count(None) == n:  # (most events lack most optional keys)
                return array(typecode, (default,)) * n
            values = list(map({None: default}.get, values, values))
        out = array(typecode, values)  # OverflowError past the column's range
        if min(out) < -1:
            raise ValueError(key)
        return out

    try:
        op = get("op")
        if not set(op) <= ops:
            return None
        rank, start = array("i", get("rank")), array("q", get("start_ns"))
        if min(rank) < 0 or min(start) < 0:
            return None
        gid = _groups(table, get("group"), get("group_ranks"), group_name)
        if gid is None:
            return None
        end = ints("end_ns")
        cols = {
            "rank": rank, "gid": gid, "group_seq": ints("group_seq"), "peer": ints("peer", typecode="i"),
            "root": ints("root", typecode="i"), "bytes": ints("bytes", 0), "start_ns": start, "end_ns": end,
            "wait_start_ns": ints("wait_start_ns"), "wait_end_ns": ints("wait_end_ns"), "seq": ints("seq"),
            "tag": ints("tag"), "id": ints("id"), "user_step": ints("step", typecode="i"),
            "pair_seq": ints("pair_seq"),
        }
    except (OverflowError, ValueError, TypeError):
        return None
    ins, outs = json_texts(get("in_")), json_texts(get("out"))
    if ins is None or outs is None:
        return None
    apis = get("api")
    statuses = get("status")
    if not all(statuses):  # no status: ok if it ended
        statuses = [st if st else "ok" if e != -1 else "unfinished" for st, e in zip(statuses, end)]
    cols.update({
        "op": op,
        "api": apis if all(apis) else [a or o for a, o in zip(apis, op)],
        "dtype": text_values(get("dtype")), "status": statuses, "site": text_values(get("site")), "host": text_values(get("host")),
        "shape": get("shape"),
        "in_": ins, "out": outs,
        "error": get("error"),
        "extra": [None] * n,
        "async_op": bytearray(1 if a else 0 for a in get("async_op")),
    })
    return cols


def _groups(table, names: list, rankss: list, group_name) -> array | None:
    """The group index of each event, by its name and its ranks' JSON text: a group is decoded once. None: some
    event's ranks are not a list of integers."""
    cache: dict = table.__dict__.setdefault("_group_texts", {})
    keys = list(zip(names, map(bytes, rankss)))
    gids = list(map(cache.get, keys))
    if None in gids:
        for k, (name, text) in enumerate(keys):
            if gids[k] is None:
                gids[k] = cache.get((name, text))
                if gids[k] is None:
                    ranks = orjson.loads(text) if text not in (b"", b"null") else []
                    if type(ranks) is not list or not all(type(r) is int for r in ranks):
                        return None
                    gids[k] = cache[name, text] = table.group_id(name or group_name(ranks), ranks)
    return array("i", gids)


__all__ = ["columns", "decode", "runs", "versions"]
