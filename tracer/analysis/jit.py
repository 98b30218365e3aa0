"""Loops that no array operation expresses (a walk, a chain followed back), compiled by numba for large traces.

Such a loop is written once, as one function over integer columns in the Python that numba compiles (no helpers:
compiled code calls only compiled functions, and closures are not cached), and `run` calls it compiled from
JIT_FROM events on, else as Python: numba compiles a function once (seconds, then cached beside its module or in
the user's cache) and loads it in ~1 s, longer than a small trace's whole loop. DISTTRACE_JIT=0 never compiles,
=1 always does (the tests compare both ways). Without numba (a platform without its wheels) the same function runs
as Python."""

from __future__ import annotations

import os

import numpy as np

JIT_FROM = 50_000  # events from which a loop is compiled
_compiled: dict = {}


def run(fn, n_events: int, *args):
    """fn(*args), compiled when the trace (n_events) is large and numba is there."""
    want = os.environ.get("DISTTRACE_JIT")
    if want == "0" or (want != "1" and n_events < JIT_FROM):
        return fn(*args)
    compiled = _compiled.get(fn)
    if compiled is None:
        try:
            from numba import njit
        except ImportError:
            compiled = fn
        else:
            compiled = njit(cache=True, nogil=True)(fn)
        _compiled[fn] = compiled
    return compiled(*map(_read_only, args))


def _read_only(a):
    """Every column read-only: numba compiles a function once per argument types, and a column of a table opened
    from the store is read-only (mapped) where one just parsed is not."""
    if isinstance(a, np.ndarray) and a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


__all__ = ["JIT_FROM", "run"]
