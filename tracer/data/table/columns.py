"""Compact columns for the EventTable's text and object fields, read like lists (`col[i]`, `len`, iteration).

A million events hold a few dozen distinct sites, apis, dtypes and shapes: a list would spend a pointer per row
and, for shapes, a list object per row; `CodedColumn` keeps each distinct value once and a 1-byte
code per row (widened to 2 or 4 bytes when the values outgrow it). Summaries, errors and unknown keys are
absent from most events: `SparseColumn` keeps only the rows that have one.
"""

from __future__ import annotations

from array import array
from itertools import accumulate, compress, repeat
from operator import is_
from typing import Any, Callable, Iterable, Iterator

import orjson

from . import arrow_arrays

_WIDER = {"B": "H", "H": "i"}                         # the codes' typecode when they outgrow theirs
_LIMIT = {"B": 1 << 8, "H": 1 << 16, "i": 1 << 31}    # the number of values codes of a typecode can say


#: The dictionary key of a JSON value: its encoding (lists are not hashable, and 1 == 1.0 == True).
json_key = orjson.dumps


class CodedColumn:
    """Dictionary-encoded values: `codes[i]` indexes `values`. Values are shared between rows: never mutate one."""

    __slots__ = ("codes", "values", "_index", "_key", "_limit")

    def __init__(self, values: Iterable = (), key: Callable[[Any], Any] | None = None):
        self.codes = array("B")
        self._limit = _LIMIT["B"]
        self.values: list = []
        self._index: dict = {}
        self._key = key  # None: the values are hashable and compare exactly (strings)
        self.extend(values)

    @classmethod
    def from_codes(cls, values: list, codes, key: Callable[[Any], Any] | None = None) -> "CodedColumn":
        """A column of these distinct `values` and rows `codes` (an integer column of typecode B, H or i; each
        code < len(values), the caller's to check), as stored (data/store/)."""
        out = cls(key=key)
        out.values = values
        out._index = {(v if key is None else out._safe_key(v)): i for i, v in enumerate(values)}
        out.codes, out._limit = codes, _LIMIT[typecode(codes)]
        return out

    def _add(self, k, v) -> int:
        code = self._index[k] = len(self.values)
        self.values.append(v)
        if code >= self._limit:  # one value more than the codes can say: widen them
            tc = _WIDER[typecode(self.codes)]
            self._limit = _LIMIT[tc]
            self.codes = array(tc, self.codes)
        return code

    def append(self, v) -> None:
        self.codes = writable(self.codes)
        k = v if self._key is None else self._safe_key(v)
        code = self._index.get(k)
        if code is None:
            code = self._add(k, v)
        self.codes.append(code)

    def extend(self, vs: Iterable) -> None:
        self.codes = writable(self.codes)
        vs = vs if isinstance(vs, list) else list(vs)
        keys = vs if self._key is None else self._keys(vs)
        codes = list(map(self._index.get, keys))  # C speed for the common case: every value seen before
        if None in codes:
            # the values not seen before, each added once in the order of its first row with that row's value,
            # then every row mapped again: passes at C speed (a new column's rows are all new, and a loop over
            # them is far slower)
            new = list(map(is_, codes, repeat(None)))
            new_keys, new_vs = list(compress(keys, new)), list(compress(vs, new))
            first_v = dict(zip(reversed(new_keys), reversed(new_vs)))
            for k in dict.fromkeys(new_keys):
                self._add(k, first_v[k])
            codes = list(map(self._index.get, keys))
        self.codes.extend(codes)  # after the adds: _add may have replaced self.codes with wider ones

    def _keys(self, vs: list) -> list:
        try:
            return list(map(self._key, vs))
        except (TypeError, ValueError):  # a value the key cannot encode (nested too deeply): stored on its own
            return [self._safe_key(v) for v in vs]

    def _safe_key(self, v):
        try:
            return self._key(v)
        except (TypeError, ValueError):
            return ("unencodable", id(v))  # unique while the column holds v

    def truncate(self, n: int) -> None:
        """Keep the first n rows."""
        self.codes = writable(self.codes)
        del self.codes[n:]

    def take(self, order) -> "CodedColumn":
        """The rows in `order` (a permutation, a numpy array), as a new column sharing the values."""
        out = CodedColumn(key=self._key)
        out.values, out._index, out._limit = self.values, self._index, self._limit
        out.codes = permuted(self.codes, order)
        return out

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(map(self.values.__getitem__, self.codes[i]))
        return self.values[self.codes[i]]

    def __len__(self) -> int:
        return len(self.codes)

    def __iter__(self):
        return map(self.values.__getitem__, self.codes)


