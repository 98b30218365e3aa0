"""The parts of a first read (a parallel read's shares, a multi-node trace's node stores) merged into one store in
Arrow: groups and dictionaries made one, the rows sorted, no per-event Python object."""

from __future__ import annotations

import os
import tempfile
from dataclasses import fields

import orjson

from ..table import arrow_arrays
from ..table.event_table import INT_COLUMNS, STR_COLUMNS, EventTable, RankInfo
from .codec import (JSON_COLUMNS, NAMES, StoreError, store_meta, np_type, open_batch, schema_ok, used_bytes, valid_rows,
                    write_batch)

def merge_parts(parts: list[str], head: EventTable, path: str, fingerprint: dict, finish,
                whole_stores: bool = False) -> None:
    """Write the store file `path` of the events of the store parts `parts` (the workers' shares of one trace, in
    its order: data/store/parallel.py), in Arrow and numpy: each part's groups and dictionaries mapped onto the whole's
    (in order of first appearance, as one reader makes them), the rows sorted as EventTable.sort sorts them. The
    table-level records go to `head` (the runs and warnings found before the split): the parts' ranks, warnings,
    notes and stacks in order; then finish(head, events, [each part's "part" record]) adds what the reader says
    of the whole, or raises. Raises StoreError on a part that is not one. `whole_stores`: the parts are stores,
    checked valid by the caller (the nodes' own: data/store/node_stores.py), with no "part" record (None)."""
    import numpy as np
    import pyarrow as pa

    batches, records = [], []
    for p in parts:
        batch, _, meta, _ = open_batch(pa, p, None)  # (no digest: the workers' files, just written, never kept)
        if not schema_ok(pa, batch.schema) or (type(meta.get("part")) is not dict and not whole_stores):
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
        keys[name] = np.concatenate([np.frombuffer(used_bytes(a)[0], np_type(a)) for a in column(name)])
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
        for name in INT_COLUMNS:
            file_name = NAMES.get(name, name)
            if name == "gid":  # each part's group indexes, as the whole's
                values = [g[np.frombuffer(used_bytes(a)[0], np.int32)] for g, a in zip(group_of, column(name))]
            elif name in keys:
                values = keys[name]
            else:
                values = [np.frombuffer(used_bytes(a)[0], np_type(a)) for a in column(file_name)]
            out_names.append(file_name)
            arrays.append(fixed(values, np.dtype(np_type(batches[0].column(file_name)) if batches else np.int64)))
        for name in STR_COLUMNS + ("shape",):
            index: dict = {}  # value -> its code in the whole, in order of first appearance
            codes = []
            for a in column(name):
                mapping = np.array([index.setdefault(v, len(index)) for v in a.dictionary.to_pylist()] or [0],
                                   np.int64)
                codes.append(mapping[np.frombuffer(used_bytes(a.indices)[0], np_type(a.indices))])
            values = list(index)
            code_type = np.uint8 if len(values) <= 1 << 8 else np.uint16 if len(values) <= 1 << 16 else np.int32
            merged = np.concatenate(codes).astype(code_type) if codes else np.zeros(0, code_type)
            out_names.append(name)
            arrays.append(pa.DictionaryArray.from_arrays(fixed(merged, np.dtype(code_type)),
                                                         arrow_arrays.strings(pa, values)))
        for name in JSON_COLUMNS:
            file_name = NAMES.get(name, name)
            out_names.append(file_name)
            arrays.append(_joined_texts(pa, np, column(file_name), order, n, scratch))
        out_names.append("async_op")
        arrays.append(fixed([np.frombuffer(used_bytes(a)[0], np.uint8) for a in column("async_op")],
                            np.dtype(np.uint8)))
        meta = store_meta(head, fingerprint)
        meta["events"] = n
        write_batch(pa, path, out_names, arrays, orjson.dumps(meta))
    finally:
        del arrays
        scratch.close()


class _Scratch:
    """The merged columns, built in unlinked temp files beside the store and mapped, not in the process's memory:
    their pages are the page cache's, which the kernel writes back and reclaims when memory runs short: the
    merge holds only the sort keys and one column's copy at a time, where the columns built in memory held more
    than a 4 GB machine has at 10M events (docs/PERFORMANCE.md). The price is disk: about the store's size again
    while it is written."""

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
        lengths.append(np.diff(np.frombuffer(used_bytes(a)[0], np.int64)))
        valid.append(valid_rows(np, a))
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
            used = used_bytes(a)
            data[offsets[row]:offsets[row + len(a)]] = np.frombuffer(used[1], np.uint8)
            row += len(a)

    whole = texts(lengths, valid, joined)
    if order is None:
        return whole

    def taken(offsets, data) -> None:
        for a in range(0, n, _TAKE_ROWS):
            b = min(a + _TAKE_ROWS, n)
            piece = pc.take(whole, arrow_arrays.numbers(pa, order[a:b]))
            used = used_bytes(piece)
            data[offsets[a]:offsets[b]] = np.frombuffer(used[1], np.uint8)

    return texts(lengths[order], valid[order], taken)


__all__ = ["merge_parts"]
