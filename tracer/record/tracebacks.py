"""The job's tracebacks as they would be untraced: disttrace's own frames taken out.

An exception raised by an op passes through the tracer's wrappers (Work.wait, the dispatcher kernel, the fast path)
on its way to the user's code, and Python puts each of those frames in the traceback: a gloo timeout then read
"tracer/record/hooks.py, line 297, in wait" right above torch's message. A frame cannot be kept out of a traceback
while the exception passes through it (re-raising adds the frame again), but a traceback's links are writable:
the hooks that print uncaught exceptions (sys.excepthook, threading.excepthook) get the traceback without our
frames, then print it as they would have. An exception the job catches and prints itself keeps them.
"""

from __future__ import annotations

import sys
import threading

from ..format import OWN, frame_kind


def _strip(exc: BaseException | None, seen: set) -> None:
    """Unlink disttrace's frames from exc's traceback, and from those of its cause and context."""
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb, head, last = exc.__traceback__, None, None
        while tb is not None:
            if frame_kind(tb.tb_frame.f_code.co_filename) != OWN:
                if last is None:
                    head = tb
                else:
                    last.tb_next = tb
                last = tb
            tb = tb.tb_next
        if last is not None:
            last.tb_next = None
            exc.__traceback__ = head
        if exc.__cause__ is not None:
            _strip(exc.__cause__, seen)
        exc = exc.__context__


# Called with the exception that ends the program, once it is printed (the black box's snapshot: hooks.py sets it)
on_uncaught = None


def _excepthook(orig):
    def excepthook(typ, value, tb):
        try:
            _strip(value, set())
            tb = value.__traceback__
        except Exception:  # noqa: BLE001 - the original traceback, then
            pass
        try:
            return orig(typ, value, tb)
        finally:
            if on_uncaught is not None:
                try:
                    on_uncaught(value)
                except Exception:  # noqa: BLE001
                    pass

    excepthook._disttrace_orig = orig  # type: ignore[attr-defined]
    return excepthook


def _thread_excepthook(orig):
    def excepthook(args):
        try:
            _strip(args.exc_value, set())
        except Exception:  # noqa: BLE001
            pass
        return orig(args)

    excepthook._disttrace_orig = orig  # type: ignore[attr-defined]
    return excepthook


def install() -> None:
    if not hasattr(sys.excepthook, "_disttrace_orig"):
        sys.excepthook = _excepthook(sys.excepthook)
    if not hasattr(threading.excepthook, "_disttrace_orig"):
        threading.excepthook = _thread_excepthook(threading.excepthook)


def uninstall() -> None:
    for owner in (sys, threading):
        orig = getattr(owner.excepthook, "_disttrace_orig", None)
        if orig is not None:
            owner.excepthook = orig
