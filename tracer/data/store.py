"""The trace store: an EventTable on disk as an Apache Arrow IPC file (Feather v2), written once, memory-mapped on
open, so that opening a trace again costs neither parsing nor (for the bulk of it) copying.

Why Arrow IPC: uncompressed it can be memory-mapped (the JSON summaries are read straight from the page cache,
decoded only when a row is looked at), and pandas, Polars, DuckDB, Spark and Dask read it as it is
(docs/FORMAT.md, "The trace store"). Parquet would be smaller but must be decoded on every open.

Layout (STORE_VERSION): one record batch, a column per EventTable field (docs/FORMAT.md lists them); integers in
their array's width with null as -1 (NONE), text columns dictionary-encoded exactly as CodedColumn holds them
(the codes are the dictionary indices), shapes as a dictionary of JSON texts, the sparse columns (in, out, error,
extra) as nullable JSON texts. The table-level data (groups, ranks and their damage, warnings, notes, stacks,
runs), the store's version and the fingerprint of the inputs are JSON in the schema's metadata, with an XXH3-64
digest of that JSON and of every buffer read: a damaged store is never trusted (StoreError), it is rebuilt.

`cached_load` is what `load_trace` calls: open the store beside the trace if it is valid for the same inputs
(the same paths, run, rank files' sizes and mtimes, and reader code), else parse and write it. Writing never fails
the command (read-only dirs, full disks: the store is skipped; concurrent writers: a temp name and os.replace),
and a source changed less than RACY_NS ago is not cached (file times are coarser than the writes that may follow).

pyarrow is imported on first use. Imports neither torch nor textual.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
import time
from array import array
from dataclasses import asdict, dataclass, field, fields
from typing import Callable

import orjson
import xxhash

from . import arrow_arrays
from .columns import CodedColumn, JsonColumn, SparseColumn, json_key, typecode
from .events import _INT_COLUMNS, _STR_COLUMNS, EventTable, Group, Progress, RankInfo, give_back_freed_memory
from .runs import Ending, RankFile, Run

STORE_VERSION = 2
CACHE_DIR = ".disttrace-cache"   # inside a trace dir
FILE_SUFFIX = ".disttrace.arrow"  # beside an events file
ENV = "DISTTRACE_CACHE"          # "0" turns the store off
RACY_NS = 2_000_000_000          # a source modified this recently is not cached (coarse file times)

_META_KEY = b"disttrace"
_DIGEST_KEY = b"disttrace.xxh3_64"
# EventTable field -> column name in the file (the events format's names, docs/FORMAT.md)
_NAMES = {"in_": "in", "user_step": "step"}
_JSON_COLUMNS = ("in_", "out", "error", "extra")


@dataclass(frozen=True)
class StoreOrigin:
    """Where a table's store is and what it was made from (EventTable.origin): results derived from the table
    (the analysis) are kept beside it under the same fingerprint."""

    path: str
    fingerprint: dict = field(hash=False)

    def beside(self, kind: str) -> str:
        """The path of another file of this store: `kind` (e.g. "analysis") in place of "events"."""
        folder, name = os.path.split(self.path)
        if name.endswith(FILE_SUFFIX):
            return os.path.join(folder, name[:-len(FILE_SUFFIX)] + f".{kind}{FILE_SUFFIX}")
        return os.path.join(folder, kind + name[len("events"):])


class StoreError(Exception):
    """The store cannot be used (damaged, another version, made from other inputs): parse the trace instead."""


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "no", "off", "false")


# -- writing ------------------------------------------------------------------------------------------------

def _int_type(pa, typecode: str):
    return {"b": pa.int8(), "B": pa.uint8(), "h": pa.int16(), "H": pa.uint16(), "i": pa.int32(), "I": pa.uint32(),
            "l": pa.int64(), "q": pa.int64(), "L": pa.uint64(), "Q": pa.uint64()}[typecode]


def _fixed(pa, col):
    """An array.array or a bytearray (uint8) as an Arrow array over the same bytes."""
    return pa.Array.from_buffers(_value_type(pa, _typecode(col)), len(col), [None, pa.py_buffer(col)])


def _typecode(col) -> str:
    if isinstance(col, memoryview):  # (of one of the array module's typecodes)
        return col.format
    return _BYTES if isinstance(col, (bytes, bytearray)) else col.typecode


def _json_array(pa, col) -> "object":
    """Nullable JSON texts (large_string) from a sparse column; raises on a value orjson cannot write."""
    n = len(col)
    texts = col.texts() if isinstance(col, JsonColumn) else None
    if texts is not None:  # the column's own texts, as they are
        import numpy as np

        offsets = np.frombuffer(texts[0], np.int64)[:n + 1]
        present = np.packbits(offsets[1:] > offsets[:-1], bitorder="little")
        return pa.Array.from_buffers(pa.large_string(), n, [pa.py_buffer(present.tobytes()),
                                                            pa.py_buffer((offsets - offsets[0]).tobytes()),
                                                            pa.py_buffer(texts[1])],
                                     null_count=int(n - np.count_nonzero(offsets[1:] > offsets[:-1])))
    dumps = orjson.dumps
    offsets = array("q", bytes(8 * (n + 1)))
    present = bytearray(n)
    chunks = []
    pos = 0
    values = col._values if type(col) is SparseColumn else {i: v for i, v in enumerate(col) if v is not None}
    last = 0
    for i, v in sorted(values.items()):
        for k in range(last + 1, i + 1):
            offsets[k] = pos
        b = dumps(v)
        chunks.append(b)
        pos += len(b)
        present[i] = 1
        offsets[i + 1] = pos
        last = i + 1
    for k in range(last + 1, n + 1):
        offsets[k] = pos
    validity = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(present)]).cast(pa.bool_()).buffers()[1]
    return pa.Array.from_buffers(pa.large_string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(chunks))],
                                 null_count=n - len(values))


def _coded(pa, col: CodedColumn, shape: bool):
    values = [json_key(v).decode() for v in col.values] if shape else col.values
    return pa.DictionaryArray.from_arrays(_fixed(pa, col.codes), arrow_arrays.strings(pa, values))


def _meta(table: EventTable, fingerprint: dict) -> dict:
    return {
        "store_version": STORE_VERSION,
        "events": len(table),
        "fingerprint": fingerprint,
        "run": table.run,
        "groups": [[g.name, list(g.ranks)] for g in table.groups],
        "ranks": [asdict(info) for info in table.ranks.values()],
        "warnings": table.warnings,
        "notes": table.notes,
        "stacks": [[r, s] for r, s in table.stacks.items()],
        "runs": [{"number": run.number,
                  "files": [{"path": f.path, "meta": f.meta, "ending": list(f.ending) if f.ending else None}
                            for f in run.files]} for run in table.runs],
    }


def write_store(table: EventTable, path: str, fingerprint: dict | None = None, part: dict | None = None) -> None:
    """Write `table` to the store file `path` (through a temp file in its dir and os.replace). Raises OSError, or
    TypeError/ValueError/orjson errors on a value that cannot be stored; `path` is then left as it was. `part`:
    this is a worker's share of a parallel read (data/parallel.py), what it says of its share (in the metadata)."""
    import pyarrow as pa

    names, arrays = [], []
    for name in _INT_COLUMNS:
        names.append(_NAMES.get(name, name))
        arrays.append(_fixed(pa, getattr(table, name)))
    for name in _STR_COLUMNS + ("shape",):
        names.append(name)
        arrays.append(_coded(pa, getattr(table, name), name == "shape"))
    for name in _JSON_COLUMNS:
        names.append(_NAMES.get(name, name))
        arrays.append(_json_array(pa, getattr(table, name)))
    names.append("async_op")
    arrays.append(_fixed(pa, table.async_op))
    meta = _meta(table, fingerprint or {})
    if part is not None:
        meta["part"] = part
    _write(pa, path, names, arrays, orjson.dumps(meta))


