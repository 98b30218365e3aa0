"""The backward walks of causal/critical_path.py over the trace's op graph, as one loop over integer columns.

causal/critical_path.py holds the definitions (its docstring) and prepares the columns; this holds the walk itself: the
steps' critical paths and every wait's root causes, in one function, `walk_loop`, that numba compiles for large
traces (`run`, core/jit.py). A walk is a chain of dependent moves, one state at a time, each found from the instant
the walk reached (a binary search of a host's intervals, the arrival an op waited for), which no array operation
expresses: a batch of walks advanced together by numpy would take a round per part of the longest walk. Small
traces run the same function as Python, on lists (benchmarks/bench_analysis.py times both ways).

`walk_loop` is written in the Python numba compiles (core/jit.py): one function, no helpers, every container typed by
its first use.

The walk is made of nodes, one per part, made on demand and shared: a part's successor depends only on the state
the walk is in after it (inside an op at an instant, or on a rank's host at an instant before an op), never on
where the walk began or how far back it goes, so the walks of many waits go on along the same nodes."""

from __future__ import annotations

import numpy as np

from ..core import jit

KINDS = ("compute", "comm", "wait")  # a part's kind, by its code
COMPUTE, COMM, WAIT = range(3)
# a node's columns: its part's rank, kind, start, end, x, y (x: the op's row for COMM and WAIT; for COMPUTE, the
# row of the op before the span, -1 for none, and y the row of the op after it), and what comes after it: a node, -1 (none) or _PENDING (not made yet: the state to find it from, its instant
# and key, in PNOW and PKEY)
RANK, KIND, LO, END, X, Y, AFTER, PNOW, PKEY = range(9)
_PENDING = -2
_MAX_MOVES = 1_000_000  # a bound on one part's moves: a damaged trace must not make it loop
_NONE = -1  # data.table.NONE

def run(n_events: int, *args):
    """walk_loop(*args), compiled for large traces, given room enough (jit.run_in_room)."""
    if not jit.compiled(walk_loop, n_events):
        args = jit.lists(args)
    return jit.run_in_room(walk_loop, n_events, _first_room(len(args[0])), *args)


_NODES, _PARTS, _CAUSES = range(3)  # walk_loop's room (its last argument) for these; the one it lacked, returned