class SparseColumn:
    """Values that most rows lack (None): kept by row number."""

    __slots__ = ("_values", "_n")

    def __init__(self, values: Iterable = ()):
        self._values: dict[int, Any] = {}
        self._n = 0
        self.extend(values)

    def append(self, v) -> None:
        if v is not None:
            self._values[self._n] = v
        self._n += 1

    def extend(self, vs: Iterable) -> None:
        vs = vs if isinstance(vs, list) else list(vs)
        n0 = self._n
        self._n += len(vs)
        if vs.count(None) != len(vs):  # C-speed test for the common case: nothing to keep
            self._values.update((n0 + k, v) for k, v in enumerate(vs) if v is not None)

    def truncate(self, n: int) -> None:
        """Keep the first n rows."""
        self._n = min(self._n, n)
        if self._values:
            self._values = {k: v for k, v in self._values.items() if k < n}

    def take(self, order) -> "SparseColumn":
        """The rows in `order` (a permutation, a numpy array): only the rows with a value are moved."""
        out = SparseColumn()
        out._n = self._n
        if self._values:
            out._values = _moved(self._values, order)
        return out

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("row out of range")
        return self._row(i)

    def _row(self, i: int):
        return self._values.get(i)

    def __len__(self) -> int:
        return self._n

    def __iter__(self):
        if not self._values:
            return repeat(None, self._n)
        return map(self._values.get, range(self._n))

    def any(self) -> bool:
        """Whether any row has a value."""
        return bool(self._values)

    def items(self, maybe=None, rows=None) -> Iterator[tuple[int, Any]]:
        """(row, value) of the rows that have a value, in row order; of `rows` only, where given (rows_with's).
        `maybe`: a regular expression over a value's JSON text, or a scan of it (JsonColumn.rows_with), that finds
        every value the caller looks for (and may find others: the caller checks each value it gets); a column
        read from the store decodes only the rows where it finds something."""
        if rows is None:
            return iter(self._values.items())  # (kept in row order: rows are added in order, `take` keeps it)
        return ((i, self._values[i]) for i in rows.tolist() if i in self._values)

    def rows_with(self, maybe=None):
        """The rows that have a value (a numpy array, ascending); all of them, whatever `maybe` (items)."""
        import numpy as np

        return np.fromiter(self._values, np.int64, len(self._values))


