"""The trace store: an EventTable on disk as an Arrow IPC file beside the trace (codec.py), named arrays beside it
(arrays.py), parts merged into one (merge.py), the cache policy (cache.py), the parallel first read (parallel.py),
the viewer's head of a large trace (head.py) and the store of several nodes' dirs (node_stores.py).

Above the importers (a first read parses the trace through them) and the table. The names the rest of disttrace
uses are these; commands/ and tui/ reach them through load.py.
"""

from .arrays import read_arrays, write_arrays
from .cache import (CACHE_DIR, ENV, FILE_SUFFIX, RACY_NS, PartsFailed, StoreOrigin, cache_path, cached_load, enabled,
                    fingerprint, source_digest)
from .codec import STORE_VERSION, StoreError, read_store, write_store
from .merge import merge_parts

__all__ = ["CACHE_DIR", "ENV", "FILE_SUFFIX", "RACY_NS", "STORE_VERSION", "PartsFailed", "StoreError", "StoreOrigin",
           "cache_path", "cached_load", "enabled", "fingerprint", "merge_parts", "read_arrays", "read_store",
           "source_digest", "write_arrays", "write_store"]