def _first_room(n: int):
    """The room walk_loop is given first for a trace of n events: nodes (a state of the walk: inside an op, or on its
    rank's host before it, at one instant; seldom two) and the steps' parts (each node on one path at most, but
    for the ends the steps' windows cut) for twice the events; causes (distinct spans and ops that delayed a rank)
    for a few thousand more than the events over 64. Only the rows written are resident."""
    return [2 * n + 1024, 2 * n + 1024, 4096 + n // 64]


def walk_loop(start, wait, fin, async_op, rank, hid, instance_of, culprit_row, p2p_of, p2p_send, p2p_recv,
             ha, hb, hrow, hmaxb, hoff, floor,
             s_row, s_end, s_floor,
             wj, whi, wr, wlo, g0s, g1s,
             sites, ops, gids, words, room):
    """The steps' paths and the waits' causes.

    Columns by event row: start, wait (its wait, ns), fin (its end, _NONE open), async_op, rank, hid (its rank's
    host: an index into hoff), instance_of (its collective, -1), p2p_of (its message, -1), sites, ops, gids (its
    cause key's codes). culprit_row: each collective's row of the rank waited for (-1); p2p_send, p2p_recv: each
    message's rows. The hosts' intervals (critical_path._Host): ha, hb (start, end), hrow (the op), hmaxb (the
    running maximum of ends), host h's in [hoff[h], hoff[h+1]), each host's sorted by start. floor: no walk goes
    before it (the trace's first op).

    Steps: walk from inside op s_row[i] at s_end[i] back to s_floor[i]. Causes: the walks (critical_path._walks:
    each wait's row and instant waited for, its rank and its start; walk g from wj[g0s[g]], whi[g0s[g]] over
    waits g0s..g1s).

    room: how many nodes, parts and causes its arrays hold. They are made once and never grow: numba keeps an
    array that a loop may replace alive by atomic reference counts at each of the loop's turns (the walk's
    dearest cost, once). Where one would overflow, the walk stops, returning the index of the room it lacked.

    Returns (-1, parts, part_off, keys, sums, bits): step i's parts (rank, kind, start, ns, x, y), latest first, are
    parts[part_off[i]:part_off[i + 1]]; cause k is keys[k] (rank, kind, a, b: a compute span's sites' codes, -1
    for none; otherwise its op's op and gid code), its total sums[k] and its waiting ranks as the bits of
    bits[k] (`words` 64-bit words)."""
    n = len(start)
    # the nodes, and the memo of states to nodes in columns by the state's key (row << 1 | on its host): nearly
    # every key is met at one instant only; a key met at a second instant goes to `more`
    nodes = np.empty((room[_NODES], 9), np.int64)  # (only what is written of them is resident)
    count = 0
    memo_now = np.full(2 * n, -1, np.int64)
    memo_node = np.full(2 * n, -1, np.int64)
    more = {(np.int64(0), np.int64(0)): np.int64(0)}
    more.clear()
    seen = np.full(n, -1, np.int64)  # the ops visited at one instant (a part's moves do not change it): the
    visit = 0                        # number of the part being found where it was visited last

    parts = np.empty((room[_PARTS], 6), np.int64)
    n_parts = 0
    part_off = np.zeros(len(s_row) + 1, np.int64)

    slots = {(np.int64(0), np.int64(0), np.int64(0), np.int64(0)): np.int64(0)}
    slots.clear()
    keys = np.empty((room[_CAUSES], 4), np.int64)
    sums = np.zeros(room[_CAUSES], np.int64)
    bits = np.zeros((room[_CAUSES], words), np.uint64)
    token_of = np.full(room[_CAUSES], -1, np.int64)  # slot -> the token of the ranks it holds already (see below)
    kidx = np.empty(room[_NODES], np.int64)  # node -> its cause's slot
    n_kidx = 0

    # Jobs: the steps' walks, then the waits' walks
    n_steps, n_walks = len(s_row), len(g0s)
    for job in range(n_steps + n_walks):
        if job < n_steps:
            now, key = s_end[job], s_row[job] << 1
            walk_floor = s_floor[job]
            g0 = g1 = p = 0
        else:
            g = job - n_steps
            g0, g1 = g0s[g], g1s[g]
            now, key = whi[g0], wj[g0] << 1
            walk_floor = 0
            p = g0
        ranks_token = -1  # the token naming the set of ranks still covered down this walk (wr[p:g1])
        prev = -1  # the node whose successor is being found (its AFTER is set once found)
        known = -1  # the next node when it is known already (then `now` and `key` are not read)
        while True:
            # ---- the node of the state (now, key): the memo's, or made by the walk's next part ----
            if known >= 0:
                nd, known = known, -1
            elif memo_now[key] == now:
                nd = memo_node[key]
            elif memo_now[key] != -1 and (now, key) in more:
                nd = more[(now, key)]
            else:
                row = key >> 1
                on_host = (key & 1) == 1
                x, nxt, r, h = row, -1, -1, -1
                if on_host:
                    nxt, r, h = row, rank[row], hid[row]
                emit = False
                p_kind = p_lo = p_x = p_y = 0
                a_now, a_key = -1, -1
                visit += 1
                for _ in range(_MAX_MOVES):
                    if now <= floor:
                        break
                    if not on_host:
                        seen[x] = visit
                        r, h = rank[x], hid[x]
                        st, w = start[x], wait[x]
                        if now < st:  # an arrival after the wait it ended: the clocks' error; its rank computed
                            on_host, nxt = True, x
                            continue
                        lo = max(st + w, floor)
                        if now > lo:
                            emit, p_kind, p_lo, p_x, p_y = True, COMM, lo, x, -1
                            a_now, a_key = lo, x << 1
                            break
                        if w > 0:
                            j = -1  # the row of the arrival x waited for: its collective's culprit or its peer
                            c = instance_of[x]
                            if c >= 0:
                                j = culprit_row[c]
                            elif p2p_of[x] >= 0:
                                m = p2p_of[x]
                                j = p2p_recv[m] if x == p2p_send[m] else p2p_send[m]
                            if j >= 0 and seen[j] != visit:
                                x = j
                                continue
                            lo = max(st, floor)
                            if now > lo:
                                emit, p_kind, p_lo, p_x, p_y = True, WAIT, lo, x, -1
                                a_now, a_key = lo, (x << 1) | 1
                                break
                        on_host, nxt = True, x
                        continue
                    h0, h1 = hoff[h], hoff[h + 1]
                    # the interval the host was blocked in at `now` (start < now <= end)
                    lo_k, hi_k = h0, h1  # (a binary search by hand: np.searchsorted on a slice of `ha`
                    while lo_k < hi_k:   # would cost two atomic reference counts a search)
                        mid = (lo_k + hi_k) >> 1
                        if ha[mid] < now:
                            lo_k = mid + 1
                        else:
                            hi_k = mid
                    k = at = lo_k - 1  # (the last interval that starts before `now`)
                    blocked = -1
                    while k >= h0 and hmaxb[k] >= now:
                        if hb[k] >= now:
                            blocked = k
                            break
                        k -= 1
                    if blocked >= 0:
                        k = blocked
                        y = hrow[k]
                        if async_op[y] == 0:
                            on_host, x = False, y
                            continue
                        end = fin[y]
                        lo = max(end, ha[k]) if end != _NONE else ha[k]
                        if now > lo:  # returning from wait() after the op was over
                            emit, p_kind, p_lo, p_x, p_y = True, COMM, max(lo, floor), y, -1
                            a_now, a_key = lo, (y << 1) if lo > ha[k] else (y << 1) | 1
                            break
                        if now > ha[k]:
                            on_host, x = False, y
                        else:
                            nxt = y
                        continue
                    # the interval that ended last before `now` (end < now)
                    k = at
                    best = -1
                    while k >= h0:
                        if hb[k] < now and (best < 0 or hb[k] > hb[best]):
                            best = k
                        if best >= 0 and hmaxb[k] <= hb[best]:
                            break
                        k -= 1
                    before = hrow[best] if best >= 0 else -1
                    lo = max(hb[best] if best >= 0 else floor, floor)
                    if now > lo:
                        emit, p_kind, p_lo, p_x, p_y = True, COMPUTE, lo, before, nxt
                        if before >= 0:
                            a_now, a_key = lo, (before << 1) | 1
                        break
                    if before < 0:
                        break
                    nxt = before
                if emit:
                    nd = count
                    if nd == len(nodes):
                        return _NODES, parts[:0], part_off, keys[:0], sums[:0], bits[:0]
                    nodes[nd, RANK], nodes[nd, KIND], nodes[nd, LO], nodes[nd, END] = r, p_kind, p_lo, now
                    nodes[nd, X], nodes[nd, Y] = p_x, p_y
                    if a_key < 0:
                        nodes[nd, AFTER], nodes[nd, PNOW], nodes[nd, PKEY] = -1, -1, -1
                    else:
                        nodes[nd, AFTER], nodes[nd, PNOW], nodes[nd, PKEY] = _PENDING, a_now, a_key
                    count += 1
                else:
                    nd = -1
                if memo_now[key] == -1:
                    memo_now[key], memo_node[key] = now, nd
                else:
                    more[(now, key)] = nd
            if prev >= 0:
                nodes[prev, AFTER] = nd
            # ---- the walk goes on along node nd ----
            if nd < 0:
                break
            lo, end = nodes[nd, LO], nodes[nd, END]
            if job < n_steps:  # a step's path, down to its start
                if end <= walk_floor:
                    break
                if n_parts == len(parts):
                    return _PARTS, parts[:0], part_off, keys[:0], sums[:0], bits[:0]
                parts[n_parts, 0], parts[n_parts, 1] = nodes[nd, RANK], nodes[nd, KIND]
                parts[n_parts, 2], parts[n_parts, 3] = max(lo, walk_floor), end - max(lo, walk_floor)
                parts[n_parts, 4], parts[n_parts, 5] = nodes[nd, X], nodes[nd, Y]
                n_parts += 1
                if lo < walk_floor:
                    break
            else:
                # one walk for all the waits of this arrival (a collective's 63 waiting ranks): down it, a node
                # is covered whole by the waits that began before it, in part by those that began inside it (each
                # wait only in one node, its last), and by none below their start: O(nodes + waits), not their
                # product. The waits g0..g1 are by start, latest first: the shortest drops out first
                while p < g1 and wlo[p] >= end:
                    p += 1
                    ranks_token = -1
                if p == g1:
                    break
                while nd >= n_kidx:  # the slots of the nodes made so far, in the order they were made
                    q = n_kidx
                    kind, xq, yq = nodes[q, KIND], nodes[q, X], nodes[q, Y]
                    if kind == COMPUTE:
                        key4 = (nodes[q, RANK], kind, np.int64(sites[xq]) if xq >= 0 else np.int64(-1),
                                np.int64(sites[yq]))
                    else:
                        key4 = (nodes[q, RANK], kind, np.int64(ops[xq]), np.int64(gids[xq]))
                    k = slots[key4] if key4 in slots else -1
                    if k < 0:
                        k = len(slots)
                        slots[key4] = k
                        if k == len(sums):
                            return _CAUSES, parts[:0], part_off, keys[:0], sums[:0], bits[:0]
                        keys[k, 0], keys[k, 1], keys[k, 2], keys[k, 3] = key4
                    kidx[q] = k
                    n_kidx += 1
                k = kidx[nd]
                q, ns = p, 0
                while q < g1 and wlo[q] > lo:
                    ns += end - wlo[q]
                    q += 1
                sums[k] += ns + (g1 - q) * (end - lo)
                if ranks_token < 0:
                    ranks_token = job * (n + 1) + p  # (a new one each time the set shrinks)
                if token_of[k] != ranks_token:
                    token_of[k] = ranks_token
                    for i in range(p, g1):
                        r = wr[i]
                        bits[k, r >> 6] |= np.uint64(1) << np.uint64(r & 63)
            # ---- the node after nd ----
            after = nodes[nd, AFTER]
            if after == _PENDING:
                prev = nd
                now, key = nodes[nd, PNOW], nodes[nd, PKEY]
            elif after < 0:
                break
            else:
                prev, known = -1, after
        if job < n_steps:
            part_off[job + 1] = n_parts
    return -1, parts[:n_parts], part_off, keys[:len(slots)], sums[:len(slots)], bits[:len(slots)]
