"""Named arrays kept beside a trace's store (the analysis, the viewer's lanes): written and read back
under the store's fingerprint, with the same digest check (codec.py)."""

from __future__ import annotations

from array import array

import orjson

from .codec import (BYTES, STORE_VERSION, StoreError, arrow_fixed, mapped_values, open_batch, stored_digest, typecode_of,
                    value_type, write_batch)


def write_arrays(path: str, arrays: dict, meta: dict, fingerprint: dict) -> None:
    """Write named typed arrays (array.array, bytearray, or a memoryview of an array typecode) of any lengths and
    a JSON-able `meta` to the store file `path`: one row, each array a large_list column (its typecode in the
    metadata's "arrays"). What derived results (the analysis, the viewer's lanes) are kept in, beside the events;
    read_arrays reads it back."""
    import pyarrow as pa

    names, cols, codes = [], [], {}
    for name, a in arrays.items():
        cols.append(pa.LargeListArray.from_arrays(arrow_fixed(pa, array("q", [0, len(a)])), arrow_fixed(pa, a)))
        names.append(name)
        codes[name] = typecode_of(a)
    write_batch(pa, path, names, cols, orjson.dumps({"store_version": STORE_VERSION, "fingerprint": fingerprint,
                                                "arrays": codes, "meta": meta}))


def read_arrays(path: str, fingerprint: dict) -> tuple[dict, dict]:
    """(the named arrays, the meta) that write_arrays wrote to `path` from inputs of this `fingerprint`. Raises
    StoreError when the file is damaged, of another version, or stale; OSError when it cannot be read."""
    import pyarrow as pa

    try:
        batch, meta_b, meta, digest = open_batch(pa, path, fingerprint)
        codes = meta.get("arrays")
        if type(codes) is not dict or batch.schema.names != list(codes) or batch.num_rows != 1:
            raise StoreError("unexpected columns")
        for tc, col in zip(codes.values(), batch.columns):
            if col.type != pa.large_list(value_type(pa, tc)) or col.offset or col.values.offset:
                raise StoreError("unexpected columns")
        if digest(batch.columns) != stored_digest(batch):
            raise StoreError("checksum mismatch")
        # read in place, as the event columns are (mapped_values): a re-open's analysis is tens of bytes an event of
        # arrays, which copies kept in the process's own memory (a reader that must change one copies it:
        # columns.writable)
        out = {name: mapped_values(col.values, "B" if tc == BYTES else tc) for (name, tc), col in zip(codes.items(),
                                                                                                batch.columns)}
        return out, meta["meta"]
    except StoreError:
        raise
    except (pa.ArrowException, OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as e:
        raise StoreError(f"damaged store: {type(e).__name__}: {e}"[:300]) from None


__all__ = ["read_arrays", "write_arrays"]
