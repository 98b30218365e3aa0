"""disttrace's tracer: recording (hooks, capture, recorder), reading (events, reader) and analysis.

Importing this package is cheap: torch is imported only by the recording modules, when tracing starts.

Programmatic use, for notebooks and custom launchers (each rank process calls it):

    from disttrace.tracer import trace
    with trace(out="my-trace", summaries="stats"):
        ...  # torch.distributed ops here are recorded

or set DISTTRACE_OUT=DIR (and optionally DISTTRACE_SUMMARIES) in the environment of processes that have
disttrace's bootstrap folder on PYTHONPATH, which is what `disttrace run` does.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def trace(out: str, summaries: str = "off"):
    """Record this process's torch.distributed ops into trace dir `out` while the block runs.

    Tracing starts when the default process group is initialized (at once if it already is) and stops at the
    end of the block, which also closes the rank file. `summaries`: off, stats or full."""
    from . import hooks

    hooks.install(out, summaries)
    try:
        yield
    finally:
        hooks.uninstall()
