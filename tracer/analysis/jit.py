"""Loops that no array operation expresses (a walk, a chain followed back), compiled by numba for large traces.

Such a loop is written once, as one function over integer columns in the Python that numba compiles (no helpers:
compiled code calls only compiled functions, and closures are not cached), and `run` calls it compiled from
JIT_FROM events on, else as Python: numba compiles a function once (seconds, then cached beside its module or in
the user's cache) and loads it in ~0.02 s, after its own start (~0.5 s: its import and its compiler's first load),
longer than a small trace's whole loop. `warm` starts that in a thread as an analysis begins, beside its first
stages. DISTTRACE_JIT=0 never compiles, =1 always does (the tests compare both ways). Without numba (a platform
without its wheels) the same function runs as Python."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

JIT_FROM = 50_000  # events from which a loop is compiled
_compiled: dict = {}
_lock = threading.Lock()  # held while numba starts: once, whichever thread asks first
_njit = None  # numba.njit once started; False: numba is not there


def wanted(n_events: int) -> bool:
    """Whether a trace of n_events has its loops compiled."""
    want = os.environ.get("DISTTRACE_JIT")
    return want == "1" or (want != "0" and n_events >= JIT_FROM)


def warm(n_events: int) -> None:
    """Start numba in a thread (daemon: nothing waits for it but `run`), for an analysis of n_events that will
    call compiled loops."""
    if wanted(n_events) and _njit is None:
        threading.Thread(target=_start, name="disttrace-jit-start", daemon=True).start()


def run(fn, n_events: int, *args):
    """fn(*args), compiled when the trace (n_events) is large and numba is there."""
    if not wanted(n_events):
        return fn(*args)
    compiled = _compiled.get(fn)
    if compiled is None:
        njit = _start()
        compiled = _compiled[fn] = njit(cache=True, nogil=True)(fn) if njit else fn
    return compiled(*map(_read_only, args))


def run_in_room(fn, n_events: int, room, *args, grow: int = 2):
    """fn(*args, room) as `run` calls it, for a loop whose arrays never grow (numba keeps an array a loop may
    replace alive by atomic reference counts at every turn: walks.py). `room` (a list of ints) sizes its arrays;
    fn returns (-1, *out), or (k, ...) where room[k] was too little: it runs again with `grow` times room[k]."""
    room = np.array(room, np.int64)
    while True:
        full, *out = run(fn, n_events, *args, room)
        if full < 0:
            return tuple(out)
        room[full] *= grow


def _first(a):
    return a[0]


def _start():
    """numba.njit, started: imported and its compiler loaded, by loading a trivial function from its cache (the
    loops then load in ~0.02 s each). False without numba."""
    global _njit
    with _lock:
        if _njit is None:
            try:
                with _without_scipy():
                    from numba import njit

                    njit(cache=True, nogil=True)(_first)(np.zeros(1, np.int64))
            except ImportError:
                njit = False
            _njit = njit
    return _njit


class _without_scipy:
    """numba's first load imports its array-math registry, which imports scipy.linalg (~0.4 s) only to learn
    whether np.dot may call BLAS; no loop here does linear algebra. Where scipy is not imported yet, it is hidden
    meanwhile: its import fails, and numba goes without BLAS in this process (disttrace's own, never the traced
    job's)."""

    def __enter__(self):
        self.hid = "scipy" not in sys.modules
        if self.hid:
            sys.modules["scipy"] = None  # (None in sys.modules: `import scipy` raises ImportError)

    def __exit__(self, *exc):
        if self.hid and sys.modules.get("scipy", False) is None:
            del sys.modules["scipy"]
        return False


def _read_only(a):
    """Every column read-only: numba compiles a function once per argument types, and a column of a table opened
    from the store is read-only (mapped) where one just parsed is not."""
    if isinstance(a, np.ndarray) and a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


__all__ = ["JIT_FROM", "run", "run_in_room", "wanted", "warm"]
