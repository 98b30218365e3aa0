"""The black box's aggregates of the whole run: each rank's `.agg` file (+ its rank file's "aggkey", "group",
"clock" and "meta" records) -> one small table of numpy columns (`Aggregates`).

An `.agg` file (docs/FORMAT.md, "The black box"; its constants in format.py) is AGG_MAGIC, zeros to AGG_DATA_AT,
then fixed-size AGG_ROW rows: per window, its own row (key AGG_WINDOW_KEY: ops ended in it, its start and end on
the rank's monotonic clock, its first and last step marker's numbers, whether ops were lost) and a row per key (op
kind, group, size bucket) of the ops that ended in it (count, total and max duration, bytes). Windows are aligned
here to rank 0's clock as the rank's ops are (rank_files.clock_of); a key is named by its group's ranks, its op
and its size bucket, so that one key has one code over all the ranks.

What it tolerates, each said in one line in `damage` (never a crash): a wrong magic (the file is left out), a
truncated last row (dropped), rows of a key no "aggkey" record defines (dropped, counted), an `.agg` file without
its rank file or whose rank file has no meta record (left out). A window written in several rows (a partial one
flushed at exit, then the rest) is merged: its ops and its keys' counts, times and bytes summed, the max kept.

Imports neither torch nor textual.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import orjson

from ...format import (AGG_DATA_AT, AGG_MAGIC, AGG_ROW, AGG_ROW_BYTES, AGG_SUFFIX, AGG_WINDOW_KEY, AGGKEY, CLOCK,
                       GROUP, META, RANK_FILE_SUFFIX, kind_marker)
from .rank_files import aligned, clock_of, find_rank_files, group_name
from .runs import find_runs, pick_run

# AGG_ROW's fields, in its order (docs/FORMAT.md): the dtype is built from format.py's struct, never repeated
ROW_FIELDS = ("window", "key", "flags", "count", "pad", "total_ns", "max_ns", "bytes", "t_end_ns")
ROW_DTYPE = np.dtype([(name, AGG_ROW[0] + code) for name, code in zip(ROW_FIELDS, AGG_ROW[1:])])
assert ROW_DTYPE.itemsize == AGG_ROW_BYTES
LOST = 1  # a window row's flags bit 0: the ring overran between two reads of the aggregator (counts: lower bounds)
_FEW = tuple(kind_marker(k) for k in (META, GROUP, CLOCK, AGGKEY))  # the rank file's records read here


@dataclass(frozen=True)
class Key:
    """An aggregate key, the same on every rank: the group (its name and ranks), the op, the size bucket
    [lo, hi) bytes."""
    group: str
    group_ranks: tuple[int, ...]
    op: str
    lo: int
    hi: int


@dataclass
class Aggregates:
    """The whole run's aggregates of the ranks of one run, as columns. Windows: one row per (rank, window), sorted
    by rank then window; times aligned ns; steps -1 where no marker fell in the window. Cells: one row per (rank,
    window, key), `cell_window` the index of its window's row; `keys[cell_key]` its key."""
    ranks: list[int]
    window_by: str                   # "steps" or "seconds" (the meta's black_box.window.by; "" unknown)
    window_every: float
    w_rank: np.ndarray
    w_index: np.ndarray              # the window's number on its rank
    w_start: np.ndarray
    w_end: np.ndarray
    w_first_step: np.ndarray         # the first and last step marker's numbers in the window (-1: none)
    w_last_step: np.ndarray
    w_ops: np.ndarray
    w_lost: np.ndarray               # bool
    cell_window: np.ndarray
    cell_key: np.ndarray
    cell_count: np.ndarray
    cell_total: np.ndarray
    cell_max: np.ndarray
    cell_bytes: np.ndarray
    keys: list[Key] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)


def agg_files(paths: list[str]) -> list[str]:
    """The `.agg` files of these trace dirs."""
    return [os.path.join(p, n) for p in paths if os.path.isdir(p) for n in sorted(os.listdir(p))
            if n.endswith(AGG_SUFFIX)]


def has_aggregates(paths: list[str]) -> bool:
    """Whether these trace dirs hold aggregates (a black-box trace's)."""
    return bool(agg_files(paths))