class JsonColumn(SparseColumn):
    """Values kept as their JSON text, decoded when a row is read and never kept: row i's text is
    `data[offsets[i]:offsets[i + 1]]`, empty for a row without a value. The tensor summaries (in, out): as dicts
    they took several times their text, and a parse's millions of them fragmented the heap for good; as text, in
    one buffer, and the store writes them as they are. Read from the store, `offsets` and `data` are the mapped
    file (read-only: copied if rows are added). A value orjson cannot write (nested past its depth) is kept as it
    is, by row, in `_values`."""

    __slots__ = ("_offsets", "_data", "_owner")

    def __init__(self, offsets=None, data=None, n: int = 0, owner=None):
        self._offsets = offsets if offsets is not None else array("q", [0])
        self._data = data if data is not None else bytearray()
        super().__init__()
        self._n, self._owner = n, owner  # owner: keeps the mapped buffers

    def _row(self, i: int):
        if self._values and i in self._values:
            return self._values[i]
        a, b = self._offsets[i], self._offsets[i + 1]
        return orjson.loads(self._data[a:b]) if b > a else None

    def append(self, v) -> None:
        self.extend([v])

    def extend(self, vs: Iterable) -> None:
        """Add rows of these values (None: no value), or of these JSON texts (a JsonTexts)."""
        vs = vs if isinstance(vs, (list, JsonTexts)) else list(vs)
        if not len(vs):
            return
        if type(self._offsets) is not array:  # mapped from the store: copied to grow
            self._offsets, self._data = copy_of(self._offsets), bytearray(self._data)
        if type(vs) is JsonTexts:
            self._offsets.extend(accumulate(vs.lens, initial=self._offsets[-1]))
            self._offsets.pop(len(self._offsets) - len(vs.lens) - 1)
            self._data += b"".join(vs.texts)
            self._n += len(vs.lens)
            return
        n0, end = self._n, self._offsets[-1]
        self._n += len(vs)
        if vs.count(None) == len(vs):  # C-speed test for the common case: nothing to keep
            self._offsets.extend(repeat(end, len(vs)))
            return
        dumps = orjson.dumps
        try:
            texts = [b"" if v is None else dumps(v) for v in vs]
        except (TypeError, orjson.JSONEncodeError):
            texts = []
            for k, v in enumerate(vs):
                try:
                    texts.append(b"" if v is None else dumps(v))
                except (TypeError, orjson.JSONEncodeError):
                    texts.append(b"")
                    self._values[n0 + k] = v
        self._offsets.extend(accumulate(map(len, texts), initial=end))
        self._offsets.pop(len(self._offsets) - len(texts) - 1)  # (accumulate yields `end` first: it was there)
        self._data += b"".join(texts)

    def __iter__(self):
        row = self._row
        return map(row, range(self._n))

    def truncate(self, n: int) -> None:
        """Keep the first n rows."""
        if n >= self._n:
            return
        super().truncate(n)
        self._offsets, self._data = copy_of(self._offsets), bytearray(self._data[:self._offsets[n]])
        del self._offsets[n + 1:]

    def take(self, order) -> "JsonColumn":
        """The rows in `order` (a permutation, a numpy array): their texts copied in that order."""
        import numpy as np
        import pyarrow as pa

        # Arrow's take over the texts as one binary array (the buffers as they are, no copy): a row's slice
        # taken in Python is a Python call per row, and every trace dir's read sorts its rank files' rows
        n = self._n
        texts = pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [
            None, pa.py_buffer(np.frombuffer(self._offsets, np.int64)[:n + 1]), pa.py_buffer(self._data)])
        taken = texts.take(arrow_arrays.numbers(pa, np.asarray(order, np.int64)))
        _, off_buf, data_buf = taken.buffers()
        offsets = array("q")
        offsets.frombytes(memoryview(off_buf)[:8 * (n + 1)])
        data = bytearray(memoryview(data_buf)[:offsets[n]]) if data_buf is not None else bytearray()
        out = JsonColumn(offsets, data, n)
        if self._values:
            out._values = _moved(self._values, order)
        return out

    def any(self) -> bool:
        return bool(self._values) or self._offsets[self._n] > self._offsets[0]

    def texts(self):
        """(offsets, data): row i's JSON text is data[offsets[i] - offsets[0]:offsets[i + 1] - offsets[0]]; None if
        some value is kept apart (not writable as JSON). What the store writes."""
        if self._values:
            return None
        return self._offsets, memoryview(self._data)[self._offsets[0]:self._offsets[self._n]]

    def items(self, maybe=None, rows=None) -> Iterator[tuple[int, Any]]:
        """(row, value) of the rows that have a value, in row order; of those `rows_with(maybe)` finds, or of
        `rows` (rows_with's, found earlier)."""
        off, data, loads = self._offsets, self._data, orjson.loads
        for i in (self.rows_with(maybe) if rows is None else rows).tolist():
            yield i, self._values[i] if i in self._values else loads(data[off[i]:off[i + 1]])

    def rows_with(self, maybe=None):
        """The rows (a numpy array, ascending) that have a value; with `maybe`, those whose JSON text holds a match
        of it, found in the whole text without decoding a row: a regular expression (its matches), or a scan
        (a function of the text as a numpy uint8 array -> where its matches are). A value kept apart is always
        one of them."""
        import numpy as np

        starts = np.frombuffer(self._offsets, np.int64)[:self._n + 1]
        if maybe is None:
            rows = np.flatnonzero(starts[1:] > starts[:-1])
        elif callable(maybe):  # (a scan: compiled, it may run without the GIL)
            lo, hi = int(starts[0]), int(starts[-1])
            at = maybe(np.frombuffer(self._data, np.uint8)[lo:hi]) + lo
            rows = np.unique(np.searchsorted(starts, at, side="right") - 1)
        else:  # the rows holding a match: one regex pass over the whole text, no row decoded for it, a few MB at a
            # time (a match is inside a row; one pass over a large trace's summaries would hold the GIL: a frozen UI)
            cuts = starts[::_SCAN_ROWS].tolist() + [int(starts[-1])]
            at = np.fromiter((m.start() for lo, hi in zip(cuts, cuts[1:]) for m in maybe.finditer(self._data, lo, hi)),
                             np.int64)
            rows = np.unique(np.searchsorted(starts, at, side="right") - 1)
        if self._values:
            rows = np.union1d(rows, np.fromiter(self._values, np.int64))
        return rows


