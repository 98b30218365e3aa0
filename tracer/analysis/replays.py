"""The what-if replay of a step (what_if.py holds its rules) as loops over integer columns, compiled by numba for
large traces (jit.py): one pass over the step's host intervals measures what no change alters (each compute gap and
the row before it), and one pass per change re-times them. As Python objects a change's replay took ~0.15 s at any
size (its budget of host intervals); compiled, a few ms.

Written as numba compiles them (jit.py): one function each, no helpers, every container typed by its first use and
never replaced (walks.py says why).

A step's events (what_if._Replay.timeline): each host interval's start, and the end of each one that blocks, in
time order; event e is interval h[e] (an index into the walker's host columns: its start ha, op row hrow and kind
hkind) of the rank in state slot[e], at time[e], an end where is_end[e]."""

from __future__ import annotations

import numpy as np

from . import jit
from .critical_path import ISSUE, SYNC, WAIT  # (a host interval's kind)
_NO_END = -(1 << 62)  # an op's replayed end where it never ended (what_if.py's None)


def measure(n_events: int, *args):
    """measured(*args), compiled for large traces."""
    return jit.run(measured, n_events, *read_as(n_events, args))


def replay(n_events: int, *args):
    """replayed(*args), compiled for large traces."""
    return jit.run(replayed, n_events, *read_as(n_events, args))


def read_as(n_events: int, columns) -> list:
    """The columns as the replay of a trace of n_events reads them best: numpy's compiled, else lists (Python reads
    a list's item in a tenth of a numpy array's time: the replay of a 10k-event trace took 0.6 s on arrays)."""
    if jit.wanted(n_events):
        return list(columns)
    return [c.tolist() if isinstance(c, np.ndarray) else c for c in columns]


def measured(time, is_end, slot, h, hrow, hkind, free0, prev0):
    """Per event, as measured: the compute gap before an interval's start (its start less the instant its rank's
    host was free; 0 for an end) and the row of the interval before it on its rank (-1 for none). free0, prev0:
    each slot's at the step's start."""
    n = len(time)
    free = free0.copy()
    prev = prev0.copy()
    gap = np.zeros(n, np.int64)
    before = np.full(n, -1, np.int64)
    for e in range(n):
        s = slot[e]
        if is_end[e] == 0:
            gap[e] = time[e] - free[s]
            before[e] = prev[s]
            if hkind[h[e]] == ISSUE:
                free[s] = max(free[s], time[e])
            prev[s] = hrow[h[e]]
        else:
            free[s] = max(free[s], time[e])
    return gap, before


def replayed(time, is_end, slot, h, gap, saved, rows, rows_saved, free0, t0,
             ha, hrow, hkind, fin, start, wait, instance_of, c_off, c_rows, p2p_of, p_send, p_recv):
    """The step's length replayed with a change: `gap`, each event's compute gap with it (measured's where it
    changes nothing), `saved` the time it takes off the op of each end event, and rows (with rows_saved, the same
    for each) the ops whose last end is the step's end. Returns the latest replayed end less t0, the step's start.

    An op's replayed end: its arrivals (its own and those it needs: a collective's other rows; a recv's send; a
    send's recv where the send waited) at their replayed instants where the replay met them, else as measured; then
    the later of the last of them plus its measured communication time (its end less the last measured arrival)
    and its own arrival plus its own time in the op less its wait, both less what the change saves."""
    n = len(time)
    free = free0.copy()  # each slot's host, free from this instant on in the replay
    arrival = {np.int64(0): np.int64(0)}  # row -> its replayed arrival
    arrival.clear()
    done = {np.int64(0): np.int64(0)}  # row -> its replayed end (_NO_END: it never ended)
    done.clear()
    began = {np.int64(0): np.int64(0)}  # host interval -> its replayed start
    began.clear()
    latest = _NO_END
    for q in range(n + len(rows)):  # the events, then the last ends of the rows
        if q < n:
            hh = h[q]
            row = hrow[hh]
            if is_end[q] == 0:
                b = free[slot[q]] + gap[q]
                began[hh] = b
                if hkind[hh] != WAIT:
                    arrival[row] = b
                if hkind[hh] == ISSUE:
                    free[slot[q]] = max(free[slot[q]], b)
                continue
            i, cut = row, saved[q]
        else:
            i, cut = rows[q - n], rows_saved[q - n]
        # ---- op i's replayed end, once per replay ----
        if i in done:
            f = done[i]
        elif fin[i] == -1:  # (data.events.NONE: it never ended)
            f = done[i] = _NO_END
        else:
            a_new = arrival[i] if i in arrival else start[i]
            a_old, need = start[i], a_new
            k = instance_of[i]
            lo, hi, j = 0, 0, -1
            if k >= 0:
                lo, hi = c_off[k], c_off[k + 1]
            elif p2p_of[i] >= 0:
                m = p2p_of[i]
                if i == p_recv[m] and p_send[m] != -1:
                    j = p_send[m]
                elif i == p_send[m] and p_recv[m] != -1 and wait[i] > 0:
                    j = p_recv[m]
            for x in range(lo, hi + 1):  # the collective's rows, or the one peer row j (at x == hi)
                d = c_rows[x] if x < hi else j
                if d < 0 or d == i:
                    continue
                sd = start[d]
                if sd > a_old:  # (comparisons, not max(): the loop runs as Python on small traces)
                    a_old = sd
                ad = arrival[d] if d in arrival else sd
                if ad > need:
                    need = ad
            comm, own = fin[i] - a_old, fin[i] - start[i] - wait[i]
            f = done[i] = max(need + comm - cut, a_new + own - cut)
        if q < n:
            hh = h[q]
            b = began[hh]
            t = time[q]
            if hkind[hh] == SYNC:
                end = b + (t - ha[hh]) if f == _NO_END else f + (t - fin[i])
            elif f == _NO_END:
                end = b + (t - ha[hh])
            else:
                end = max(b, f) + max(0, t - max(ha[hh], fin[i]))
            free[slot[q]] = max(free[slot[q]], end)
        elif f != _NO_END:
            latest = max(latest, f)
    return latest - t0
