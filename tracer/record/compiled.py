"""The recorder's compiled part (_hotpath.c), or None: the lean path's per-op work in C, with a pure-Python twin.

Optional by design (docs/ARCHITECTURE.md, "The lean path"): wheels carry it built; a source install without a compiler
(or whose build failed: setup.py's optional=True) has none, and the recorder runs on the Python code it replaces,
which writes the same bytes. DISTTRACE_PURE=1 in the environment forces the Python code (a rank inherits it from
`disttrace run`): tests and benchmarks/bench_record_cost.py run both ways in one run.
"""

from __future__ import annotations

import os

PURE_ENV = "DISTTRACE_PURE"


def _load():
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None
    try:
        from . import _hotpath
    except ImportError:
        return None
    return _hotpath


hotpath = _load()


def offers(name: str):
    """The compiled part's `name`, or None where it is absent, forced off, or does not offer it on this Python."""
    return getattr(hotpath, name, None)
