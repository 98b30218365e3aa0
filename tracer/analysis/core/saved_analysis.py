"""The analysis kept beside its trace: an Analysis written to the trace store (data/store/, `write_arrays`) after
it is computed, and read back instead of analysing again when the same trace is opened with the same code.

An Analysis is columns and a small tree of dataclasses. The columns (the arrays indexed by event row, and the
CollectiveTable's and P2PTable's own) become the store's arrays as they are; everything else is JSON, read back
into its dataclasses by their type hints (`_revive`). A saved analysis is valid for the events store it was made
from (its fingerprint: the rank files' sizes and mtimes, the reader's code) and for this package's analysis code
(a digest of its sources): anything else, or any damage (the store's digest), and the analysis runs again.

Only the plain analysis is saved (no what-if changes asked for): `report --what-if` recomputes.
"""

from __future__ import annotations

import functools
import os
import types
import typing
from array import array
from dataclasses import fields, is_dataclass
from math import nan

import orjson

from ...data import store
from ...data.table.columns import CodedColumn, typecode
from ...data.table import EventTable
from .results import Analysis
from .tables import CollectiveTable, P2PTable

KIND = "analysis"  # the store file's name: analysis-v3[-runN][-HASH].arrow beside events-v3...
_TABLES = {"collectives": CollectiveTable, "p2p": P2PTable}
_TABLE_WARNINGS = "table.warnings"  # a key of the meta that no Analysis field can have


