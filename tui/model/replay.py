"""The replay clock: where the playhead goes on each key, and how `g` input is read.

The playhead is an event row (the table is in start order, so rows are the global replay order); -1 means
before the first event. Stepping by collective uses the analysis' matched instances.
"""

from __future__ import annotations

from disttrace.tracer.units import parse_ns

from .store import TraceStore

#: Playback speeds (events per second) that `<` and `>` cycle through.
SPEEDS = (1, 2, 5, 10, 25, 100, 1000)


def step_event(store: TraceStore, row: int, direction: int) -> int:
    """Next (+1) or previous (-1) event in global time order; stays put at the ends."""
    nxt = row + direction
    if nxt < -1:
        return -1
    if nxt >= store.n_events:
        return row
    return nxt


def step_collective(store: TraceStore, row: int, direction: int) -> int:
    nxt = store.next_collective_row(row, direction)
    return row if nxt is None else nxt


def parse_goto(store: TraceStore, text: str) -> int:
    """`g` input: `12.5ms` (time from the trace start) or `#123`/`123` (event number in the list).
    Returns the row to put the playhead on; raises ValueError with a short message."""
    text = text.strip()
    t = parse_ns(text)
    if t is not None:
        return row_at_time(store, store.t0 + t)
    digits = text.lstrip("#")
    if digits.isdigit():
        row = int(digits)
        if not 0 <= row < store.n_events:
            raise ValueError(f"no event #{row}: the events are #0 to #{store.n_events - 1}")
        return row
    raise ValueError("type a time like 12.5ms or an event number like #42")


def row_at_time(store: TraceStore, t_ns: int) -> int:
    """The last event that started at or before t (the first one when t is before everything)."""
    from bisect import bisect_right

    k = bisect_right(store.table.start_ns, t_ns) - 1
    return max(0, min(k, store.n_events - 1))


def search(store: TraceStore, query: str, start: int, direction: int = 1) -> int | None:
    """The next row after `start` whose op, api, site, group, dtype or `rank=N` matches the query
    (case-insensitive substring; words must all match), wrapping around."""
    words = query.lower().split()
    if not words or not store.n_events:
        return None
    t = store.table
    n = store.n_events

    def text(i: int) -> str:
        g = t.groups[t.gid[i]].name
        return f"{t.op[i]} {t.api[i]} {t.site[i]} {g} {t.dtype[i]} {t.status[i]} rank={t.rank[i]}".lower()

    i = start
    for _ in range(n):
        i = (i + direction) % n
        s = text(i)
        if all(w in s for w in words):
            return i
    return None
