"""Loops that no array operation expresses (a walk, a chain followed back), compiled by numba for large traces.

Such a loop is written once, as one function over integer columns in the Python that numba compiles (no helpers:
compiled code calls only compiled functions, and closures are not cached). `run` calls it compiled from JIT_FROM
events on, else as Python, its columns as lists (`lists`: Python reads a list's item several times faster than an
array's). numba stays while it pays: benchmarks/bench_analysis.py prints the analysis compiled and as Python side
by side, and its first compile (docs/ARCHITECTURE.md, "Reading and analysis", says why numpy cannot take these
loops over).

The first compile is kept out of the first report: numba caches the compiled loops in the user's cache
(`cache_dir`), never beside the installed source, and `disttrace run` has them compiled beside the job, at the
lowest priority, by `compile_ahead`, for the argument types an analysis calls them with (LOOPS); a loop compiled
there is marked ready (a file named by its source and numba's version). Where the cache lacks one (a trace that did
not come through `disttrace run`), the first large analysis compiles it. `warm` starts numba in a thread as an
analysis begins, beside its first stages. DISTTRACE_JIT=0 never compiles, =1 always does (the tests compare both
ways). Without numba (a platform without its wheels) the same functions run as Python."""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
import threading

import numpy as np

from .jit_cache import LOOPS, all_ready_marker, cache_dir, stamp

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


def compiled(fn, n_events: int, work: int = 0) -> bool:
    """Whether fn runs compiled for a trace of n_events: wanted, or `work` (events times the passes a caller will
    make over them, e.g. a replay per rank) from JIT_FROM on where the cache holds fn compiled (loading it is
    numba's start, not a compile); and numba there."""
    if not wanted(n_events):
        if work < JIT_FROM or os.environ.get("DISTTRACE_JIT") == "0" or not _ready(fn):
            return False
    return bool(_start())


def run(fn, n_events: int, *args, work: int = 0):
    """fn(*args), compiled where `compiled` says so (compiled here and now where the cache lacks it:
    `compile_ahead` does that beforehand); else as Python, where a caller passes its columns as `lists`. Columns
    given as lists run as Python whatever fn's answer: by `work`, each loop is compiled as the cache holds it, and a
    caller that read its columns for another loop (the what-if's measure and replay share them) may have had
    another answer."""
    if not compiled(fn, n_events, work) or any(type(a) is list for a in args):
        return fn(*args)
    c = _compiled.get(fn)
    if c is None:
        with _lock:
            c = _compiled[fn] = _compiled.get(fn) or _njit(cache=True, nogil=True)(fn)
    out = c(*map(_read_only, args))
    _mark_ready(fn)
    return out


def lists(columns) -> list:
    """The columns as a loop run as Python reads them best: each array a list (Python reads a list's item several
    times faster than an array's)."""
    return [c.tolist() if isinstance(c, np.ndarray) else c for c in columns]


def run_in_room(fn, n_events: int, room, *args, grow: int = 2):
    """fn(*args, room) as `run` calls it, for a loop whose arrays never grow (numba keeps an array a loop may
    replace alive by atomic reference counts at every turn: causal/backward_walk.py). `room` (a list of ints) sizes its arrays;
    fn returns (-1, *out), or (k, ...) where room[k] was too little: it runs again with `grow` times room[k]."""
    room = np.array(room, np.int64)
    while True:
        full, *out = run(fn, n_events, *args, room)
        if full < 0:
            return tuple(out)
        room[full] *= grow


_markers: dict = {}  # fn -> its marker's path
_seen: dict = {}  # fn -> whether it was ready when this process first asked (it keeps that answer)


def _marker(fn) -> str:
    """The file that says fn is compiled in the cache: named by its module, name, source and numba's version, and
    its file's stamp (numba's cache is keyed by the file's modification time and size: an edit elsewhere in the
    file leaves fn's source as it was, and numba compiles it again)."""
    if fn in _markers:
        return _markers[fn]
    from importlib.metadata import PackageNotFoundError, version

    try:
        numba_version = version("numba")
    except PackageNotFoundError:
        numba_version = ""
    src = inspect.getsource(fn).encode()
    try:
        file_stamp = stamp(inspect.getsourcefile(fn)).encode()
    except (OSError, TypeError):
        file_stamp = b""
    key = hashlib.sha1(src + file_stamp + numba_version.encode() + sys.version.encode()).hexdigest()[:16]
    _markers[fn] = os.path.join(cache_dir(), "ready", f"{fn.__module__}.{fn.__qualname__}-{key}")
    return _markers[fn]