def _code_version() -> str:
    """A digest of the analysis' sources: an analysis saved by other code is stale."""
    return store.source_digest(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fingerprint(table: EventTable) -> dict:
    return {"events": table.origin.fingerprint, "rows": len(table), "code": _code_version()}


# -- writing ------------------------------------------------------------------------------------------------

def save(a: Analysis) -> None:
    """Keep `a` beside the store its table came from (nothing when it came from none). Never raises: the saved
    analysis is an optimisation (a read-only dir, a full disk, a value it cannot write: it is skipped)."""
    table = a.table
    if not isinstance(table.origin, store.StoreOrigin):
        return
    try:
        arrays, meta = _encode(a)
        store.write_arrays(table.origin.beside(KIND), arrays, meta, _fingerprint(table))
    except Exception:  # noqa: BLE001 - never fail the command for a cache
        pass


def _encode(a: Analysis) -> tuple[dict, dict]:
    arrays, meta = {}, {}
    for f in fields(Analysis):
        v = getattr(a, f.name)
        if f.name == "table":
            continue
        if isinstance(v, (CollectiveTable, P2PTable)):
            meta[f.name] = _encode_columns(v, f.name, arrays)
        elif isinstance(v, array):
            arrays[f.name] = v
        else:
            meta[f.name] = v
    # the warnings the analysis added to the table (problems/checks.py: a lost begin record), added again on reading
    meta[_TABLE_WARNINGS] = a.table.warnings
    # dataclasses as dicts of all their fields, rank-keyed dicts with their keys as text (read back as ints)
    return arrays, orjson.loads(orjson.dumps(meta, option=orjson.OPT_NON_STR_KEYS))


def _encode_columns(t, name: str, arrays: dict) -> dict:
    """A CollectiveTable's or P2PTable's columns into `arrays` ("collectives.gid", ...); returns what is not an
    array (the coded columns' values, the instances with missing ranks)."""
    out = {}
    for attr, v in vars(t).items():
        if attr in ("events", "_views"):
            continue
        if isinstance(v, (array, bytearray)):
            arrays[f"{name}.{attr}"] = v
        elif isinstance(v, CodedColumn):
            arrays[f"{name}.{attr}"] = v.codes
            out[attr] = v.values
        elif attr == "missing":
            out[attr] = [[k, list(ranks)] for k, ranks in v.items()]
        else:
            raise TypeError(f"{type(t).__name__}.{attr}: no way to save a {type(v).__name__}")
    return out


# -- reading ------------------------------------------------------------------------------------------------

def load(table: EventTable) -> Analysis | None:
    """The analysis saved beside `table`'s store, if one is there for this table and this code; else None."""
    if not isinstance(table.origin, store.StoreOrigin):
        return None
    try:
        arrays, meta = store.read_arrays(table.origin.beside(KIND), _fingerprint(table))
        return _decode(table, arrays, meta)
    except (store.StoreError, OSError, ImportError,
            KeyError, TypeError, ValueError, IndexError, AttributeError):  # (these: of another shape, not trusted)
        return None


def _decode(table: EventTable, arrays: dict, meta: dict) -> Analysis:
    hints = typing.get_type_hints(Analysis, localns={"CollectiveTable": CollectiveTable, "P2PTable": P2PTable})
    kwargs = {"table": table}
    n = len(table)
    for f in fields(Analysis):
        if f.name == "table":
            continue
        if f.name in _TABLES:
            kwargs[f.name] = _decode_columns(_TABLES[f.name], f.name, table, arrays, meta[f.name])
        elif f.name in arrays:
            col = arrays[f.name]
            if len(col) != n:
                raise ValueError(f"{f.name}: {len(col)} rows, the table has {n}")
            kwargs[f.name] = col
        else:
            kwargs[f.name] = _revive(hints[f.name], meta[f.name])
    analysis = Analysis(**kwargs)
    warnings = _revive(list[str], meta[_TABLE_WARNINGS])
    table.warnings.extend(w for w in warnings if w not in table.warnings)
    return analysis


def _decode_columns(cls, name: str, table: EventTable, arrays: dict, meta: dict):
    t = cls(table) if cls is CollectiveTable else cls()
    for attr, v in list(vars(t).items()):
        if attr in ("events", "_views"):
            continue
        if isinstance(v, CodedColumn):
            codes = arrays[f"{name}.{attr}"]
            if codes and max(codes) >= len(meta[attr]):
                raise ValueError(f"{name}.{attr}: a code past its values")
            setattr(t, attr, CodedColumn.from_codes(meta[attr], codes))
        elif attr == "missing":
            setattr(t, attr, {int(k): tuple(ranks) for k, ranks in meta[attr]})
        else:
            stored = arrays[f"{name}.{attr}"]
            if not _same_kind(stored, v):
                raise TypeError(f"{name}.{attr}: stored as another type")
            setattr(t, attr, stored)
    return t


def _same_kind(stored, v) -> bool:
    """Whether a stored column (read in place: a memoryview) stands for the empty column `v` of a fresh table: an
    array of the same typecode, or a bytearray."""
    if type(stored) is not memoryview:
        return False
    if isinstance(v, array):
        return typecode(stored) == v.typecode
    return isinstance(v, (bytes, bytearray)) and stored.format == "B"


def _revive(tp, v):
    """`v` (parsed JSON) as a value of type `tp`: dataclasses from dicts, rank keys back to ints, tuples."""
    return _reviver(tp)(v)


@functools.cache
def _reviver(tp):
    """The function that revives a JSON value of type `tp` (made once per type: a saved analysis of a large trace
    holds ~10^5 dataclasses, and the type hints are slow to evaluate)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [t for t in args if t is not type(None)]
        f = _reviver(inner)
        return lambda v: None if v is None else f(v)
    if is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        parts = [(f.name, _reviver(hints[f.name])) for f in fields(tp) if f.init]
        return lambda v: tp(**{name: f(v[name]) for name, f in parts})
    if origin is list:
        f = _reviver(args[0])
        return lambda v: [f(e) for e in v]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            f = _reviver(args[0])
            return lambda v: tuple(map(f, v))
        fs = [_reviver(t) for t in args]
        return lambda v: tuple(f(e) for f, e in zip(fs, v, strict=True))
    if origin is dict:
        key, value = args
        f = _reviver(value)
        if key is int:
            return lambda v: {int(k): f(e) for k, e in v.items()}
        return lambda v: {k: f(e) for k, e in v.items()}
    if tp is float:
        return lambda v: nan if v is None else v  # (JSON has no NaN: orjson writes it as null)
    if tp in (int, str, bool):
        def check(v):
            if type(v) is not tp and v is not None:
                raise TypeError(f"{v!r} is not {tp.__name__}")
            return v
        return check
    return lambda v: v
