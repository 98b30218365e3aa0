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

import os
import secrets
from array import array
from dataclasses import asdict, fields

import orjson
import xxhash

from ..importers.runs import Ending, RankFile, Run
from ..table import arrow_arrays
from ..table.columns import CodedColumn, JsonColumn, SparseColumn, json_key, typecode
from ..table.event_table import INT_COLUMNS, STR_COLUMNS, EventTable, Group, RankInfo

STORE_VERSION = 3  # 3: the pair_seq column

_META_KEY = b"disttrace"
_DIGEST_KEY = b"disttrace.xxh3_64"
# EventTable field -> column name in the file (the events format's names, docs/FORMAT.md)
NAMES = {"in_": "in", "user_step": "step"}  # (pair_seq: the same name)
JSON_COLUMNS = ("in_", "out", "error", "extra")


class StoreError(Exception):
    """The store cannot be used (damaged, another version, made from other inputs): parse the trace instead."""

# -- writing ------------------------------------------------------------------------------------------------

def _int_type(pa, typecode: str):
    return {"b": pa.int8(), "B": pa.uint8(), "h": pa.int16(), "H": pa.uint16(), "i": pa.int32(), "I": pa.uint32(),
            "l": pa.int64(), "q": pa.int64(), "L": pa.uint64(), "Q": pa.uint64()}[typecode]


def arrow_fixed(pa, col):
    """An array.array or a bytearray (uint8) as an Arrow array over the same bytes."""
    return pa.Array.from_buffers(value_type(pa, typecode_of(col)), len(col), [None, pa.py_buffer(col)])


def typecode_of(col) -> str:
    if isinstance(col, memoryview):  # (of one of the array module's typecodes)
        return col.format
    return BYTES if isinstance(col, (bytes, bytearray)) else col.typecode


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
    return pa.DictionaryArray.from_arrays(arrow_fixed(pa, col.codes), arrow_arrays.strings(pa, values))


def store_meta(table: EventTable, fingerprint: dict) -> dict:
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
    this is a worker's share of a parallel read (store/parallel.py), what it says of its share (in the metadata)."""
    import pyarrow as pa

    names, arrays = [], []
    for name in INT_COLUMNS:
        names.append(NAMES.get(name, name))
        arrays.append(arrow_fixed(pa, getattr(table, name)))
    for name in STR_COLUMNS + ("shape",):
        names.append(name)
        arrays.append(_coded(pa, getattr(table, name), name == "shape"))
    for name in JSON_COLUMNS:
        names.append(NAMES.get(name, name))
        arrays.append(_json_array(pa, getattr(table, name)))
    names.append("async_op")
    arrays.append(arrow_fixed(pa, table.async_op))
    meta = store_meta(table, fingerprint or {})
    if part is not None:
        meta["part"] = part
    write_batch(pa, path, names, arrays, orjson.dumps(meta))


def write_batch(pa, path: str, names: list[str], arrays: list, meta: bytes) -> None:
    """One record batch of `arrays` with `meta` and their digest in its schema's metadata, to `path` through a
    temp file in its dir and os.replace (a reader sees the old file or the new one, never half of one)."""
    schema = pa.schema([pa.field(n, a.type) for n, a in zip(names, arrays)],
                       metadata={_META_KEY: meta, _DIGEST_KEY: str(_digest(arrays, meta)).encode()})
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    folder = os.path.dirname(path) or "."
    fd, tmp = create_temp(folder)
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



BYTES = "bytearray"  # write_arrays' typecode of a bytearray (uint8 like array "B", read back as a bytearray)


def value_type(pa, typecode: str):
    return pa.float64() if typecode == "d" else pa.uint8() if typecode == BYTES else _int_type(pa, typecode)


def create_temp(folder: str) -> tuple[int, str]:
    """A new temp file in `folder`, created as any file is (mode 0666 less the umask: mkstemp's 0600 would hide
    the store from the other users of a shared trace dir): (its fd, its path)."""
    tmp = os.path.join(folder, f".tmp-{os.getpid()}-{secrets.token_hex(6)}.arrow")
    return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp

def stored_digest(batch) -> int:
    return int(batch.schema.metadata[_DIGEST_KEY])


def open_batch(pa, path: str, fingerprint: dict | None):
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


def valid_rows(np, a):
    """Which rows of an Arrow array hold a value, as numpy booleans, from its validity bitmap. (pyarrow's
    to_numpy of a boolean array imports pandas, whose memory the process that merges a first read then keeps.)"""
    if not a.null_count:
        return np.ones(len(a), bool)
    bits = np.unpackbits(np.frombuffer(a.buffers()[0], np.uint8), bitorder="little")
    return bits[a.offset:a.offset + len(a)].astype(bool)


def np_type(a):
    """The numpy dtype of a fixed-width Arrow array."""
    return a.type.to_pandas_dtype()


# -- reading ------------------------------------------------------------------------------------------------