def read_aggregates(paths: list[str] | str, run: int | None = None) -> Aggregates | None:
    """The aggregates of the chosen run (the reader's default run: runs.pick_run) of these trace dirs; None when
    they hold no `.agg` file (not a black-box trace)."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    aggs = agg_files(paths)
    if not aggs:
        return None
    damage: list[str] = []
    runs, _ = find_runs([f for p in paths for f in find_rank_files(p)])
    chosen = {f.path[:-len(RANK_FILE_SUFFIX)] for f in pick_run(runs, run, [], " ".join(paths)).files} if runs \
        else set()
    stems = {a[:-len(AGG_SUFFIX)]: a for a in aggs}
    for stem in sorted(set(stems) - chosen):
        if not os.path.exists(stem + RANK_FILE_SUFFIX):
            damage.append(f"{os.path.basename(stems[stem])}: no rank file beside it (left out)")
    parts = [p for stem in sorted(set(stems) & chosen) if (p := _read_rank(stem, stems[stem], damage)) is not None]
    return _table(parts, damage)


@dataclass
class _Rank:
    rank: int
    rows: np.ndarray
    keys: dict[int, Key]
    clock: tuple | None
    window: dict


def _read_rank(stem: str, agg: str, damage: list[str]) -> _Rank | None:
    name = os.path.basename(agg)
    head = _rank_records(stem + RANK_FILE_SUFFIX)
    meta = head[META]
    if not isinstance(meta, dict) or type(meta.get("rank")) is not int:
        damage.append(f"{name}: its rank file has no meta record (left out)")
        return None
    try:
        with open(agg, "rb") as f:
            data = f.read()
    except OSError as e:
        damage.append(f"{name}: cannot read it ({e.strerror or e})")
        return None
    if data[:len(AGG_MAGIC)] != AGG_MAGIC:
        damage.append(f"{name}: not an aggregates file (its magic is {data[:len(AGG_MAGIC)]!r}, not {AGG_MAGIC!r}): "
                      "left out")
        return None
    body = data[AGG_DATA_AT:]
    whole = len(body) // ROW_DTYPE.itemsize * ROW_DTYPE.itemsize
    if whole < len(body):
        damage.append(f"{name}: its last row is cut ({len(body) - whole} of {ROW_DTYPE.itemsize} bytes): dropped")
    rows = np.frombuffer(body[:whole], ROW_DTYPE)
    keys = _keys(head[AGGKEY], head[GROUP])
    known = (rows["key"] == AGG_WINDOW_KEY) | np.isin(rows["key"], np.fromiter(keys, np.int64, len(keys)))
    if not known.all():
        missing = sorted(set(rows["key"][~known].tolist()))
        damage.append(f"{name}: {int((~known).sum())} row(s) of key(s) {', '.join(map(str, missing[:5]))}"
                      f"{' …' if len(missing) > 5 else ''} that no aggkey record defines: dropped")
        rows = rows[known]
    box = meta.get("black_box") if isinstance(meta.get("black_box"), dict) else {}
    return _Rank(meta["rank"], rows, keys, clock_of(head[CLOCK]),
                 box.get("window") if isinstance(box.get("window"), dict) else {})


def _rank_records(path: str) -> dict:
    """The few records of a rank file the aggregates need: META (the record), GROUP (g -> record), CLOCK (phase ->
    record), AGGKEY (id -> record). Lines that do not parse are the rank file's reader's to report."""
    out = {META: None, GROUP: {}, CLOCK: {}, AGGKEY: {}}
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError:
        return out
    for line in lines:
        if not any(m in line[:40] for m in _FEW):
            continue
        try:
            r = orjson.loads(line)
            k = r["k"]
            if k == META:
                out[META] = r
            elif k == GROUP:
                out[GROUP][r["g"]] = r
            elif k == CLOCK:
                out[CLOCK][r.get("phase", "start")] = r
            elif k == AGGKEY:
                out[AGGKEY][r["id"]] = r
        except Exception:  # noqa: BLE001 - a malformed record: the rank file's reader counts it
            continue
    return out


def _keys(aggkeys: dict, groups: dict) -> dict[int, Key]:
    """id -> Key of a rank's aggkey records (a key of a group with no record: named by its index)."""
    out = {}
    for kid, r in aggkeys.items():
        lo, hi = r.get("lo", 0), r.get("hi", 0)
        if not (type(kid) is int and isinstance(r.get("op"), str) and type(lo) is int and type(hi) is int):
            continue  # a malformed definition: its rows are a key no record defines (said)
        g = groups.get(r.get("g"))
        ranks = tuple(x for x in g["ranks"] if type(x) is int) if g and isinstance(g.get("ranks"), list) else ()
        out[kid] = Key(group_name(g) if g else f"group {r.get('g')}", ranks, r["op"], lo, hi)
    return out


