"""Training steps: which iteration of the user's loop each op belongs to (docs/ANALYSIS.md, "Steps").

User markers win: `disttrace.tracer.mark_step()` or torch.profiler's `step()` number each event (the reader's `step`
column), and step k is what each rank issued between its k-th and (k+1)-th marker.

Without markers, a step is one period of the repeating sequence of ops on a rank. Each op is keyed by (op, api,
group, call site, peer, bytes); the period p is the one whose longest stretch of `key[i] == key[i + p]` covers most
of the rank's ops (the smallest such p: its multiples cover no more), among the spacings between repeats of a key
(the next one, or up to `_LAGS` on: a pipeline stage alternates recv and send M times a step) or of a run of one
key. The p keys at the start of that stretch, turned to begin where the loop's iteration does (`_phase`), are the
step's signature; every later occurrence of the signature starts a step, and ops between two occurrences (an
evaluation, a checkpoint) belong to the step before. Before the stretch, the first iterations often differ only in
their sizes or by a few ops (DDP's first backward runs before its buckets are rebuilt): an earlier op with the
signature's first (op, api, group, site, peer), at most two periods and a few ops back, starts a step too, so that
step 0 is the loop's first iteration, as with markers (`for step in range(N)` and the report agree). What comes
before the first step (set-up: DDP's start-up broadcasts, pipelining's shape inference) and after the last belongs
to no step (-1).

A period whose units leave out an op that recurs between them (the loss all-reduced after 99 gradients of
one size, from one helper: only its size tells it) does not reproduce the step: that op's own spacings are tried
too, and win where they cover more (a key met 99 times in a row proposes so many spacings, its repeats c on, that
the step's was not among those tried: each op read as a step, and no straggler named). Where the unit is one op, every
op of a step the same (a step over identical layers, DDP's buckets of one size), the ops cannot tell a step of 100
from 100 steps of one: the time between them decides where it clearly can (a step's compute, forward and
optimizer, is a gap between ops `LONG_GAP` times those within it, recurring at one spacing; it must on every such
rank alike, for a straggler's delay every few steps is a long gap on its rank alone), else each op is a step and
the notes say the steps are ambiguous and how to mark them.

Steps are found per rank, then numbered alike across ranks: the ops of one collective, or the two sides of one
message, are in the same step on every rank. Leading steps unlike the steady ones (another signature, or more than
three times the median duration: a step or two of jitter on a busy machine is not warm-up; the first step from 1.3
times, or 1.1 times where that is beyond the steps' own spread) are marked warm-up.
"""

from __future__ import annotations

from array import array
from collections import Counter, deque
from statistics import median
from typing import TYPE_CHECKING

from ...data.table.columns import dense_ids, filled, groups_of, order_by, repeat_each, run_starts, stable_order
from ...data.table import NONE, EventTable
from ...units import fmt_list
from ..core.matching import finished_column
from ..core.results import Step
from ..core.window import rings
from .wait_states import reach_before

if TYPE_CHECKING:
    from ..core.tables import P2PTable

MIN_REPEATS = 2       # a sequence seen once is not a loop
_CANDIDATES = 16      # the most frequent spacings between repeats of a key tried as the period
_SAMPLE = 4096        # ops per rank whose spacings propose periods (steps up to half as long are found)
WARMUP_LONG = 3       # a leading step this many times the median one is warm-up (caches, allocator, compile)
WARMUP_FIRST = 1.3    # ... the first one, from this many; and from WARMUP_FIRST_QUIET times where that is beyond
WARMUP_FIRST_QUIET = 1.1  # WARMUP_SPREAD times the steps' own spread (their median absolute deviation) above the
WARMUP_SPREAD = 3     # median: the first step sets up every lazy thing (gloo connects each pair of ranks on its
#                       first op), from far longer than the others to only a fifth longer where the job connected
#                       some pairs before it; counted as steady, such a step moved a what-if's or its re-run's mean
#                       by a tenth of the saving
_VOTES = 4096         # collectives (and messages) sampled to number the steps alike across ranks
_LAGS = 32            # a key met up to this many times a step still proposes the step's length as a period
_WARMUP_EXTRA_OPS = 8  # ops a leading iteration may hold beyond two steady ones and still be found as a step
_ODD_KEYS = 4         # keys left out of a period's units whose spacings are tried as the period
LONG_GAP = 8          # where every op is the same, a step's boundary is a gap this many times those within a step
CLEAR = 0.8           # ... found at this share of the boundaries (the first one may have no op before it)
_GAP_FLOOR_NS = 10_000  # ... and the gaps within are taken as at least this (back-to-back ops: a Python call's time)
AMBIGUOUS = ("steps ambiguous on {ranks}: their ops are all the same (op, group, call site, size) and the "
             "time between them marks no longer step, so each op is taken as a step; if an iteration holds several, "
             "call disttrace.tracer.mark_step() at its end (or torch.profiler's step())")


