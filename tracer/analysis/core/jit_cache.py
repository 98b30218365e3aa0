"""Where the compiled loops are kept and what says they are all there, without numpy or numba: `disttrace run` asks
before it starts a compile beside the job (jit.py's compile_ahead), so that a job started once the cache is warm
starts no process for it.

numba keeps the loops in the user's cache (`cache_dir`), keyed by their source file's modification time and size;
jit.py marks each loop it has compiled ready there. `all_ready` is one file more, left by compile_ahead when it
found every loop of LOOPS ready: named by LOOPS, the stamps of the loops' files and of numba's, and Python's
version, so that an edited loop, another numba or another Python names another file, and the compile runs again."""

from __future__ import annotations

import hashlib
import os
import sys
from importlib.util import find_spec

# The loops and the types of their arguments as an analysis calls them (jit.types_of), for compile_ahead
# (tests/analysis/causal/test_critical_path.py checks them against an analysis' calls)
LOOPS = {
    "disttrace.tracer.analysis.causal.backward_walk.walk_loop":
        "i8 i8 i8 u1 i4 i8 i4 i8 i4 i4 i4 i8 i8 i8 i8 i8 int i8 i8 i8 i8 i8 i8 i8 i8 i8 i8 i8 i8 int i8",
    "disttrace.tracer.analysis.waits.propagation.follow_loop": "i4 i4 i8 i8 i8 i8 i8 i8 i8 i4 i8 int i8",
    "disttrace.tracer.analysis.causal.what_if_loop.measure_loop": "i8 i8 i8 i8 i8 u1 i8 i8",
    "disttrace.tracer.analysis.causal.what_if_loop.replay_loop":
        "i8 i8 i8 i8 i8 i8 i8 i8 i8 i8 i8 int i8 i8 u1 i8 i8 i8 i4 i8 i4 i4 i4 i4 i8",
    "disttrace.tracer.analysis.problems.nonfinite_scan.nonfinite_loop": "u1 i8",
}

_TRACER = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tracer/
_PACKAGE = __name__.rsplit(".", 3)[0]  # disttrace.tracer


def cache_dir() -> str:
    """Where numba keeps the compiled loops: NUMBA_CACHE_DIR where the user set it, else the user's cache
    (XDG_CACHE_HOME, ~/.cache)/disttrace/numba: never beside the installed source."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("NUMBA_CACHE_DIR") or os.path.join(base, "disttrace", "numba")


def stamp(path: str) -> str:
    """A source file's stamp as numba keys its cache by it: its modification time and size (OSError if unread)."""
    st = os.stat(path)
    return f"{st.st_mtime}:{st.st_size}"


def all_ready_marker() -> str | None:
    """The file that says every loop of LOOPS is compiled in the cache (see the module's docstring); None where
    numba is not there or a file cannot be read."""
    numba = find_spec("numba")  # (finds, imports nothing)
    if numba is None or not numba.origin:
        return None
    files = {numba.origin}
    for name in LOOPS:
        module = name.rsplit(".", 1)[0]
        files.add(os.path.join(_TRACER, *module[len(_PACKAGE) + 1:].split(".")) + ".py")
    parts = [repr(sorted(LOOPS.items())), sys.version]
    for path in sorted(files):
        try:
            parts.append(f"{path}:{stamp(path)}")
        except OSError:
            return None
    key = hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"all-ready-{key}")


def all_ready() -> bool:
    marker = all_ready_marker()
    return marker is not None and os.path.exists(marker)
