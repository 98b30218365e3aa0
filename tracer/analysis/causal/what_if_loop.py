"""The what-if replay of a step (causal/what_if.py holds its rules) as loops over integer columns, compiled by numba for
large traces (core/jit.py): one pass over the step's host intervals measures what no change alters (each compute gap and
the row before it), and one pass per change re-times them, each event's time found from those before it (as
Python, on lists, below jit.JIT_FROM events).

Written as numba compiles them (core/jit.py): one function each, no helpers, every container typed by its first use and
never replaced (causal/backward_walk.py says why).

A step's events (what_if._Replay.timeline): each host interval's start, and the end of each one that blocks, in
time order; event e is interval h[e] (an index into the walker's host columns: its start ha, op row hrow and kind
hkind) of the rank in state slot[e], at time[e], an end where is_end[e]."""

from __future__ import annotations

import numpy as np

from ..core import jit
from .critical_path import ISSUE, SYNC, WAIT  # (a host interval's kind)
_NO_END = -(1 << 62)  # an op's replayed end where it never ended (causal/what_if.py's None)


def measure(size: tuple[int, int], *args):
    """measure_loop(*args), compiled for large traces. size: (the trace's events, the replays' work: jit.compiled)."""
    return jit.run(measure_loop, size[0], *read_as(size, args), work=size[1])


def replay(size: tuple[int, int], *args):
    """replay_loop(*args), compiled for large traces, or for many replays (size: as `measure`'s)."""
    return jit.run(replay_loop, size[0], *read_as(size, args), work=size[1])


def read_as(size: tuple[int, int], columns) -> list:
    """The columns as the replays of size (a trace's events, their work) read them best: numpy's compiled, else
    lists (jit.lists)."""
    if jit.compiled(replay_loop, *size):
        return list(columns)
    return jit.lists(columns)


def measure_loop(time, is_end, slot, h, hrow, hkind, free0, prev0):
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


