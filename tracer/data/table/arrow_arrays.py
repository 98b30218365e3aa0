"""Arrow arrays built over buffers, never by `pa.array`: pyarrow (26) imports pandas at its first `pa.array` call
where pandas is installed, a cost to every read of a trace (and to the end of `disttrace run`) for nothing
disttrace uses. pyarrow is passed in, as the store (data/store/) imports it on first use."""

from __future__ import annotations


def numbers(pa, values) -> "object":
    """A 1-D numpy array of fixed-width numbers as an Arrow array over its bytes (a copy only if not contiguous)."""
    import numpy as np

    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def strings(pa, values: list) -> "object":
    """Python strings as an Arrow string array."""
    import numpy as np

    data = [v.encode() for v in values]
    offsets = np.zeros(len(data) + 1, np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])
