"""Memory while millions of objects are made and dropped: the collector paused, freed heap pages given back."""

from __future__ import annotations

import gc


class gc_paused:
    """Pause the cyclic garbage collector while millions of acyclic objects are made: left on, it walks
    everything alive again and again as the allocations pile up (the reading then takes several times longer)."""

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            gc.enable()
        return False


def give_back_freed_memory() -> None:
    """Return the heap pages that freed objects held to the system. C's allocator keeps freed memory for reuse, so
    a process that made and dropped millions of objects (a parse, an analysis) keeps its peak resident: a viewer
    that read a large trace with summaries and opened the store it wrote kept hundreds of MB it no longer used. glibc's
    malloc_trim; elsewhere (macOS, musl) the allocator decides."""
    import ctypes
    import sys

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    if "pyarrow" in sys.modules:  # Arrow's own allocator (mimalloc, jemalloc) keeps what it freed too
        pool = sys.modules["pyarrow"].default_memory_pool()
        if hasattr(pool, "release_unused"):
            pool.release_unused()