def replay_loop(time, is_end, slot, h, step_ix, gap, saved, rows, rows_ix, rows_saved, free0, n_steps,
             ha, hrow, hkind, fin, start, wait, instance_of, c_off, c_rows, p2p_of, p_send, p_recv, gate):
    """A run of consecutive steps replayed with a change, each step's hosts going on from where the replay left
    them in the step before: `gap`, each event's compute gap with it (measure_loop's where it changes nothing),
    `saved` the time it takes off the op of each end event, step_ix each event's step (0, 1, ... in the run), and
    rows (with rows_ix their steps and rows_saved the same as saved) each step's ops, whose last end is the step's
    end. free0: each slot's host free from this instant at the run's start. Returns each step's latest replayed end
    and the earliest instant a host entered it (free when its first interval of the step began).

    Each rank's host (slot) runs its events in their measured order; an end waits until the arrivals its op needs
    that lie in the step have been replayed, not for their measured time: skewed clocks can put an op's measured
    end before a peer's measured arrival, and a change moves arrivals earlier. A slot that must wait is put aside
    on the arrival it waits for, and taken up again once that arrival is replayed. A cycle (a damaged trace) is
    broken at the earliest waiting end, with the arrivals replayed so far.

    An op's replayed end: its arrivals (its own and those it needs: a collective's other rows; a recv's send; a
    send's recv where the send waited) at their replayed instants where the replay met them, else as measured; then
    the later of the last of them plus its measured communication time (its end less the last measured arrival)
    and its own arrival plus its own time in the op less its wait, both less what the change saves. An op whose
    end is only known as its wait()'s return (gate: that wait's start; -1 for the others), gloo's send and recv, was
    done by then for all the trace says: it ends as long after the later of its arrivals and its replayed wait's
    start as it did after the later of the measured ones (a recv whose data came early read as ending when its rank,
    blocked in another wait first, got round to it: the rank that made that other wait late was never on its
    path)."""
    n = len(time)
    n_slots = len(free0)
    free = free0.copy()  # each slot's host, free from this instant on in the replay
    arrival = {np.int64(0): np.int64(0)}  # row -> its replayed arrival
    arrival.clear()
    done = {np.int64(0): np.int64(0)}  # row -> its replayed end (_NO_END: it never ended)
    done.clear()
    began = {np.int64(0): np.int64(0)}  # host interval -> its replayed start
    began.clear()
    coming = {np.int64(0): np.int64(0)}  # rows that arrive in the step, not replayed yet
    coming.clear()
    waiters = {np.int64(0): np.int64(0)}  # row -> the first slot waiting for its arrival (then next_waiter's)
    waiters.clear()
    next_waiter = np.full(n_slots, -1, np.int64)
    head = np.full(n_slots, -1, np.int64)  # each slot's next event, and each event's next on its slot
    nxt = np.full(n, -1, np.int64)
    for e in range(n - 1, -1, -1):
        nxt[e] = head[slot[e]]
        head[slot[e]] = e
        if is_end[e] == 0 and hkind[h[e]] != WAIT:
            coming[hrow[h[e]]] = np.int64(1)
    ready = np.arange(n_slots - 1, -1, -1).astype(np.int64)  # the slots that can go on (a stack: slot 0 first)
    top = n_slots
    queued = np.ones(n_slots, np.bool_)
    step_end = np.full(n_steps, _NO_END, np.int64)
    entry = np.full(n_steps, -_NO_END, np.int64)
    slot_step = np.full(n_slots, -1, np.int64)  # the step each slot is in
    left = n
    tail = 0  # then the ends of `rows`, one by one
    forced = -1  # an end taken with the arrivals known so far (a cycle)
    s = -1  # the slot going on
    while True:
        if left > 0:
            if s < 0 or head[s] < 0:
                if top == 0:  # every slot waits: the earliest waiting end goes with what is known
                    best = -1
                    for x in range(n_slots):
                        y = head[x]
                        if y >= 0 and (best < 0 or time[y] < time[best]):
                            best = y
                    forced = best
                    ready[0] = slot[best]
                    top = 1
                    queued[slot[best]] = True
                top -= 1
                s = ready[top]
                queued[s] = False
                continue
            q = head[s]
            hh = h[q]
            row = hrow[hh]
            if is_end[q] == 0:
                if step_ix[q] != slot_step[s]:  # the slot enters the next step
                    slot_step[s] = step_ix[q]
                    entry[step_ix[q]] = min(entry[step_ix[q]], max(free[s], _NO_END))
                b = free[s] + gap[q]
                began[hh] = b
                if hkind[hh] != WAIT:
                    arrival[row] = b
                    if row in coming:
                        del coming[row]
                    if row in waiters:  # the slots that waited for this arrival go on
                        w = waiters[row]
                        del waiters[row]
                        while w >= 0:
                            if not queued[w]:
                                ready[top] = w
                                top += 1
                                queued[w] = True
                            w2 = next_waiter[w]
                            next_waiter[w] = -1
                            w = w2
                if hkind[hh] == ISSUE:
                    free[s] = max(free[s], b)
                head[s] = nxt[q]
                left -= 1
                continue
            i, cut = row, saved[q]
        elif tail < len(rows):  # each step's ops: its end is their last
            q = n + tail
            i, cut = rows[tail], rows_saved[tail]
            tail += 1
        else:
            break
        # ---- op i's replayed end, once per replay, once the arrivals it needs are replayed ----
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
        if q < n and i not in done and q != forced:
            missing = -1
            for x in range(lo, hi + 1):
                d = c_rows[x] if x < hi else j
                if d >= 0 and d != i and d in coming:
                    missing = d
                    break
            if missing >= 0:  # this slot waits for that arrival; another goes on
                next_waiter[s] = waiters[missing] if missing in waiters else -1
                waiters[missing] = s
                s = -1
                continue
        if q == forced:
            forced = -1
        if i in done:
            f = done[i]
        elif fin[i] == -1:  # (data.table.NONE: it never ended)
            f = done[i] = _NO_END
        else:
            a_new = arrival[i] if i in arrival else start[i]
            a_old, need = start[i], a_new
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
            if gate[i] >= 0:
                g0 = gate[i]
                from_wait = a_new + (g0 - start[i])  # (the wait's start, replayed with its op's arrival...)
                if q < n and hkind[h[q]] == WAIT:
                    from_wait = began[h[q]]  # (...or as this wait's own replayed start)
                f = done[i] = max(need, from_wait) + fin[i] - max(a_old, g0) - cut
            else:
                comm, own = fin[i] - a_old, fin[i] - start[i] - wait[i]
                f = done[i] = max(need + comm - cut, a_new + own - cut)
        if q >= n:
            if f != _NO_END:  # (clamped: a damaged trace's times can lie past int64's range)
                step_end[rows_ix[q - n]] = max(step_end[rows_ix[q - n]], min(max(f, _NO_END), -_NO_END))
            continue
        hh = h[q]
        b = began[hh]
        t = time[q]
        if hkind[hh] == SYNC:
            end = b + (t - ha[hh]) if f == _NO_END else f + (t - fin[i])
        elif f == _NO_END:
            end = b + (t - ha[hh])
        else:  # (a wait may have been measured as ending before its op's recorded end: critical_path.reducer_waits)
            end = max(b, f + min(0, t - fin[i])) + max(0, t - max(ha[hh], fin[i]))
        free[s] = max(free[s], end)
        head[s] = nxt[q]
        left -= 1
    return step_end, entry