_SCAN_ROWS = 1 << 12  # rows of JSON text a regex scans between two chances for other threads to run


class JsonTexts:
    """Rows given to JsonColumn.extend as their JSON texts, as they were in the input (bytes-like; b"": no value),
    with their lengths."""

    __slots__ = ("texts", "lens")

    def __init__(self, texts: list, lens: list[int]):
        self.texts, self.lens = texts, lens

    def __len__(self) -> int:
        return len(self.lens)


def typecode(col) -> str:
    """An integer column's typecode ("q", "i", "H", "B"): an array.array's, or the format of a memoryview (a column
    mapped from the trace store, read-only: data/store/)."""
    return col.typecode if type(col) is array else col.format


def writable(col):
    """An integer column that can grow: itself, or a mapped one's copy (rows appended to a table opened from the
    store)."""
    return col if type(col) is array else copy_of(col)


# Rows per call of a C loop over a whole column (tolist, fromiter, np.repeat, a copy into an array.array) in the
# analysis: such a call holds the GIL throughout (most numpy operations let it go; these do not), and one over a
# whole column takes a key's whole budget in the viewer, whose UI thread waits for it. A slice of 64k rows is short,
# and the GIL can change hands between slices.
GIL_ROWS = 1 << 16


def copy_of(col) -> array:
    """An integer column's copy, as an array.array of its typecode (memcpy, GIL_ROWS rows at a time)."""
    out = array(typecode(col))
    raw = memoryview(col).cast("B")
    step = GIL_ROWS * out.itemsize
    for k in range(0, len(raw), step):
        out.frombytes(raw[k:k + step])
    return out


def filled(tc: str, n: int, value=0) -> array:
    """array(tc, [value]) * n, GIL_ROWS rows at a time (the one call holds the GIL throughout)."""
    chunk = array(tc, [value]) * min(n, GIL_ROWS)
    out = array(tc)
    for k in range(0, n - GIL_ROWS + 1, GIL_ROWS):
        out += chunk
    out += chunk[:n - len(out)]
    return out


def from_numpy(values, tc: str = "q") -> array:
    """A numpy integer column as an array.array of typecode `tc` (bisect and indexing at C speed, Python ints
    out)."""
    return extend_from_numpy(array(tc), values)


def extend_from_numpy(out: array, values) -> array:
    """out with a numpy integer column's values appended, converted to its typecode, GIL_ROWS rows at a time
    (tobytes and frombytes hold the GIL). Returns out."""
    import numpy as np

    values = np.asarray(values)
    dtype = np.dtype(out.typecode)
    for k in range(0, len(values), GIL_ROWS):
        out.frombytes(memoryview(np.ascontiguousarray(values[k:k + GIL_ROWS], dtype)).cast("B"))
    return out


