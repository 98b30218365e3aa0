"""Normalized event dicts into the table's columns, a batch at a time (the events-file reader, the careful rank-file
reader and Kineto's importer append through here)."""

from __future__ import annotations

from array import array
from itertools import repeat

from .columns import JsonTexts
from .event_table import KNOWN_KEYS, NONE, OPS, EventTable, default_group_name, text_field


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
        g = table.group_id(text_field(name) or default_group_name(ranks), ranks)
        if key is not None:
            cache[key] = (ranks, g)
        gid.append(g)
    end = ints("end_ns")
    statuses = get("status")
    if not all(statuses):  # no status: ok if it ended
        statuses = [st if st else "ok" if e != NONE else "unfinished" for st, e in zip(statuses, end)]
    known, n_known = KNOWN_KEYS, len(KNOWN_KEYS)
    apis = get("api")
    return {
        "rank": rank, "gid": gid, "group_seq": ints("group_seq"), "peer": ints("peer", typecode="i"),
        "root": ints("root", typecode="i"),
        "bytes": ints("bytes", 0), "start_ns": start, "end_ns": end, "wait_start_ns": ints("wait_start_ns"),
        "wait_end_ns": ints("wait_end_ns"), "seq": ints("seq"), "tag": ints("tag"), "id": ints("id"),
        "user_step": ints("step", typecode="i"), "pair_seq": ints("pair_seq"),
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


# -- the fast decoders' texts (importers/event_batches.py, rank_batches.py) ---------------------------------

def text_values(values: list) -> list:
    """text_field of an optional string: None is ""."""
    return list(map({None: ""}.get, values, values)) if None in values else values


def json_texts(raws: list) -> JsonTexts | None:
    """The summaries' JSON texts; a missing one or a null: b"". None: a text that orjson would not read back (the
    decoder checks a raw value's syntax but not its UTF-8, nor numbers past a double's range)."""
    lens = list(map(len, raws))
    if 4 in lens:  # (a null: the only value of 4 bytes a summary may be)
        raws = [b"" if k == 4 and bytes(r) == b"null" else r for r, k in zip(raws, lens)]
        lens = list(map(len, raws))
    joined = b"".join(raws)
    try:
        joined.decode()
    except UnicodeDecodeError:
        return None
    if _huge(joined):
        return None
    return JsonTexts(raws, lens)


_ZEROS = bytes.maketrans(b"123456789E", b"000000000e")


def _huge(text: bytes) -> bool:
    """Whether text may hold an exponent that overflows a double (orjson rejects those): the regular expression
    [eE]\\+?[0-9]{3}, found by one search for "e000" once every digit is a 0, every E an e and every + gone (one
    C pass, where the regular expression's scan, or a search for each of its shapes, is several). Deleting every +
    may find what the expression would not ("e++100"): such a batch is read by the careful path, which says what it
    holds."""
    return b"e000" in text.translate(_ZEROS, b"+")


__all__ = ["extend", "text_column"]