def find_steps(t: EventTable, instance_rows, p2p: P2PTable) -> tuple[array, str, list[str]]:
    """(step index per event row, or -1; "marker", "detected" or "" when no step was found; notes: the ranks whose
    steps are ambiguous).

    instance_rows: each collective instance's rows (matching.Instances); with the matched messages, what ties the
    ranks' numbering together."""
    import numpy as np

    n = len(t)
    if n and (np.frombuffer(t.user_step, np.int32) != NONE).any():  # the job marked its steps
        return window_steps(t, array("i", t.user_step)), "marker", []
    step_of = filled("i", n, -1)
    steps = np.frombuffer(step_of, np.int32)  # (a view: writing it writes step_of)
    # the keys of every row, as small ints (they compare faster than tuples): (op, api, group, site, peer), and with
    # the bytes (the peer tells a pipeline stage's recv from the stage before from its recv from the stage after;
    # the api, pipelining's shape inference before its first iteration, send_object_list, from its isends)
    loose_all = dense_ids(t.op.codes, t.api.codes, t.gid, t.site.codes, t.peer)
    full_all = dense_ids(loose_all, t.bytes)
    ranks = dict(groups_of(np.frombuffer(t.rank, np.int32)))  # each rank's rows in issue order (table order)
    units = {r: u for r, rows in ranks.items() if (u := _unit(full_all[rows])) is not None}
    timed, ambiguous = _timed_units(t, ranks, units)
    for r, (_, _, p, a) in units.items():
        rows = ranks[r]
        loose = loose_all[rows].tolist()
        p, a = timed[r] if r in timed else (p, a + _phase(loose, a, p))
        starts = _starts(full_all[rows], loose, p, a)
        if not starts:
            continue
        # ops after the last step's signature that do not continue it (a final barrier) are not a step: the last
        # step is cut at its usual length
        usual = int(median(b - a for a, b in zip(starts, starts[1:])))
        if starts[-1] + usual < len(rows) and loose[starts[-1] + usual] == loose[starts[-1]]:
            starts.append(starts[-1] + usual)  # the loop's next iteration began (its sizes may differ): a hang in it
        end = min(len(rows), starts[-1] + int(usual * 1.5) + 1)
        bounds = np.array(starts + [end])
        steps[rows[starts[0]:end]] = repeat_each(np.arange(len(starts), dtype=np.int32), np.diff(bounds))
    if not (steps >= 0).any():
        return step_of, "", []
    _align(t, step_of, instance_rows, p2p)
    said = f"rank{'s' if len(ambiguous) > 1 else ''} {fmt_list(ambiguous)}"
    return step_of, "detected", [AMBIGUOUS.format(ranks=said)] if ambiguous else []