def _digest(arrays, meta: bytes) -> int:
    """The XXH3-64 digest of the metadata and of every byte the reader uses (the logical extent of each buffer,
    in order). XXH3 rather than CRC-32: it reads at memory speed, where zlib.crc32 would take most of a re-open's
    budget."""
    h = xxhash.xxh3_64(meta)
    for a in arrays:
        for view in used_bytes(a):
            h.update(view)
    return h.intdigest()


_READ_CHUNK = 64 << 10  # bytes read at a time: a buffer that stays in the CPU's cache (MB-sized ones read slower)


def _digest_read(path: str, base: int, arrays, meta: bytes) -> int:
    """What _digest says of `arrays`, mapped from the file `path` at address `base`, read from the file instead of
    through the map: the map's pages stay out of the process (its resident memory) until a row is read, which
    for most columns of a viewer's session is never (a digest through the map kept the whole store resident)."""
    import numpy as np

    h = xxhash.xxh3_64(meta)
    chunk = bytearray(_READ_CHUNK)
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        for a in arrays:
            for view in used_bytes(a):
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


def used_bytes(a) -> list:
    import pyarrow as pa

    if a.offset:
        raise StoreError("a sliced column")
    t = a.type
    if pa.types.is_dictionary(t):
        return used_bytes(a.indices) + used_bytes(a.dictionary)
    if pa.types.is_large_list(t):
        offsets = memoryview(a.buffers()[1])[:8 * (len(a) + 1)]
        if len(offsets) != 8 * (len(a) + 1):
            raise StoreError("short offsets")
        return [offsets] + used_bytes(a.values)
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


def mapped_values(a, typecode: str) -> memoryview:
    """A fixed-width Arrow array's values, read in place: a read-only memoryview of `typecode` on the mapped
    file, indexed as fast as an array.array, its pages read in only when a row is (columns.typecode, .writable)."""
    return used_bytes(a)[0].cast(typecode)


def schema_ok(pa, schema) -> bool:
    expect = [NAMES.get(n, n) for n in INT_COLUMNS + STR_COLUMNS + ("shape",) + JSON_COLUMNS] + ["async_op"]
    if schema.names != expect:
        return False
    codes = (pa.uint8(), pa.uint16(), pa.int32())
    for name in STR_COLUMNS + ("shape",):
        t = schema.field(name).type
        if not (pa.types.is_dictionary(t) and t.index_type in codes and t.value_type == pa.string()):
            return False
    return all(schema.field(NAMES.get(n, n)).type == pa.large_string() for n in JSON_COLUMNS)


def read_store(path: str, fingerprint: dict | None = None) -> EventTable:
    """The EventTable in the store file `path`. Raises StoreError when the file is damaged, of another version or
    (`fingerprint` given) made from other inputs, OSError when it cannot be read. The integer columns are copied
    into arrays; the text columns' codes too (a byte an event); the JSON columns stay in the mapped file."""
    import pyarrow as pa

    try:
        batch, meta_b, meta, digest = open_batch(pa, path, fingerprint)
        if not schema_ok(pa, batch.schema):
            raise StoreError("unexpected columns")
        arrays = batch.columns
        if digest(arrays) != stored_digest(batch):
            raise StoreError("checksum mismatch")
        n = batch.num_rows
        if n != meta["events"]:
            raise StoreError("row count mismatch")
        return _table(arrays, meta, n)
    except (pa.ArrowException, OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as e:
        raise StoreError(f"damaged store: {type(e).__name__}: {e}"[:300]) from None


def _extent(col: array) -> tuple[int, int]:
    """(min, max) of a non-empty column, in numpy (Python's min/max loop over every row, each)."""
    import numpy as np

    a = np.frombuffer(col, np.dtype(typecode(col)))
    return int(a.min()), int(a.max())


def _table(arrays, meta: dict, n: int) -> EventTable:
    t = EventTable()
    k = 0
    for name in INT_COLUMNS:
        setattr(t, name, mapped_values(arrays[k], getattr(t, name).typecode))
        k += 1
    for name in STR_COLUMNS + ("shape",):
        a = arrays[k]
        k += 1
        texts = a.dictionary.to_pylist()
        tc = {1: "B", 2: "H", 4: "i"}[a.indices.type.bit_width // 8]
        col = CodedColumn.from_codes([orjson.loads(s) for s in texts] if name == "shape" else texts,
                                     mapped_values(a.indices, tc), json_key if name == "shape" else None)
        if n and _extent(col.codes)[1] >= len(texts):
            raise StoreError("a code past its dictionary")
        setattr(t, name, col)
    for name in JSON_COLUMNS:
        offsets, data = used_bytes(arrays[k])
        k += 1
        setattr(t, name, JsonColumn(offsets.cast("q"), data, n, owner=arrays))
    t.async_op = bytearray(used_bytes(arrays[k])[0])
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


__all__ = ["STORE_VERSION", "StoreError", "read_store", "write_store"]
