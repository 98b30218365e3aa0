"""The comparison the viewer shows beside the trace on screen (`view B --baseline A`): made before the viewer starts
(tui/cli.py: tracer/analysis/diff) and held here, where the Diff tab and the detail pane read it, without importing
the diff's analysis (the viewer's start does not need it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from disttrace.tracer.units import fmt_ns_short

from .store import TraceStore

if TYPE_CHECKING:
    from disttrace.tracer.analysis import Diff

_BASELINE: list[Diff] = []  # the comparison of the trace on screen with its baseline (at most one)


def set_baseline(diff: Diff | None) -> None:
    """The comparison the viewer shows (None: none)."""
    _BASELINE.clear()
    if diff is not None:
        _BASELINE.append(diff)


def signed_short(ns: float) -> str:
    """A difference of times for the viewer's narrow columns: "+99.6ms", "−3ms" (fmt_ns_short's, signed)."""
    return ("−" if ns < 0 else "+") + fmt_ns_short(abs(ns))


def _signature(t) -> tuple:
    n = len(t)
    return (n, t.run, t.start_ns[0] if n else 0, t.start_ns[n - 1] if n else 0)


def baseline_of(store: TraceStore) -> Diff | None:
    """The comparison of the store's trace with its baseline, if it is the trace the comparison was made of."""
    if not _BASELINE:
        return None
    d = _BASELINE[0]
    if d.b_side is None or _signature(d.b_side.table) != _signature(store.table):
        return None
    return d


__all__ = ["baseline_of", "set_baseline", "signed_short"]