def _spacings(sample) -> list[tuple[int, int]]:
    """(spacing, how often) of the spacings between repeats of a key, between repeats of a run of one key (the
    same key, as long) and between a key and its c-th next repeat (c up to `_LAGS`) in `sample` (a numpy column),
    the most frequent first; ties in the order they are first met (every key's repeats, in order, then the runs',
    then each lag's), as a Counter filled in that order would list them. (The sample is a rank's first ops, up to
    `_SAMPLE`: the C loops over it here hold the GIL a few µs.)"""
    import numpy as np

    n = len(sample)
    if not n:
        return []
    by_key = order = np.argsort(sample, kind="stable")
    keyed = sample[order]
    same = repeat = keyed[1:] == keyed[:-1]
    spacing, met = [(order[1:] - order[:-1])[same]], [order[1:][same]]
    starts = np.flatnonzero(np.diff(sample, prepend=sample[0] - 1))  # of the runs of one key
    lengths = np.diff(np.append(starts, n))
    order = order_by(sample[starts], lengths)
    same = (sample[starts][order][1:] == sample[starts][order][:-1]) & (lengths[order][1:] == lengths[order][:-1])
    spacing.append((starts[order[1:]] - starts[order[:-1]])[same])
    met.append(starts[order[1:]][same] + n)
    # and between a key and its c-th next repeat, for a key met several times a step at uneven spacings (a
    # pipeline stage's recv and send alternating M times, then its collectives: 2, 2, 2, then 10 ops): it repeats a
    # step apart only c repeats on. (Not for a key at about even spacings, a barrier every few steps: its c-th
    # repeat would propose a multiple of its own spacing.)
    gaps = by_key[1:] - by_key[:-1]
    keys, inverse = np.unique(keyed, return_inverse=True)
    low = np.full(len(keys), n, np.int64)
    high = np.zeros(len(keys), np.int64)
    np.minimum.at(low, inverse[1:][repeat], gaps[repeat])
    np.maximum.at(high, inverse[1:][repeat], gaps[repeat])
    uneven = (high >= 2 * low)[inverse]
    for c in range(2, _LAGS + 1):
        same_c = (keyed[c:] == keyed[:-c]) & uneven[c:]
        spacing.append((by_key[c:] - by_key[:-c])[same_c])
        met.append(by_key[c:][same_c] + c * n)
    d, at = np.concatenate(spacing), np.concatenate(met)
    o = order_by(d, at)
    first = np.flatnonzero(np.diff(d[o], prepend=-1))
    counts = np.diff(np.append(first, len(o)))
    by = order_by(-counts, at[o][first])
    return list(zip(d[o][first][by].tolist(), counts[by].tolist()))


def _stretch(keys, p: int) -> tuple[int, int, int, int]:
    """(ops covered, -p, p, start) of the longest stretch where keys[i] == keys[i + p] (a numpy column)."""
    import numpy as np

    same = keys[:-p] == keys[p:] if p < len(keys) else np.zeros(0, bool)
    bounds = np.concatenate(([-1], np.flatnonzero(~same), [len(same)]))  # around the mismatches
    runs = np.diff(bounds) - 1
    k = int(np.argmax(runs))
    return int(runs[k]) + p, -p, p, int(bounds[k]) + 1


def _step_starts(keys, loose_keys: list) -> list[int]:
    """Positions in one rank's op sequence (`keys`: a numpy column) where a step starts (empty: no repeating
    sequence), read from the ops alone (find_steps reads the time between them where they cannot tell)."""
    unit = _unit(keys)
    if unit is None:
        return []
    _, _, p, a = unit
    return _starts(keys, loose_keys, p, a + _phase(loose_keys, a, p))


def _loops(stretch) -> bool:
    """Whether a stretch holds its period MIN_REPEATS times (a long spacing seen once would otherwise cover the
    most, and is no loop)."""
    return stretch[0] >= stretch[2] * MIN_REPEATS