def as_int64(col):
    """An integer column (an array.array, a coded column's codes, a mapped column, a bytearray) as a numpy int64
    copy: columns of several typecodes compared or combined."""
    import numpy as np

    return np.asarray(col).astype(np.int64)


def to_list(a) -> list:
    """a.tolist() for a 1-D numpy column, a slice (GIL_ROWS) at a time."""
    if len(a) <= GIL_ROWS:
        return a.tolist()
    out: list = []
    for k in range(0, len(a), GIL_ROWS):
        out += a[k:k + GIL_ROWS].tolist()
    return out


def release(items: list) -> None:
    """Empty a list GIL_ROWS items at a time, from its end: freeing millions of objects at once is one C loop under
    the GIL (a large trace's instances' rows, a list of lists)."""
    while items:
        del items[-GIL_ROWS:]


def repeat_each(values, counts):
    """np.repeat(values, counts) for a numpy column and its counts. np.repeat holds the GIL (over all the rows
    out), so past GIL_ROWS rows out the output is filled in slices of about GIL_ROWS rows, and a value repeated more
    (a running maximum's few long segments) by a fill, which lets the GIL go; no more memory than the output's."""
    import numpy as np

    counts = np.asarray(counts)
    ends = np.cumsum(counts)
    total = int(ends[-1]) if len(ends) else 0
    if total <= GIL_ROWS:
        return np.repeat(values, counts)
    values = np.asarray(values)
    out = np.empty(total, values.dtype)
    long = np.flatnonzero(counts > GIL_ROWS)
    cuts = np.unique(np.concatenate(([0, len(counts)], np.searchsorted(ends, np.arange(GIL_ROWS, total, GIL_ROWS)),
                                     long, long + 1)))
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        lo, hi = int(ends[a] - counts[a]), int(ends[b - 1])
        out[lo:hi] = values[a] if b - a == 1 and counts[a] > GIL_ROWS else np.repeat(values[a:b], counts[a:b])
    return out


def running_count(mask):
    """np.cumsum of a numpy boolean column, as int64: how many are set up to each row. np.cumsum casts the
    booleans as it goes and holds the GIL meanwhile, so it runs on slices of 4 GIL_ROWS rows,
    each carried on from the last (a copy of the column as int64 first let it go, but cost 8 bytes a row more)."""
    import numpy as np

    out = np.empty(len(mask), np.int64)
    step = GIL_ROWS * 4
    for k in range(0, len(mask), step):
        part = out[k:k + step]
        np.cumsum(mask[k:k + step], dtype=np.int64, out=part)
        if k:
            part += out[k - 1]
    return out


def unique_inverse(keys):
    """np.unique(keys, return_inverse=True) for a numpy integer column: (its distinct values ascending, each row's
    index among them). That holds the GIL for long stretches; small non-negative keys (ranks)
    are counted instead (np.bincount, which lets it go)."""
    import numpy as np

    if _countable(keys):
        present = np.bincount(keys) > 0
        return np.flatnonzero(present).astype(keys.dtype), (running_count(present) - 1)[keys]
    return np.unique(keys, return_inverse=True)


def distinct(keys):
    """np.unique(keys): the distinct values of a numpy integer column, ascending; small non-negative keys (ranks)
    counted (np.bincount), not sorted (np.unique holds the GIL through its sort)."""
    import numpy as np

    if _countable(keys):
        return np.flatnonzero(np.bincount(keys)).astype(keys.dtype)
    return np.unique(keys)


def _countable(keys) -> bool:
    """Whether an integer column's values are small and non-negative enough to be counted by np.bincount."""
    return bool(len(keys)) and 0 <= int(keys.min()) and int(keys.max()) < 1 << 24


def link_in(src, dst, pairs) -> "object":
    """Per row, whether (src, dst) (numpy integer columns, non-negative) is one of `pairs`: as one integer key each,
    in numpy (a Python test of each pair holds the GIL over all of a large trace's messages)."""
    import numpy as np

    if not pairs or not len(src):
        return np.zeros(len(src), bool)
    w = max(int(src.max()), int(dst.max()), max(max(p) for p in pairs)) + 1
    return np.isin(src.astype(np.int64) * w + dst, np.array(sorted(a * w + b for a, b in pairs), np.int64))