def _ready(fn) -> bool:
    if fn not in _seen:
        _seen[fn] = os.path.exists(_marker(fn))
    return _seen[fn]


def _mark_ready(fn) -> None:
    if _seen.get(fn):
        return
    _seen[fn] = True
    try:
        os.makedirs(os.path.dirname(_marker(fn)), exist_ok=True)
        open(_marker(fn), "a").close()
    except OSError:  # (a cache we cannot write: compiled again next time, as numba would)
        pass


def types_of(args) -> str:
    """The types of a call's arguments, as LOOPS writes them: a read-only array's dtype ("i8": int64), with its
    dimensions where not 1 (":2d") and ":A" where it is not contiguous; "int" for a scalar (numba's int64)."""
    return " ".join(a.dtype.str[1:] + (f":{a.ndim}d" if a.ndim != 1 else "") + ("" if a.flags.c_contiguous else ":A")
                    if isinstance(a, np.ndarray) else "int" for a in args)


def specimens(types: str) -> list:
    """An argument of each of these types (types_of's): a read-only array, empty where contiguous; or an int."""
    out = []
    for t in types.split():
        if t == "int":
            out.append(0)
            continue
        dtype, *more = t.split(":")
        ndim = int(more[0][:-1]) if more and more[0].endswith("d") else 1
        a = np.empty((0 if "A" not in more else 4,) * ndim, dtype)
        out.append(_read_only(a if "A" not in more else a[(slice(None, None, 2),) * ndim]))
    return out


def compile_ahead() -> None:
    """Compile each of LOOPS that is not ready in the cache, and mark it ready. `disttrace run` runs it in a
    child process beside the job, at the lowest priority (the analysis at the run's end, and the first report,
    then load the loops from the cache); by hand: python -c "from disttrace.tracer.analysis.core import jit;
    jit.compile_ahead()"."""
    import importlib

    if os.environ.get("DISTTRACE_JIT") == "0":
        return
    todo = []
    for name, types in LOOPS.items():
        module, fn_name = name.rsplit(".", 1)
        fn = getattr(importlib.import_module(module), fn_name)
        if not _ready(fn):
            todo.append((fn, types))
    if todo:
        if not _compiling_alone():
            return
        njit = _start()
        if not njit:
            return
        import numba

        for fn, types in todo:
            njit(cache=True, nogil=True)(fn).compile(tuple(numba.typeof(a) for a in specimens(types)))
            _mark_ready(fn)
    marker = all_ready_marker()  # (every loop ready: the next `disttrace run` starts no compile)
    if marker is not None:
        try:
            open(marker, "a").close()
        except OSError:
            pass


_held = []  # the lock's file, open for as long as this process compiles


def _compiling_alone() -> bool:
    """Whether this process holds the cache's compile lock (taken, never waited for): jobs started together
    (a sweep, parallel tests) each start a compile_ahead, and one of them compiles; the others leave it."""
    try:
        import fcntl

        os.makedirs(cache_dir(), exist_ok=True)
        f = open(os.path.join(cache_dir(), "compile-ahead.lock"), "a")
    except (ImportError, OSError):  # (no flock, a cache we cannot write: compile, as numba would)
        return True
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return False
    _held.append(f)
    return True


def _first(a):
    return a[0]


def _start():
    """numba.njit, started: imported, its cache set to `cache_dir`, and its compiler loaded by loading a trivial
    function from the cache. False without numba."""
    global _njit
    with _lock:
        if _njit is None:
            try:
                with _without_scipy():
                    from numba import njit
                    from numba.core import config

                    if not os.environ.get("NUMBA_CACHE_DIR"):
                        config.CACHE_DIR = cache_dir()
                    njit(cache=True, nogil=True)(_first)(np.zeros(1, np.int64))
            except ImportError:
                njit = False
            _njit = njit
    return _njit


class _without_scipy:
    """numba's first load imports its array-math registry, which imports scipy.linalg only to learn whether
    np.dot may call BLAS; no loop here does linear algebra. Where scipy is not imported yet, it is hidden
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


__all__ = ["JIT_FROM", "LOOPS", "cache_dir", "compile_ahead", "compiled", "lists", "run", "run_in_room",
           "types_of", "wanted", "warm"]