def _unit(keys) -> tuple[int, int, int, int] | None:
    """(ops covered, -p, p, start) of the step's period on one rank (`keys`: a numpy column), or None (no loop).
    The candidate periods: the spacings between repeats of a key, and between repeats of a run of one key (a
    pipeline stage sends M activations in a row, then receives M gradients: its period is two runs long), over the
    first ops (a loop repeats from the start); each tried there, the two best of them on all."""
    if len(keys) < 2 * MIN_REPEATS:
        return None
    sample = keys[:_SAMPLE]
    tried = sorted(filter(_loops, (_stretch(sample, p) for p, count in _spacings(sample)[:_CANDIDATES]
                                   if count >= MIN_REPEATS - 1)), reverse=True)
    best = max(filter(_loops, (_stretch(keys, p) for _, _, p, _ in tried[:2])), default=None)
    if best is None:
        return None
    # a period whose units leave out an op that others hold (the loss all-reduced after 99 layers' gradients of
    # one size) is not the step: the odd op's own spacing is tried, and wins where it covers more, as any
    # candidate would (a key met 99 times in a row proposes so many spacings that the step's is not among the
    # most frequent)
    return max([best] + list(filter(_loops, (_stretch(keys, p) for p in _odd_spacings(sample, best[2], best[3])))))


def _occurrences(keys, p: int, a: int) -> list[int]:
    """Where the p keys at `a` (the step's signature) recur from `a` on, none overlapping the one before."""
    import numpy as np

    at = np.flatnonzero(keys[a:len(keys) - p + 1] == keys[a]) + a  # every occurrence of the signature from a on
    for q in range(1, p):
        at = at[keys[at + q] == keys[a + q]]
    starts = []
    i = a
    for j in at.tolist():  # (occurrences that overlap the one before are not steps)
        if j >= i:
            starts.append(j)
            i = j + p
    return starts