def stable_order(keys):
    """np.argsort(keys, kind="stable") of an integer column, as a radix sort where its values span under 2^16 (the
    ranks: faster than numpy's merge sort, which it picks for wider types)."""
    import numpy as np

    if len(keys) > 1 and keys.dtype.kind in "iu":
        lo = int(keys.min())
        if int(keys.max()) - lo < 1 << 16:
            return np.argsort((keys - lo).astype(np.uint16) if lo else keys.astype(np.uint16), kind="stable")
    return np.argsort(keys, kind="stable")


def run_starts(*keys):
    """Whether each row starts a run of equal keys (numpy columns of one length, in the order given): True at the
    first row and wherever any key differs from the row before; np.flatnonzero of it: each run's first row."""
    import numpy as np

    new = np.zeros(len(keys[0]), bool)
    new[:1] = True
    for k in keys:
        new[1:] |= k[1:] != k[:-1]
    return new


def groups_of(keys):
    """(key, the indexes of its rows in order) for each distinct value of `keys` (a numpy integer column), keys
    ascending: one stable sort, in numpy."""
    import numpy as np

    order = stable_order(keys)
    for part in np.split(order, np.flatnonzero(np.diff(keys[order])) + 1) if len(order) else ():
        yield int(keys[part[0]]), part


_PACK_FROM = 1 << 15  # rows from which order_by packs its keys (below, packing costs more than it saves)


def order_by(*keys):
    """The order of rows by `keys` (numpy columns, the first most significant), equal rows in table order: what
    np.lexsort(keys[::-1]) gives, faster. Integer keys are packed into one int64: all of them and the row's index
    where they fit together, and then one sort of it (np.argsort's introsort: no two rows alike, so stable without
    being asked; faster than np.lexsort on many rows); else the leading keys that fit, sorted so, and the rows
    alike in them (seldom many) put in order by the others with np.lexsort. Few rows: np.lexsort."""
    import numpy as np

    n = len(keys[0])
    if n < _PACK_FROM or not all(k.dtype.kind in "ib" or (k.dtype.kind == "u" and k.dtype.itemsize < 8)
                                 for k in keys):
        return np.lexsort(keys[::-1])
    packed, m, total = _pack(keys)
    if not m:
        return np.lexsort(keys[::-1])
    if m == len(keys) and total * n < 1 << 62:
        packed *= n
        packed += np.arange(n, dtype=np.int64)
        return np.argsort(packed)
    order = np.argsort(packed)
    ranked = packed[order]
    alike = ranked[1:] == ranked[:-1]
    if alike.any():  # (and rows alike in every key must keep their table order, which introsort may not)
        tied = np.zeros(n, bool)
        tied[1:] = alike
        tied[:-1] |= alike
        at = np.flatnonzero(tied)  # places in the sorted order; a run of alike rows is a run of places
        run = np.cumsum(~np.concatenate(([False], alike))[at])
        rows = order[at]
        order[at] = rows[np.lexsort((rows, *(k[rows] for k in reversed(keys[m:])), run))]
    return order


def _pack(keys):
    """The longest leading run of integer `keys` (numpy columns, not empty) whose ranges' product fits in int64,
    packed into one int64 column that sorts as they do together, the first most significant: (that column, how
    many keys it holds, their ranges' product); (None, 0, 1) where not even the first fits."""
    import numpy as np

    bounds, total = [], 1
    for k in keys:
        lo = int(k.min())
        span = int(k.max()) - lo + 1
        if total * span >= 1 << 62:
            break
        bounds.append((lo, span))
        total *= span
    if not bounds:
        return None, 0, 1
    packed = keys[0].astype(np.int64) - bounds[0][0]
    for k, (lo, span) in zip(keys[1:], bounds[1:]):
        packed *= span
        packed += k.astype(np.int64) - lo
    return packed, len(bounds), total


