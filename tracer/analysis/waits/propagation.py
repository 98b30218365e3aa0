"""The chains of waits followed back (stragglers.propagated: Scalasca's propagation of wait states), as one loop
over integer columns that numba compiles for large traces (core/jit.py).

While rank a waited for rank b, if b was itself waiting for c, that stretch of a's wait was caused by c, and so on
back: a wait is cut into stretches, each with the rank at the end of its chain. Following a chain is a walk, one
stretch at a time, each found from where the last ended, so it is written as numba compiles it: one
function, no helpers, its recursion an explicit stack of at most MAX_CHAIN frames."""

from __future__ import annotations

import numpy as np

from ..core import jit

MAX_CHAIN = 16  # ranks followed back along one chain of waits


def follow(n_events: int, *args):
    """follow_loop(*args), compiled for large traces, given room enough for its parts (jit.run_in_room)."""
    if not jit.compiled(follow_loop, n_events):
        args = jit.lists(args)
    return jit.run_in_room(follow_loop, n_events, [_first_room(len(args[0]))], *args)


def _first_room(n: int) -> int:
    """Parts follow_loop is given room for first, for n records: two each (most waits are one stretch)."""
    return max(16, 2 * n)


def follow_loop(waiter, culprit, culprit_row, a, b, slot, off, s_start, s_end, s_culprit, s_row, max_chain, room):
    """The stretches of each wait (waiter, culprit, culprit_row, a, b: one per record), each with its root.

    A rank's own waiting, as disjoint stretches in time order: rank r's are s_*[off[slot[r]]:off[slot[r] + 1]]
    (slot[r] -1: it never waited) with their start, end, culprit and culprit's row. A wait [a, b) for c is followed
    back through c's stretches that overlap it: where c waited for d, that part is d's (followed back in turn);
    where c did not wait, c's. A rank already on the chain (a cycle) keeps its part; past max_chain ranks the
    chain stops.

    Returns (-1, parts, count): record k's stretches (culprit, culprit row, start, end), in time order, are the
    next count[k] rows of parts; (0, ...) where room[0] parts were too few."""
    n = len(waiter)
    parts = np.empty((room[0], 4), np.int64)
    count = np.zeros(n, np.int64)
    m = 0
    # the stack: a frame per rank on the chain whose stretches are being gone through
    f_rank = np.empty(max_chain + 1, np.int64)
    f_row = np.empty(max_chain + 1, np.int64)
    f_end = np.empty(max_chain + 1, np.int64)   # the end of the part of the wait it holds
    f_k = np.empty(max_chain + 1, np.int64)     # its next stretch
    f_stop = np.empty(max_chain + 1, np.int64)  # past its last stretch
    f_now = np.empty(max_chain + 1, np.int64)   # how far its part is cut
    for rec in range(n):
        m0 = m
        depth = 0
        # the job: (rank, row, lo, hi) to follow back; a frame is pushed when the rank has stretches to go through
        j_rank, j_row, j_lo, j_hi = culprit[rec], culprit_row[rec], a[rec], b[rec]
        pending = True
        while True:
            if pending:
                pending = False
                s = slot[j_rank] if 0 <= j_rank < len(slot) else -1
                if s < 0 or 1 + depth >= max_chain:
                    if m == len(parts):
                        return 0, parts[:0], count
                    parts[m, 0], parts[m, 1], parts[m, 2], parts[m, 3] = j_rank, j_row, j_lo, j_hi
                    m += 1
                else:
                    lo_k, hi_k = off[s], off[s + 1]
                    lo_x, hi_x = lo_k, hi_k  # (the last stretch starting at j_lo or before: a binary search by
                    while lo_x < hi_x:       # hand, as causal/backward_walk.py's)
                        mid = (lo_x + hi_x) >> 1
                        if s_start[mid] <= j_lo:
                            lo_x = mid + 1
                        else:
                            hi_x = mid
                    k = lo_x - lo_k - 1
                    f_rank[depth], f_row[depth], f_end[depth] = j_rank, j_row, j_hi
                    f_k[depth], f_stop[depth], f_now[depth] = lo_k + max(k, 0), hi_k, j_lo
                    depth += 1
            if depth == 0:
                break
            top = depth - 1
            descended = False
            while f_k[top] < f_stop[top] and s_start[f_k[top]] < f_end[top]:
                k = f_k[top]
                f_k[top] = k + 1
                sa, sb, d, drow = s_start[k], s_end[k], s_culprit[k], s_row[k]
                if sb <= f_now[top]:
                    continue
                on_chain = d == waiter[rec]
                for x in range(depth):
                    if f_rank[x] == d:
                        on_chain = True
                if on_chain:  # (a cycle: the wait leads back along the chain; this rank keeps it)
                    continue
                lo, hi = max(sa, f_now[top]), min(sb, f_end[top])
                if lo > f_now[top]:
                    if m == len(parts):
                        return 0, parts[:0], count
                    parts[m, 0], parts[m, 1], parts[m, 2], parts[m, 3] = f_rank[top], f_row[top], f_now[top], lo
                    m += 1
                f_now[top] = hi
                j_rank, j_row, j_lo, j_hi = d, drow, lo, hi
                pending = descended = True
                break
            if not descended:  # its stretches are gone through: the rest of its part is its own
                if f_now[top] < f_end[top]:
                    if m == len(parts):
                        return 0, parts[:0], count
                    parts[m, 0], parts[m, 1], parts[m, 2], parts[m, 3] = f_rank[top], f_row[top], f_now[top], f_end[top]
                    m += 1
                depth -= 1
        count[rec] = m - m0
    return -1, parts[:m], count