def _write(pa, path: str, names: list[str], arrays: list, meta: bytes) -> None:
    """One record batch of `arrays` with `meta` and their digest in its schema's metadata, to `path` through a
    temp file in its dir and os.replace (a reader sees the old file or the new one, never half of one)."""
    schema = pa.schema([pa.field(n, a.type) for n, a in zip(names, arrays)],
                       metadata={_META_KEY: meta, _DIGEST_KEY: str(_digest(arrays, meta)).encode()})
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    folder = os.path.dirname(path) or "."
    fd, tmp = _create_temp(folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            with pa.ipc.new_file(fh, schema) as writer:
                writer.write_batch(batch)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_BYTES = "bytearray"  # write_arrays' typecode of a bytearray (uint8 like array "B", read back as a bytearray)


def _create_temp(folder: str) -> tuple[int, str]:
    """A new temp file in `folder`, created as any file is (mode 0666 less the umask: mkstemp's 0600 would hide
    the store from the other users of a shared trace dir): (its fd, its path)."""
    tmp = os.path.join(folder, f".tmp-{os.getpid()}-{secrets.token_hex(6)}.arrow")
    return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp


def _value_type(pa, typecode: str):
    return pa.float64() if typecode == "d" else pa.uint8() if typecode == _BYTES else _int_type(pa, typecode)


def write_arrays(path: str, arrays: dict, meta: dict, fingerprint: dict) -> None:
    """Write named typed arrays (array.array, bytearray, or a memoryview of an array typecode) of any lengths and
    a JSON-able `meta` to the store file `path`: one row, each array a large_list column (its typecode in the
    metadata's "arrays"). What derived results (the analysis, the viewer's lanes) are kept in, beside the events;
    read_arrays reads it back."""
    import pyarrow as pa

    names, cols, codes = [], [], {}
    for name, a in arrays.items():
        cols.append(pa.LargeListArray.from_arrays(_fixed(pa, array("q", [0, len(a)])), _fixed(pa, a)))
        names.append(name)
        codes[name] = _typecode(a)
    _write(pa, path, names, cols, orjson.dumps({"store_version": STORE_VERSION, "fingerprint": fingerprint,
                                                "arrays": codes, "meta": meta}))


def read_arrays(path: str, fingerprint: dict) -> tuple[dict, dict]:
    """(the named arrays, the meta) that write_arrays wrote to `path` from inputs of this `fingerprint`. Raises
    StoreError when the file is damaged, of another version, or stale; OSError when it cannot be read."""
    import pyarrow as pa

    try:
        batch, meta_b, meta, digest = _open(pa, path, fingerprint)
        codes = meta.get("arrays")
        if type(codes) is not dict or batch.schema.names != list(codes) or batch.num_rows != 1:
            raise StoreError("unexpected columns")
        for tc, col in zip(codes.values(), batch.columns):
            if col.type != pa.large_list(_value_type(pa, tc)) or col.offset or col.values.offset:
                raise StoreError("unexpected columns")
        if digest(batch.columns) != _stored_digest(batch):
            raise StoreError("checksum mismatch")
        # read in place, as the event columns are (_mapped): a re-open's analysis is ~65 bytes an event of arrays,
        # which copies kept in the process's own memory (a reader that must change one copies it: columns.writable)
        out = {name: _mapped(col.values, "B" if tc == _BYTES else tc) for (name, tc), col in zip(codes.items(),
                                                                                                batch.columns)}
        return out, meta["meta"]
    except StoreError:
        raise
    except (pa.ArrowException, OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as e:
        raise StoreError(f"damaged store: {type(e).__name__}: {e}"[:300]) from None


def _stored_digest(batch) -> int:
    return int(batch.schema.metadata[_DIGEST_KEY])


def _open(pa, path: str, fingerprint: dict | None):
    """(the one record batch, its metadata's JSON as bytes and parsed, digest(arrays)) of a store file of this
    version and (given) fingerprint; the digest is the caller's to check, over the buffers it reads, with
    digest()."""
    with open(path, "rb") as fh:
        if fh.read(6) != b"ARROW1":
            raise StoreError("not an Arrow IPC file")
    source = pa.memory_map(path)
    base = source.read_buffer(6).address  # where the map begins: a buffer's place in the file is its address less it
    source.seek(0)
    reader = pa.ipc.open_file(source)
    metadata = reader.schema.metadata or {}
    meta_b = metadata.get(_META_KEY)
    if meta_b is None or metadata.get(_DIGEST_KEY) is None:
        raise StoreError("not a disttrace store")
    meta = orjson.loads(meta_b)
    if type(meta) is not dict or meta.get("store_version") != STORE_VERSION:
        raise StoreError(f"store version {meta.get('store_version') if type(meta) is dict else '?'}, "
                         f"this reads {STORE_VERSION}")
    if fingerprint is not None and meta.get("fingerprint") != fingerprint:
        raise StoreError("stale: the trace changed since the store was written")
    if reader.num_record_batches != 1:
        raise StoreError("unexpected batches")
    batch = reader.get_batch(0)
    return batch, meta_b, meta, lambda arrays: _digest_read(path, base, arrays, meta_b)


def merge_parts(parts: list[str], head: EventTable, path: str, fingerprint: dict, finish,
                whole_stores: bool = False) -> None:
    """Write the store file `path` of the events of the store parts `parts` (the workers' shares of one trace, in
    its order: data/parallel.py), in Arrow and numpy: each part's groups and dictionaries mapped onto the whole's
    (in order of first appearance, as one reader makes them), the rows sorted as EventTable.sort sorts them. The
    table-level records go to `head` (the runs and warnings found before the split): the parts' ranks, warnings,
    notes and stacks in order; then finish(head, events, [each part's "part" record]) adds what the reader says
    of the whole, or raises. Raises StoreError on a part that is not one. `whole_stores`: the parts are stores,
    checked valid by the caller (the nodes' own: data/node_stores.py), with no "part" record (None)."""
    import numpy as np
    import pyarrow as pa

    batches, records = [], []
    for p in parts:
        batch, _, meta, _ = _open(pa, p, None)  # (no digest: the workers' files, just written, never kept)
        if not _schema_ok(pa, batch.schema) or (type(meta.get("part")) is not dict and not whole_stores):
            raise StoreError(f"{p}: not a store part")
        batches.append(batch)
        records.append(meta)
    n = sum(b.num_rows for b in batches)
    group_of: list = []  # per part: its group index -> the whole's
    names = {f.name for f in fields(RankInfo)}
    for meta in records:
        group_of.append(np.array([head.group_id(name, ranks) for name, ranks in meta["groups"]] or [0], np.int32))
        for d in meta["ranks"]:
            if set(d) != names:
                raise StoreError("rank info of another shape")
            if d["rank"] not in head.ranks:
                head.ranks[d["rank"]] = RankInfo(**d)
        head.warnings += meta["warnings"]
        head.notes += meta["notes"]
        head.stacks.update((r, s) for r, s in meta["stacks"])
    finish(head, n, [meta.get("part") for meta in records])

    def column(name: str) -> list:
        return [b.column(name) for b in batches]

    keys = {}
    for name in ("start_ns", "rank", "id"):
        keys[name] = np.concatenate([np.frombuffer(_used_bytes(a)[0], _np_type(a)) for a in column(name)])
    order = np.lexsort((keys["id"], keys["rank"], keys["start_ns"]))
    if n < 2 or (order[1:] > order[:-1]).all():
        order = None  # already in order

    scratch = _Scratch(os.path.dirname(path) or ".")

    def ordered(values, dtype):
        """values in the table's order, in a scratch column; values: a numpy column, or a list of them joined."""
        out = scratch.column(dtype, n)
        if isinstance(values, list):
            if order is None:
                return np.concatenate(values, out=out) if values else out
            values = np.concatenate(values)
        if order is None:
            out[:] = values
            return out
        return np.take(values, order, out=out)

    def fixed(values, dtype) -> "object":
        return arrow_arrays.numbers(pa, ordered(values, dtype))

    out_names, arrays = [], []
    try:
        for name in _INT_COLUMNS:
            file_name = _NAMES.get(name, name)
            if name == "gid":  # each part's group indexes, as the whole's
                values = [g[np.frombuffer(_used_bytes(a)[0], np.int32)] for g, a in zip(group_of, column(name))]
            elif name in keys:
                values = keys[name]
            else:
                values = [np.frombuffer(_used_bytes(a)[0], _np_type(a)) for a in column(file_name)]
            out_names.append(file_name)
            arrays.append(fixed(values, np.dtype(_np_type(batches[0].column(file_name)) if batches else np.int64)))
        for name in _STR_COLUMNS + ("shape",):
            index: dict = {}  # value -> its code in the whole, in order of first appearance
            codes = []
            for a in column(name):
                mapping = np.array([index.setdefault(v, len(index)) for v in a.dictionary.to_pylist()] or [0],
                                   np.int64)
                codes.append(mapping[np.frombuffer(_used_bytes(a.indices)[0], _np_type(a.indices))])
            values = list(index)
            code_type = np.uint8 if len(values) <= 1 << 8 else np.uint16 if len(values) <= 1 << 16 else np.int32
            merged = np.concatenate(codes).astype(code_type) if codes else np.zeros(0, code_type)
            out_names.append(name)
            arrays.append(pa.DictionaryArray.from_arrays(fixed(merged, np.dtype(code_type)),
                                                         arrow_arrays.strings(pa, values)))
        for name in _JSON_COLUMNS:
            file_name = _NAMES.get(name, name)
            out_names.append(file_name)
            arrays.append(_joined_texts(pa, np, column(file_name), order, n, scratch))
        out_names.append("async_op")
        arrays.append(fixed([np.frombuffer(_used_bytes(a)[0], np.uint8) for a in column("async_op")],
                            np.dtype(np.uint8)))
        meta = _meta(head, fingerprint)
        meta["events"] = n
        _write(pa, path, out_names, arrays, orjson.dumps(meta))
    finally:
        del arrays
        scratch.close()


class _Scratch:
    """The merged columns, built in unlinked temp files beside the store and mapped, not in the process's memory:
    their pages are the page cache's, which the kernel writes back and reclaims when memory runs short (10M
    events: the merge held ~4 GB of its own, more than a 4 GB machine has; now ~0.7 GB, the sort keys and one
    column's copy at a time). The price is disk: about the store's size again while it is written."""

    def __init__(self, folder: str) -> None:
        self.folder, self.files = folder, []

    def column(self, dtype, n: int):
        import numpy as np

        dtype = np.dtype(dtype)
        if not n:
            return np.zeros(0, dtype)
        fh = tempfile.TemporaryFile(dir=self.folder, prefix=".merge-")
        self.files.append(fh)
        return np.memmap(fh, dtype, "w+", shape=(n,))

    def close(self) -> None:
        for fh in self.files:
            fh.close()


_TAKE_ROWS = 1 << 18  # the JSON texts are reordered this many rows at a time (the take's own copy is this big)


def _joined_texts(pa, np, chunks: list, order, n: int, scratch: _Scratch):
    """The parts' JSON texts (large_string arrays) as one, in the table's order, built in scratch columns: first
    joined in file order, then (when the rows are reordered) taken a slice of rows at a time. (Arrow's take over
    a chunked array would join the chunks in memory first, every time.)"""
    import pyarrow.compute as pc

    lengths, valid = [], []
    for a in chunks:
        lengths.append(np.diff(np.frombuffer(_used_bytes(a)[0], np.int64)))
        valid.append(_valid(np, a))
    lengths = np.concatenate(lengths) if chunks else np.zeros(0, np.int64)
    valid = np.concatenate(valid) if chunks else np.zeros(0, bool)

    def texts(lengths, valid, fill):
        """A large_string array of rows of these lengths and validity, its bytes written by fill(offsets, data)."""
        offsets = scratch.column(np.int64, n + 1)
        offsets[0] = 0
        np.cumsum(lengths, out=offsets[1:])
        data = scratch.column(np.uint8, int(offsets[-1]))
        fill(offsets, data)
        nulls = int(n - np.count_nonzero(valid))
        validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
        return pa.Array.from_buffers(pa.large_string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                     null_count=nulls)

    def joined(offsets, data) -> None:
        row = 0
        for a in chunks:
            used = _used_bytes(a)
            data[offsets[row]:offsets[row + len(a)]] = np.frombuffer(used[1], np.uint8)
            row += len(a)

    whole = texts(lengths, valid, joined)
    if order is None:
        return whole

    def taken(offsets, data) -> None:
        for a in range(0, n, _TAKE_ROWS):
            b = min(a + _TAKE_ROWS, n)
            piece = pc.take(whole, arrow_arrays.numbers(pa, order[a:b]))
            used = _used_bytes(piece)
            data[offsets[a]:offsets[b]] = np.frombuffer(used[1], np.uint8)

    return texts(lengths[order], valid[order], taken)


def _valid(np, a):
    """Which rows of an Arrow array hold a value, as numpy booleans, from its validity bitmap. (pyarrow's
    to_numpy of a boolean array imports pandas: ~40 MB kept by the process that merges a first read.)"""
    if not a.null_count:
        return np.ones(len(a), bool)
    bits = np.unpackbits(np.frombuffer(a.buffers()[0], np.uint8), bitorder="little")
    return bits[a.offset:a.offset + len(a)].astype(bool)


def _np_type(a):
    """The numpy dtype of a fixed-width Arrow array."""
    return a.type.to_pandas_dtype()


# -- reading ------------------------------------------------------------------------------------------------

def _digest(arrays, meta: bytes) -> int:
    """The XXH3-64 digest of the metadata and of every byte the reader uses (the logical extent of each buffer,
    in order). XXH3 rather than CRC-32: it reads at memory speed (1M events, a 246 MB store: 0.06 s against
    zlib.crc32's 0.16 s, most of a re-open's budget)."""
    h = xxhash.xxh3_64(meta)
    for a in arrays:
        for view in _used_bytes(a):
            h.update(view)
    return h.intdigest()


_READ_CHUNK = 64 << 10  # bytes read at a time: a buffer that stays in the CPU's cache (4 MB ones read 3x slower)


def _digest_read(path: str, base: int, arrays, meta: bytes) -> int:
    """What _digest says of `arrays`, mapped from the file `path` at address `base`, read from the file instead of
    through the map: the map's pages stay out of the process (its resident memory) until a row is read, which
    for most columns of a viewer's session is never (1M events: 130 MB that a digest through the map kept in)."""
    import numpy as np

    h = xxhash.xxh3_64(meta)
    chunk = bytearray(_READ_CHUNK)
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        for a in arrays:
            for view in _used_bytes(a):
                n = len(view)
                if not n:
                    continue
                at = np.frombuffer(view, np.uint8).__array_interface__["data"][0] - base
                if not 0 <= at <= size - n:
                    raise StoreError("a buffer outside the file")
                done = 0
                while done < n:
                    got = os.preadv(fh.fileno(), [memoryview(chunk)[:min(len(chunk), n - done)]], at + done)
                    if got <= 0:
                        raise StoreError("the store file shrank")
                    h.update(memoryview(chunk)[:got])
                    done += got
    return h.intdigest()


def _used_bytes(a) -> list:
    import pyarrow as pa

    if a.offset:
        raise StoreError("a sliced column")
    t = a.type
    if pa.types.is_dictionary(t):
        return _used_bytes(a.indices) + _used_bytes(a.dictionary)
    if pa.types.is_large_list(t):
        offsets = memoryview(a.buffers()[1])[:8 * (len(a) + 1)]
        if len(offsets) != 8 * (len(a) + 1):
            raise StoreError("short offsets")
        return [offsets] + _used_bytes(a.values)
    bufs = a.buffers()
    n = len(a)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        w = 4 if pa.types.is_string(t) else 8
        offsets = memoryview(bufs[1])[:w * (n + 1)]
        if len(offsets) != w * (n + 1):
            raise StoreError("short offsets")
        end = offsets.cast("i" if w == 4 else "q")[n] if n else 0
        data = memoryview(bufs[2])[:end] if bufs[2] is not None else memoryview(b"")
        if len(data) != end:
            raise StoreError("short string data")
        return [offsets, data]
    w = t.bit_width // 8
    data = memoryview(bufs[1])[:w * n] if bufs[1] is not None else memoryview(b"")
    if len(data) != w * n:
        raise StoreError("short column")
    return [data]


def _mapped(a, typecode: str) -> memoryview:
    """A fixed-width Arrow array's values, read in place: a read-only memoryview of `typecode` on the mapped
    file, indexed as fast as an array.array, its pages read in only when a row is (columns.typecode, .writable)."""
    return _used_bytes(a)[0].cast(typecode)


def _schema_ok(pa, schema) -> bool:
    expect = [_NAMES.get(n, n) for n in _INT_COLUMNS + _STR_COLUMNS + ("shape",) + _JSON_COLUMNS] + ["async_op"]
    if schema.names != expect:
        return False
    codes = (pa.uint8(), pa.uint16(), pa.int32())
    for name in _STR_COLUMNS + ("shape",):
        t = schema.field(name).type
        if not (pa.types.is_dictionary(t) and t.index_type in codes and t.value_type == pa.string()):
            return False
    return all(schema.field(_NAMES.get(n, n)).type == pa.large_string() for n in _JSON_COLUMNS)


def read_store(path: str, fingerprint: dict | None = None) -> EventTable:
    """The EventTable in the store file `path`. Raises StoreError when the file is damaged, of another version or
    (`fingerprint` given) made from other inputs, OSError when it cannot be read. The integer columns are copied
    into arrays; the text columns' codes too (a byte an event); the JSON columns stay in the mapped file."""
    import pyarrow as pa

    try:
        batch, meta_b, meta, digest = _open(pa, path, fingerprint)
        if not _schema_ok(pa, batch.schema):
            raise StoreError("unexpected columns")
        arrays = batch.columns
        if digest(arrays) != _stored_digest(batch):
            raise StoreError("checksum mismatch")
        n = batch.num_rows
        if n != meta["events"]:
            raise StoreError("row count mismatch")
        return _table(arrays, meta, n)
    except (pa.ArrowException, OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as e:
        raise StoreError(f"damaged store: {type(e).__name__}: {e}"[:300]) from None


def _extent(col: array) -> tuple[int, int]:
    """(min, max) of a non-empty column, in numpy (Python's min/max take 15 ms a million rows, each)."""
    import numpy as np

    a = np.frombuffer(col, np.dtype(typecode(col)))
    return int(a.min()), int(a.max())


def _table(arrays, meta: dict, n: int) -> EventTable:
    t = EventTable()
    k = 0
    for name in _INT_COLUMNS:
        setattr(t, name, _mapped(arrays[k], getattr(t, name).typecode))
        k += 1
    for name in _STR_COLUMNS + ("shape",):
        a = arrays[k]
        k += 1
        texts = a.dictionary.to_pylist()
        tc = {1: "B", 2: "H", 4: "i"}[a.indices.type.bit_width // 8]
        col = CodedColumn.from_codes([orjson.loads(s) for s in texts] if name == "shape" else texts,
                                     _mapped(a.indices, tc), json_key if name == "shape" else None)
        if n and _extent(col.codes)[1] >= len(texts):
            raise StoreError("a code past its dictionary")
        setattr(t, name, col)
    for name in _JSON_COLUMNS:
        offsets, data = _used_bytes(arrays[k])
        k += 1
        setattr(t, name, JsonColumn(offsets.cast("q"), data, n, owner=arrays))
    t.async_op = bytearray(_used_bytes(arrays[k])[0])
    t.groups = [Group(str(name), tuple(ranks)) for name, ranks in meta["groups"]]
    t.__dict__["_group_index"] = {g: i for i, g in enumerate(t.groups)}
    if n and not (0 <= (gids := _extent(t.gid))[0] and gids[1] < len(t.groups)):
        raise StoreError("a group index past the groups")
    names = {f.name for f in fields(RankInfo)}
    t.ranks = {}
    for d in meta["ranks"]:
        if set(d) != names:
            raise StoreError("rank info of another shape")
        t.ranks[d["rank"]] = RankInfo(**d)
    t.warnings, t.notes, t.run = meta["warnings"], meta["notes"], meta["run"]
    t.stacks = {r: s for r, s in meta["stacks"]}
    t.runs = [Run(r["number"], [RankFile(f["path"], f["meta"], Ending(*f["ending"]) if f["ending"] else None)
                                for f in r["files"]]) for r in meta["runs"]]
    return t


# -- the cache beside a trace ----------------------------------------------------------------------------------

def source_digest(*places: str) -> str:
    """A digest of the sources in `places` (a folder: its .py files; a file), read once per process: what a file
    derived by this code (a store, a saved analysis) must have been made by, else it is stale."""
    key = tuple(places)
    if key not in _DIGESTS:
        h = hashlib.sha1(str(STORE_VERSION).encode())
        for place in places:
            files = ([os.path.join(place, n) for n in sorted(os.listdir(place)) if n.endswith(".py")]
                     if os.path.isdir(place) else [place] if os.path.exists(place) else [])
            for f in files:
                with open(f, "rb") as fh:
                    h.update(os.path.basename(f).encode() + b"\0" + fh.read())
        _DIGESTS[key] = h.hexdigest()[:16]
    return _DIGESTS[key]


_DIGESTS: dict[tuple[str, ...], str] = {}
_HERE = os.path.dirname(os.path.abspath(__file__))


def _code_version() -> str:
    """The reader's code (this package and the format): a store written by another reader is stale."""
    return source_digest(_HERE, os.path.join(os.path.dirname(_HERE), "format.py"))


def fingerprint(paths: list[str], run: int | None, sources: list[str]) -> tuple[dict, int]:
    """(what the store must have been made from: the paths, the run, each source's path, size and mtime_ns, the
    reader's code; the newest mtime_ns). The paths are the real ones (_real): however a user spells the trace, its
    store is the same (`disttrace run` stores /abs/trace, and then says "disttrace view trace")."""
    files, newest = [], 0
    real = _real()
    for p in sources:
        st = os.stat(p)
        files.append([real(p), st.st_size, st.st_mtime_ns])
        newest = max(newest, st.st_mtime_ns)
    return {"paths": [os.path.realpath(p) for p in paths], "run": run, "files": files, "code": _code_version()}, newest


def _real():
    """A source file's path made real as os.path.realpath makes it, its folder looked up once (a trace of 1,024
    rank files lies in a few folders)."""
    folders: dict[str, str] = {}

    def real(path: str) -> str:
        folder, name = os.path.split(path)
        if folder not in folders:
            folders[folder] = os.path.realpath(folder or ".")
        return os.path.join(folders[folder], name)
    return real


def cache_path(paths: list[str], run: int | None, is_dir: bool) -> str:
    """Where the store of these paths (trace dirs, or one events file) and run lives: TRACE/.disttrace-cache/
    events-v2[-runN][-HASH].arrow (HASH: of the dirs' real paths, for a trace of several nodes),
    FILE.disttrace.arrow."""
    tag = f"-run{run}" if run is not None else ""
    if not is_dir:
        return f"{paths[0]}{tag.replace('-', '.')}{FILE_SUFFIX}"
    if len(paths) > 1:
        tag += "-" + hashlib.sha1("\0".join(map(os.path.realpath, paths)).encode()).hexdigest()[:12]
    return os.path.join(paths[0], CACHE_DIR, f"events-v{STORE_VERSION}{tag}.arrow")


def cached_load(paths: list[str], run: int | None, sources: list[str], is_dir: bool,
                parse: Callable[[], EventTable], progress: Progress | None = None,
                build: Callable[[str, dict], None] | None = None, settled: bool = False) -> EventTable:
    """Open the valid store of this trace, or read the trace and write its store for next time, and open that:
    by `build(path, fingerprint)`, which writes a store file (a parallel read, data/parallel.py; it raises
    parallel.PartsFailed where the trace should be read in process), else by `parse()`. `settled`: no process
    writes the sources any more, so that the store is written even of files changed less than RACY_NS ago."""
    target = cache_path(paths, run, is_dir)
    try:
        fp, newest = fingerprint(paths, run, sources)
    except OSError:
        return parse()
    try:
        table = read_store(target, fp)
        table.origin = StoreOrigin(target, fp)
        if progress is not None:
            progress(1.0, "opened the trace store")
        return table
    except ImportError:
        return parse()
    except (StoreError, OSError):
        pass  # none, stale or damaged: read the trace, and write it anew
    started = time.time_ns() + (RACY_NS if settled else 0)

    def keep() -> bool:
        """Whether what was read may be stored: the sources did not change meanwhile, nor just before."""
        return fingerprint(paths, run, sources)[0] == fp and newest < started - RACY_NS

    if build is not None:
        table = _built(build, target, is_dir, fp, keep)
        if table is not None:
            return table
    table = parse()
    try:
        if keep():
            if is_dir:
                os.makedirs(os.path.dirname(target), exist_ok=True)
            write_store(table, target, fp)
            # and opened as a re-open would: the parsed table's columns (~300 bytes an event with summaries) go,
            # the mapped ones come into memory only as they are read
            table = read_store(target, fp)
            table.origin = StoreOrigin(target, fp)
            give_back_freed_memory()
    except Exception:  # noqa: BLE001 - the store is an optimisation: never fail the command for it
        pass
    return table


def _built(build: Callable[[str, dict], None], target: str, is_dir: bool, fp: dict,
           keep: Callable[[], bool]) -> EventTable | None:
    """The table that `build` writes as a store, opened; the store kept at `target` if `keep()` (the sources did
    not change meanwhile, nor just before). Written beside the trace, or in the temp dir where that cannot be (a
    read-only trace dir: the store is then opened and removed). None: read the trace in process (the build
    failed, or wrote nothing readable). Raises TraceError: the trace cannot be read."""
    import tempfile

    from .parallel import PartsFailed

    folders = [os.path.dirname(target) or ".", tempfile.gettempdir()]
    for folder in folders:
        try:
            if is_dir and folder == folders[0]:
                os.makedirs(folder, exist_ok=True)
            fd, tmp = _create_temp(folder)
            os.close(fd)
        except OSError:
            continue
        try:
            build(tmp, fp)
            give_back_freed_memory()  # (the merge's columns, hundreds of MB, freed but kept by the allocator)
            if folder == folders[0] and keep():
                os.replace(tmp, target)
                table = read_store(target, fp)
                table.origin = StoreOrigin(target, fp)
                return table
            return read_store(tmp, fp)
        except (PartsFailed, StoreError, OSError, ImportError):
            return None
        finally:
            try:
                os.unlink(tmp)  # (a table opened from it keeps its mapping)
            except OSError:
                pass
    return None


__all__ = ["CACHE_DIR", "ENV", "FILE_SUFFIX", "STORE_VERSION", "StoreError", "StoreOrigin", "cache_path",
           "cached_load", "enabled", "fingerprint", "merge_parts", "read_arrays", "read_store", "source_digest",
           "write_arrays", "write_store"]
