"""What the two capture mechanisms share, hooks.py's dispatcher kernels and fastpath.py's ProcessGroup wrappers:
this process's tracer while tracing runs, the per-thread nesting guard and the call that never raises.

hooks.py sets `tracer` (at init_process_group, or at once) and clears it (stop); everything else only reads it,
once per op (`current.tracer`), so that a stopped trace is seen at the next op.
"""

from __future__ import annotations

tracer = None  # the capture.Tracer of this process while tracing runs, else None

# The threads (get_ident()) in which a recorded op runs on the kernel's path: ops it issues inside are not recorded
# again. A set, not a threading.local: the hot path's look is a truth test of an empty set (a thread-local's
# attribute costs a TLS lookup on every op).
nested: set[int] = set()


def safe(fn, *args) -> None:
    """fn(*args); a failure disables tracing (with one warning) and never reaches the traced program."""
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001
        t = tracer
        if t is not None:
            t.fail(e)