def packed_keys(keys: list) -> list:
    """Integer key columns (numpy) as one column that sorts as they do together, the first most significant, where
    their ranges' product fits in int64 (else as they are): np.lexsort's time grows with its number of keys."""
    if len(keys) < 2 or not len(keys[0]):
        return keys
    packed, m, _ = _pack(keys)
    return [packed] if m == len(keys) else keys


def dense_ids(*columns) -> "object":
    """Each row's key (its values in the integer columns) as the number of distinct keys seen before the key's
    first row (a small int that compares as the key does for equality), in numpy."""
    import numpy as np

    cols = packed_keys([as_int64(c) for c in columns])
    n = len(cols[0])
    order = order_by(*cols)  # (stable: the first row of equal keys comes first)
    new = run_starts(*(c[order] for c in cols))
    first = order[new]
    number = np.empty(len(first), np.int64)
    number[np.argsort(first)] = np.arange(len(first))
    out = np.empty(n, np.int64)
    out[order] = number[running_count(new) - 1]
    return out


def running_max_by(values, starts):
    """The running maximum of `values` (a numpy int64 column) starting again at each index in `starts` (each
    segment's first, ascending, from 0). One pass over every segment at once: each segment's values are lifted
    by just enough to lie above all the earlier ones', so that the running maximum never carries across a
    segment; where those lifts could overflow (values spanning much of int64), by doubling (log2 of the longest
    segment's passes)."""
    import numpy as np

    n = len(values)
    if not n:
        return np.zeros(0, np.int64)
    starts = np.asarray(starts, np.int64)
    lengths = np.diff(np.append(starts, n))
    lo_seg, hi_seg = np.minimum.reduceat(values, starts), np.maximum.reduceat(values, starts)
    lo, hi = int(lo_seg.min()), int(hi_seg.max())
    climb = np.maximum(hi_seg[:-1].astype(float) - lo_seg[1:].astype(float), 0)  # (float: no overflow to check)
    if hi - lo + float(climb.sum()) < 2.0**61:
        lift = repeat_each(np.concatenate(([0], np.cumsum(np.maximum(hi_seg[:-1] - lo_seg[1:], 0)))), lengths)
        out = values - lo
        out += lift
        running_max(out)
        out -= lift
        out += lo
        return out
    group = np.repeat(np.arange(len(starts)), lengths)
    out = np.array(values, dtype=np.int64)
    step, longest = 1, int(lengths.max())
    while step < longest:
        same = group[step:] == group[:-step]
        np.maximum(out[step:], np.where(same, out[:-step], np.iinfo(np.int64).min), out=out[step:])
        step <<= 1
    return out


def running_max(values) -> None:
    """np.maximum.accumulate(values, out=values) for a numpy column, GIL_ROWS rows at a time, each slice's first
    value raised to the maximum before it (a ufunc's accumulate holds the GIL throughout)."""
    import numpy as np

    for k in range(0, len(values), GIL_ROWS):
        part = values[k:k + GIL_ROWS]
        if k:
            part[0] = max(part[0], values[k - 1])
        np.maximum.accumulate(part, out=part)


def permuted(col, order) -> array:
    """The integer column `col` with its rows in `order` (a permutation, a numpy array), in numpy."""
    import numpy as np

    tc = typecode(col)
    out = array(tc)
    out.frombytes(np.frombuffer(col, dtype=tc)[order].tobytes())
    return out


def _moved(values: dict, order) -> dict:
    """Sparse values {row: value} after the rows are permuted by `order` (row k of the result is row order[k]),
    in row order."""
    import numpy as np

    where = np.empty(len(order), dtype=np.int64)
    where[order] = np.arange(len(order))  # the inverse permutation: row i goes to where[i]
    old = np.fromiter(values.keys(), dtype=np.int64, count=len(values))
    new = where[old]
    by_new = np.argsort(new, kind="stable")
    items = list(values.values())
    return dict(zip(new[by_new].tolist(), map(items.__getitem__, by_new.tolist())))

