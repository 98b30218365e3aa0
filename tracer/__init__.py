"""disttrace's tracer: recording (record/), trace data and its readers (data/), analysis (analysis/) and the
commands (commands/).

Importing this package is cheap: torch is imported only by the recording modules, when tracing starts.

Programmatic use, for notebooks and custom launchers (each rank process calls it):

    from disttrace.tracer import trace
    with trace(out="my-trace", summaries="stats"):
        ...  # torch.distributed ops here are recorded

or set DISTTRACE_OUT=DIR (and optionally DISTTRACE_SUMMARIES) in the environment of processes that have
disttrace's bootstrap folder on PYTHONPATH, which is what `disttrace run` does.

To mark training steps yourself, call `mark_step()` at the end of each iteration (or use torch.profiler's
`prof.step()`, which is honoured too); see mark_step.
"""

from __future__ import annotations

import contextlib
import sys

_HOOKS = __name__ + ".record.hooks"  # imported (with torch) only where tracing may start
_CURRENT = __name__ + ".record.current"  # the process's tracer, set by the hooks (torch-free)


@contextlib.contextmanager
def trace(out: str, summaries: str = "off", black_box: bool = False, ring: int | None = None,
          keep_snapshots: int | None = None, window=None, hang_timeout: float = 0.0, memory: bool = False,
          memory_step: int | None = None):
    """Record this process's torch.distributed ops into trace dir `out` while the block runs.

    Tracing starts when the default process group is initialized (at once if it already is) and stops at the
    end of the block, which also closes the rank file. `summaries`: off, stats or full.

    black_box=True: the mode a production job leaves on (docs/FORMAT.md, "The black box"): the last `ring` ops
    (default 4,000) in a ring of fixed size, the aggregates of the whole run per `window` (W steps, or "Ws"
    seconds), snapshots on a hang (with hang_timeout seconds), an uncaught exception or SIGUSR1, the last
    `keep_snapshots` kept. memory=True: each rank's memory by kind beside its rank file (`disttrace run --memory`;
    `memory_step`: the step of the report's breakdown, default the first steady one). ValueError on a wrong option."""
    if memory_step is not None and (not memory or memory_step < 0):
        raise ValueError("memory_step is a step number (0 or more) of memory=True")
    config = None
    if black_box:
        from .blackbox_files import Config

        config = Config.make(ring, keep_snapshots, window)
    elif ring is not None or keep_snapshots is not None or window is not None:
        raise ValueError("ring, keep_snapshots and window are the black box's: pass black_box=True")
    from .record import hooks

    hooks.install(out, summaries, hang_timeout, black_box=config,
                  memory=(-1 if memory_step is None else memory_step) if memory else None)
    try:
        yield
    finally:
        hooks.uninstall()


def mark_step() -> None:
    """Mark the end of a training step, torch.profiler's way: call it at the end of each iteration. Ops issued
    before the first call belong to step 0, those between the k-th and the (k+1)-th call to step k.

    Named mark_step, not step: `for step in range(...)` would shadow it. A job that calls torch.profiler's
    `prof.step()` needs nothing more (each call is a marker; calling both at the same place counts once).
    Untraced it does nothing (a dictionary lookup) and never imports torch; it never raises into the job."""
    current = sys.modules.get(_CURRENT)
    if current is not None and current.tracer is not None:
        sys.modules[_HOOKS].mark_step()
