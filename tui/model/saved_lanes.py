"""The timeline's lanes kept beside their trace: the columns `Lane.columns_all` makes (every rank's events in
start order, their categories and prefix sums, a few words an event) written to the trace store (data/store/arrays.py,
`write_arrays`) once, and read in place on the next open (mapped: only the pages a frame reads come into memory).
Building them was a large share of a large trace's re-open (reading them back is far quicker: see
benchmarks/bench_tui.py, "first frame, re-open"), and held them in the process's own memory. Kept without the
analysis' waits (the lanes of the bare store, which the analysis' waits then replace), under the events' fingerprint
and this folder's code.

No Textual here.
"""

from __future__ import annotations

import os

from disttrace.tracer.data import load as store
from disttrace.tracer.data.table import EventTable

from .lod import LANE_COLUMNS

KIND = "lanes"  # the store file's name: lanes-v3[-runN][-HASH].arrow beside events-v3...
_TYPES = {"present": "i", "bounds": "q", "rows": "i", "cats": "B"}  # the others: "q"


def _fingerprint(table: EventTable, t_end: int) -> dict:
    return {"events": table.origin.fingerprint, "rows": len(table), "t_end": t_end,
            "code": store.source_digest(os.path.dirname(os.path.abspath(__file__)))}


def load(table: EventTable, t_end: int) -> dict | None:
    """The lanes' columns saved beside `table`'s store for this table, end time and code; else None."""
    if not isinstance(table.origin, store.StoreOrigin):
        return None
    try:
        arrays, _ = store.read_arrays(table.origin.beside(KIND), _fingerprint(table, t_end))
    except (store.StoreError, OSError):
        return None
    if list(arrays) != list(LANE_COLUMNS) or any(arrays[k].format != _TYPES.get(k, "q") for k in LANE_COLUMNS):
        return None
    n = len(arrays["rows"])
    if n != len(table) or any(len(arrays[k]) != n for k in ("starts", "ends", "cats")):
        return None
    return arrays


def save(table: EventTable, t_end: int, cols: dict) -> None:
    """Keep the lanes' columns beside the store `table` came from (nothing when it came from none). Never raises:
    a cache (a read-only dir, a full disk: skipped)."""
    if not isinstance(table.origin, store.StoreOrigin):
        return
    try:
        arrays = {k: cols[k].cast("B").cast(_TYPES.get(k, "q")) for k in LANE_COLUMNS}
        store.write_arrays(table.origin.beside(KIND), arrays, {}, _fingerprint(table, t_end))
    except Exception:  # noqa: BLE001 - never fail the viewer for a cache
        pass


__all__ = ["KIND", "load", "save"]
