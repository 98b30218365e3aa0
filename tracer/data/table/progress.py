"""How long work tells how far it got: a progress callback, and the callback for a part of the work."""

from __future__ import annotations

from typing import Callable

Progress = Callable[[float, str], None]  # progress(fraction done, what is being done)


def part_of(progress: Progress | None, lo: float, hi: float) -> Progress | None:
    """A progress callback for a part of the work, the stretch [lo, hi] of the whole (None for None)."""
    if progress is None:
        return None
    return lambda f, label: progress(lo + (hi - lo) * f, label)