def _table(parts: list[_Rank], damage: list[str]) -> Aggregates:
    parts.sort(key=lambda p: p.rank)
    codes: dict[Key, int] = {}
    w_cols: list[dict] = []
    c_cols: list[dict] = []
    base = 0
    for p in parts:
        w = _windows(p)
        c = _cells(p, w, codes, damage)
        c["window"] += base
        base += len(w["index"])
        w_cols.append(w)
        c_cols.append(c)
    window = next((p.window for p in parts if p.window), {})

    def cat(cols: list[dict], name: str, dtype) -> np.ndarray:
        return np.concatenate([c[name] for c in cols]).astype(dtype) if cols else np.zeros(0, dtype)

    return Aggregates(
        ranks=[p.rank for p in parts], window_by=str(window.get("by") or ""),
        window_every=float(window.get("every") or 0),
        w_rank=cat(w_cols, "rank", np.int64), w_index=cat(w_cols, "index", np.int64),
        w_start=cat(w_cols, "start", np.int64), w_end=cat(w_cols, "end", np.int64),
        w_first_step=cat(w_cols, "first", np.int64), w_last_step=cat(w_cols, "last", np.int64),
        w_ops=cat(w_cols, "ops", np.int64), w_lost=cat(w_cols, "lost", bool),
        cell_window=cat(c_cols, "window", np.int64), cell_key=cat(c_cols, "key", np.int64),
        cell_count=cat(c_cols, "count", np.int64), cell_total=cat(c_cols, "total", np.int64),
        cell_max=cat(c_cols, "max", np.int64), cell_bytes=cat(c_cols, "bytes", np.int64),
        keys=list(codes), damage=damage)


def _windows(p: _Rank) -> dict:
    """One row per window of this rank (window rows written more than once merged), aligned times."""
    rows = p.rows[p.rows["key"] == AGG_WINDOW_KEY]
    index, inverse = np.unique(rows["window"].astype(np.int64), return_inverse=True)
    n = len(index)

    def reduce(ufunc, values, empty):
        out = np.full(n, empty, np.int64)
        ufunc.at(out, inverse, values.astype(np.int64))
        return out

    start, first = rows["total_ns"], rows["bytes"]
    marked_first = np.where(first >= 0, first, np.iinfo(np.int64).max)
    firsts = reduce(np.minimum, marked_first, np.iinfo(np.int64).max)
    return {"rank": np.full(n, p.rank, np.int64), "index": index,
            "start": aligned(reduce(np.minimum, start, np.iinfo(np.int64).max), p.clock),
            "end": aligned(reduce(np.maximum, rows["t_end_ns"], np.iinfo(np.int64).min), p.clock),
            "first": np.where(firsts == np.iinfo(np.int64).max, -1, firsts),
            "last": reduce(np.maximum, rows["max_ns"], -1),
            "ops": reduce(np.add, rows["count"], 0),
            "lost": reduce(np.bitwise_or, rows["flags"] & LOST, 0).astype(bool)}


def _cells(p: _Rank, w: dict, codes: dict[Key, int], damage: list[str]) -> dict:
    """One row per (window, key) of this rank, summed where written more than once; windows by their row in `w`
    (a key row of a window with no window row of its own has no time nor steps: it is left out, said)."""
    rows = p.rows[p.rows["key"] != AGG_WINDOW_KEY]
    code = np.array([codes.setdefault(p.keys[k], len(codes)) for k in rows["key"].tolist()], np.int64)
    at = np.searchsorted(w["index"], rows["window"].astype(np.int64))
    has = (at < len(w["index"])) & (w["index"][np.minimum(at, len(w["index"]) - 1)] == rows["window"]) \
        if len(w["index"]) else np.zeros(len(rows), bool)
    if not has.all():
        damage.append(f"rank {p.rank}: {int((~has).sum())} key row(s) of window(s) with no window row: dropped")
    rows, code, at = rows[has], code[has], at[has]
    pair = at * (len(codes) + 1) + code
    uniq, inverse = np.unique(pair, return_inverse=True)
    n = len(uniq)

    def reduce(ufunc, values, empty=0):
        out = np.full(n, empty, np.int64)
        ufunc.at(out, inverse, values.astype(np.int64))
        return out

    return {"window": uniq // (len(codes) + 1), "key": uniq % (len(codes) + 1),
            "count": reduce(np.add, rows["count"]), "total": reduce(np.add, rows["total_ns"]),
            "max": reduce(np.maximum, rows["max_ns"]), "bytes": reduce(np.add, rows["bytes"])}