def _odd_spacings(sample, p: int, a: int) -> list[int]:
    """The spacings (between repeats, and between repeats of a run of one key, the most frequent of each) of the
    keys that the units of period p at `a` leave out between two of them more than once (MIN_REPEATS units): an
    op of each step that the period does not reproduce. A key left out once (an evaluation, a checkpoint) is
    not one: the units hold it once, in the step before."""
    import numpy as np

    if a >= len(sample) - p:
        return []
    at = np.array(_occurrences(sample, p, a))
    if len(at) < MIN_REPEATS:
        return []
    inside = np.zeros(len(sample) + 1, np.int64)  # +1 at each unit's start, -1 after its end: a unit's ops sum to 1
    np.add.at(inside, at, 1)
    np.add.at(inside, at + p, -1)
    pos = np.flatnonzero(np.cumsum(inside)[at[0]:at[-1]] == 0) + at[0]  # the ops left out, between the units
    # each left-out key, and how many units it was left out after
    pairs = np.unique(sample[pos] * (len(at) + 1) + np.searchsorted(at, pos, side="right"))
    keys, units = np.unique(pairs // (len(at) + 1), return_counts=True)
    spacings = set()
    order = np.argsort(-units, kind="stable")  # the keys left out after the most units first
    for key in keys[order][units[order] >= MIN_REPEATS][:_ODD_KEYS].tolist():
        where = np.flatnonzero(sample == key)
        runs = where[np.diff(where, prepend=-2) != 1]  # the first of each run of the key
        for d in (np.diff(where), np.diff(runs)):
            d = d[d > 1]
            if len(d):
                spacings.add(int(np.bincount(d).argmax()))
    return sorted(spacings)


def _starts(keys, loose_keys: list, p: int, a: int) -> list[int]:
    """Where each step starts on one rank: every occurrence of the p keys at `a` (from a on), and the earlier
    iterations that differ from them in their sizes or in a few ops (empty: fewer than MIN_REPEATS)."""
    starts = _occurrences(keys, p, a)
    # earlier iterations that differ in their sizes or in a few ops (DDP's first backward runs before its buckets
    # are rebuilt, and the second iteration's forward broadcasts the rebuilt ones): the signature's first (op,
    # group, site), as often as a step holds it (a pipeline stage sends from one line M times a step), close enough
    anchor = loose_keys[a]
    per_step = sum(1 for q in range(a, a + p) if loose_keys[q] == anchor)
    whole = set(loose_keys[a:a + p])  # what every op kind of a step is: an earlier iteration holds them all
    while True:
        near = [j for j in range(max(0, a - 2 * p - _WARMUP_EXTRA_OPS), a) if loose_keys[j] == anchor]
        if not near:
            break
        j = near[-per_step:][0]
        if not whole <= set(loose_keys[j:a]):  # not an iteration: the first one's prelude (pipelining's shape
            break                               # inference) or the set-up
        a = j
        starts.insert(0, a)
    return starts if len(starts) >= MIN_REPEATS else []


def _timed_units(t: EventTable, ranks: dict, units: dict) -> tuple[dict[int, tuple[int, int]], list[int]]:
    """(rank -> the (period, start) the time between its ops gives, the ranks whose steps stay ambiguous) for the
    ranks whose unit is one op (every op of their steps the same: the ops cannot tell a step of 100 from 100 steps
    of one). The gaps decide where they do on every such rank alike (`_gap_unit`): a delay of one rank every few
    steps (a straggler) is a long gap on that rank only, and must not be read as the step's compute."""
    import numpy as np

    one = [r for r, u in units.items() if u[2] == 1]
    if not one:
        return {}, []
    ends = finished_column(t)
    low = np.iinfo(np.int64).min
    timed = {}
    for r in one:
        rows = ranks[r]
        start = np.frombuffer(t.start_ns, np.int64)[rows]
        end = ends[rows]
        new = np.zeros(len(rows), bool)
        new[0] = True
        before = reach_before(np.where(end >= 0, end, low), new)  # the latest end of the rank's earlier ops
        gaps = np.where(before != low, np.maximum(start - before, 0), 0)
        covered, _, _, a = units[r]
        timed[r] = _gap_unit(gaps[a:a + covered])
    if any(u is None for u in timed.values()) or len({q for q, _ in timed.values()}) > 1:
        return {}, sorted(one)
    return {r: (q, units[r][3] + at) for r, (q, at) in timed.items()}, []


def _gap_unit(gaps) -> tuple[int, int] | None:
    """(period, the first step's start) of a stretch of identical ops from the time before each (`gaps`, ns: from
    the end of the rank's op before; a numpy column), or None where it shows no step. A step's boundary is its
    compute (forward, optimizer): a gap `LONG_GAP` times the gaps within the step, recurring at one spacing; the
    boundary holds such a gap at `CLEAR` of its places, and more of them than any other place does."""
    import numpy as np

    if len(gaps) < 2:
        return None
    long = np.flatnonzero(gaps > LONG_GAP * max(float(np.median(gaps)), _GAP_FLOOR_NS))
    spacing = np.diff(long)
    if len(spacing) < MIN_REPEATS or np.bincount(spacing).argmax() < 2:
        return None
    q = int(np.bincount(spacing).argmax())
    r = int(np.bincount(long % q).argmax())
    at = np.zeros(len(gaps), bool)
    at[r::q] = True
    line = LONG_GAP * max(float(np.median(gaps[~at])), _GAP_FLOOR_NS)  # the gaps within the steps, times LONG_GAP
    hits = int((gaps[at] > line).sum())
    if hits < MIN_REPEATS + 1 or hits < CLEAR * at.sum() - 1 or (gaps[~at] > line).sum() >= hits:
        return None
    return q, r


def _phase(loose_keys: list, a: int, p: int) -> int:
    """Where in the signature at `a` the loop's iteration begins: the stretch often starts inside one (a pipeline
    stage's first iteration sends other sizes, so the stretch starts at its first recv), and a step cut there would
    leave the loop's first iteration out of step 0. The signature's (op, group, site) first met in the ops leading
    to it begins the iteration (the stretch's own start where they tie)."""
    first: dict = {}
    for j in range(max(0, a - 2 * p - _WARMUP_EXTRA_OPS), a + p):
        first.setdefault(loose_keys[j], j)
    return min(range(p), key=lambda q: (first[loose_keys[a + q]], q))


def _align(t: EventTable, step_of: array, instance_rows, p2p: P2PTable) -> None:
    """Renumber each rank's steps so that one collective (or message) is in the same step on every rank: the
    shift that most of the rank's shared ops agree on, relative to the lowest rank (then to ranks aligned so far)."""
    votes: dict[tuple[int, int], Counter] = {}
    rank = t.rank

    def vote(i: int, j: int) -> None:
        si, sj = step_of[i], step_of[j]
        if si >= 0 and sj >= 0:
            votes.setdefault((rank[i], rank[j]), Counter())[sj - si] += 1

    # a sample of the shared ops is enough to agree on a shift (the votes are unanimous unless the trace is odd)
    for rows in instance_rows[::max(1, len(instance_rows) // _VOTES)]:
        if len(rows) > 1:
            i0 = rows[0]
            for j in rows[1:]:
                vote(i0, j)
                vote(j, i0)
    every = max(1, len(p2p.send) // _VOTES)
    for s, r in zip(p2p.send[::every], p2p.recv[::every]):
        if s != NONE and r != NONE:
            vote(s, r)
            vote(r, s)
    ranks = sorted({r for r, _ in votes} | {r for _, r in votes})
    if not ranks:
        return
    shared: dict[int, list[tuple[int, Counter]]] = {}  # rank -> the ranks it shares ops with, and their votes
    for (x, y), c in votes.items():
        shared.setdefault(x, []).append((y, c))
    ahead = {ranks[0]: 0}  # rank -> how many steps its numbering is ahead of the first rank's
    frontier = deque([ranks[0]])
    while frontier:  # breadth-first over the ranks that share ops
        a = frontier.popleft()
        for y, c in shared.get(a, ()):
            if y not in ahead:
                ahead[y] = ahead[a] + c.most_common(1)[0][0]
                frontier.append(y)
    # the rank furthest ahead (it found the most leading steps) keeps its numbering; the others move up to it,
    # so that no rank's first step goes below 0
    import numpy as np

    top = max(ahead.values())
    ranks = np.frombuffer(rank, np.int32)
    shift = np.zeros(int(ranks.max()) + 1, np.int32)
    for r, a in ahead.items():
        shift[r] = top - a
    steps = np.frombuffer(step_of, np.int32)
    steps += np.where(steps >= 0, shift[ranks], 0).astype(np.int32)


def build_steps(t: EventTable, step_of: array) -> list[Step]:
    """The steps' windows: per rank from the end of its op before the step to the end of its last op in it; a
    step spans the earliest rank's start to the latest rank's end. Waits and causes are filled in later.

    In numpy, each rank's rows in table order: "its op before" is the latest end among the rank's earlier rows
    that have one (its start when none has), taken at each row where the rank's step changes."""
    import numpy as np

    k_all = np.frombuffer(step_of, np.dtype(step_of.typecode)).astype(np.int64)
    n_steps = int(k_all.max()) + 1 if len(k_all) else 0
    if n_steps <= 0:
        return []
    rank = np.frombuffer(t.rank, np.int32)
    order = stable_order(rank)
    r, k = rank[order], k_all[order]
    s = np.frombuffer(t.start_ns, np.int64)[order]
    e = finished_column(t)[order]
    # the latest end before each row on its rank (the rows without one left out), else the row's start
    low = np.iinfo(np.int64).min
    before = reach_before(np.where(e >= 0, e, low), run_starts(r))
    a = np.where(before != low, before, s)
    # a rank's first row of a step: where its step differs from the one of its previous row in a step
    in_step = np.flatnonzero(k >= 0)
    rk, kk = r[in_step], k[in_step]
    first = in_step[run_starts(rk, kk)]
    lo = np.full(n_steps, 1 << 62, np.int64)
    np.minimum.at(lo, k[first], a[first])
    hi = np.full(n_steps, -1, np.int64)
    np.maximum.at(hi, kk, np.where(e[in_step] != NONE, e[in_step], s[in_step]))
    steps = [Step(i, a if b >= 0 else 0, max(b, 0), {}, {}, None) for i, (a, b) in enumerate(zip(lo.tolist(),
                                                                                               hi.tolist()))]
    outside = first_window_step(step_of) if rings(t) else 0
    for s in steps[:outside]:
        s.warmup = s.outside = True
    if not outside:  # (a window after the job's start holds none of its warm-up)
        _mark_warmup(t, step_of, steps)
    return steps


def window_steps(t: EventTable, step_of: array) -> array:
    """The job's marked steps of a black-box trace's rows (the job's numbers: a ring's ops are numbered from its
    first marker's), the steps before the window left out (-1): those before the latest of the ranks' first whole
    steps (RankInfo.ring's first_step: before its ring's first marker, a rank's step was cut by the ring)."""
    import numpy as np

    firsts = [box.get("first_step") for box in rings(t).values()]
    if not firsts or not len(step_of):
        return step_of
    first = max(f if type(f) is int else 1 << 30 for f in firsts)
    steps = np.frombuffer(step_of, np.int32)
    return array("i", np.where(steps >= first, steps, NONE).astype(np.int32).tobytes())


def first_window_step(step_of: array) -> int:
    """The first step a window's rows are in (0 where none is)."""
    import numpy as np

    steps = np.frombuffer(step_of, np.dtype(step_of.typecode))
    inside = steps[steps >= 0]
    return int(inside.min()) if len(inside) else 0


def _mark_warmup(t: EventTable, step_of: array, steps: list[Step]) -> None:
    """Leading steps unlike the steady ones: another sequence of ops (on any of a sample of ranks), or over
    `WARMUP_LONG` times the median length (the first from `WARMUP_FIRST` times, or from `WARMUP_FIRST_QUIET` times
    where the steps' spread is narrower)."""
    if len(steps) < 3:
        return
    import numpy as np

    ranks = sorted(t.ranks)
    sample = ranks[::max(1, len(ranks) // 8)]
    # the sampled ranks' rows in a step, picked in numpy (the rest are most of the table), in table order
    rows = np.flatnonzero((np.frombuffer(step_of, np.dtype(step_of.typecode)) >= 0)
                          & np.isin(np.frombuffer(t.rank, np.int32), sample))
    sigs = _signatures(t, step_of, rows, len(steps))
    by_rank: dict[int, Counter] = {}
    for (r, _), sig in sigs.items():
        by_rank.setdefault(r, Counter())[sig] += 1
    usual = {r: c.most_common(1)[0][0] for r, c in by_rank.items()}
    lengths = [s.end_ns - s.start_ns for s in steps]
    typical = median(lengths)
    spread = median(abs(n - typical) for n in lengths)
    first = min(WARMUP_FIRST * typical, max(WARMUP_FIRST_QUIET * typical, typical + WARMUP_SPREAD * spread))
    for s in steps[: len(steps) // 2]:
        odd = any(sigs[(r, s.index)] != usual[r] for r in usual if (r, s.index) in sigs)
        if not odd and s.end_ns - s.start_ns <= (first if s is steps[0] else WARMUP_LONG * typical):
            break
        s.warmup = True


def _signatures(t: EventTable, step_of: array, rows, n_steps: int) -> dict[tuple[int, int], tuple]:
    """(rank, step) -> the sequence of its ops' (op, api, group, site, peer, bytes), each as an id (equal ids: equal
    ops),
    for the table's `rows` (a numpy array, ascending); in order of each (rank, step)'s first row."""
    import numpy as np

    if not len(rows):
        return {}
    ids = dense_ids(*(np.asarray(c)[rows] for c in (t.op.codes, t.api.codes, t.gid, t.site.codes, t.peer,
                                                    t.bytes)))
    key = np.asarray(t.rank)[rows].astype(np.int64) * n_steps + np.asarray(step_of)[rows]
    keys, first, group = np.unique(key, return_index=True, return_inverse=True)
    group = group.ravel()
    bounds = np.concatenate(([0], np.cumsum(np.bincount(group)))).tolist()
    ids = ids[np.argsort(group, kind="stable")].tolist()  # each group's ids in row order, group by group
    return {divmod(int(keys[g]), n_steps): tuple(ids[bounds[g]:bounds[g + 1]])
            for g in np.argsort(first, kind="stable").tolist()}
