"""Build one CollectiveInstance per matched (group, group_seq): arrival skew, waits, completion, bandwidth.

One pass over the instances' rows; lists per instance rather than per-event objects, so a million events
cost a few seconds, not minutes."""

from __future__ import annotations

from array import array
from collections import Counter

from ..data.events import NONE, EventTable
from .bandwidth import busbw_factor, size_s
from .matching import finished
from .model import WAIT_BARRIER, WAIT_NXN
from .tables import CollectiveTable
from .waits import WAIT_KIND, collective_waits

_MAX_VOLUME = 2 ** 63 - 1  # the column's limit: a damaged byte count near it, times the busbw factor, passes it

_OK = {"ok"}
_ROOT_INPUT_IS_S = frozenset({"broadcast", "scatter"})  # the root's input is the payload; others may put in 0


def build_collectives(t: EventTable, buckets: list[list[int]], traced: set[int], progress=None
                      ) -> tuple[CollectiveTable, array, list[int | None], set[int]]:
    """Instances, event row -> instance index (or -1), per instance the rank that caused its waits, and the
    instances whose ranks disagree on some argument (candidates for a mismatch)."""
    rank_c, start_c, end_c, bytes_c, root_c = t.rank, t.start_ns, t.end_ns, t.bytes, t.root
    # the text and shape columns are dictionary-encoded: their codes compare as the values do, and faster
    op_c, status_c, dtype_c, shape_c = t.op.codes, t.status.codes, t.dtype.codes, t.shape.codes
    op_names, status_names = t.op.values, t.status.values
    async_c = t.async_op
    groups = t.groups
    instance_of = array("i", [-1]) * len(t)  # 4 bytes a row, not a pointer and an int object
    out = CollectiveTable(t)
    culprits: list[int | None] = []
    suspects: set[int] = set()
    expected_cache: dict[int, tuple[int, ...]] = {}
    step = max(1, len(buckets) // 20)
    for n_inst, rows in enumerate(buckets):
        if progress is not None and n_inst % step == 0:
            progress(n_inst / max(1, len(buckets)), "collectives")
        i0 = rows[0]
        g = t.gid[i0]
        grp = groups[g]
        expected = expected_cache.get(g)
        if expected is None:
            expected = expected_cache[g] = tuple(r for r in grp.ranks if r in traced) or grp.ranks
        # one set over the rows says whether the ranks agree on op, status, async, dtype, root and size (the
        # common case); the others are suspects whose arguments problems.py compares in detail
        sig = {(op_c[i], status_c[i], async_c[i], dtype_c[i], root_c[i], bytes_c[i]) for i in rows}
        shapes = [shape_c[i] for i in rows]
        if len(sig) == 1:
            op, status, is_async, _, _, nbytes = next(iter(sig))
            op = op_names[op]
            all_ok = status_names[status] == "ok"
            if shapes.count(shapes[0]) != len(shapes):
                suspects.add(n_inst)
        else:
            suspects.add(n_inst)
            op = op_names[op_c[i0]]
            if len({x[0] for x in sig}) > 1:  # a mismatch: take the majority's op
                op = op_names[Counter(op_c[j] for j in rows).most_common(1)[0][0]]
            all_ok = {status_names[x[1]] for x in sig} == _OK
            is_async = any(x[2] for x in sig)
            nbytes = max([bytes_c[i] for i in rows])
        ranks = [rank_c[i] for i in rows]
        starts = [start_c[i] for i in rows]
        ends = [end_c[i] for i in rows]
        if is_async and NONE in ends:  # an async op whose completion was not seen was over when wait() returned
            ends = finished(t, rows)
        latest = max(starts)
        root = root_c[i0]
        root = None if root == NONE else root
        kind = WAIT_KIND[op]
        if (kind is WAIT_NXN or kind is WAIT_BARRIER) and min(ends) >= latest:
            waits = [latest - s for s in starts]  # the common case, inline (NONE ends are < latest)
            culprit = ranks[starts.index(latest)]
        else:
            waits, culprit = collective_waits(kind, ranks, starts, ends, root)
        n = len(expected)
        missing = () if len(rows) >= n else tuple(r for r in expected if r not in ranks)
        complete = not missing and NONE not in ends and all_ok
        if op in _ROOT_INPUT_IS_S and root is not None and root in ranks:
            nbytes = bytes_c[rows[ranks.index(root)]]
        factor = busbw_factor(op, n)
        s = size_s(op, nbytes, n)
        duration = algbw = busbw = None
        if complete:
            duration = max(ends) - latest
            if duration > 0 and s > 0 and op != "barrier":
                algbw = s / duration
                busbw = algbw * factor
        for i in rows:
            instance_of[i] = n_inst
        if len(set(ranks)) < len(ranks):  # a rank twice (a damaged trace): as in a dict keyed by rank, the last wins
            last = {r: k for k, r in enumerate(ranks)}.values()
            rows, waits = [rows[k] for k in last], [waits[k] for k in last]
        out.append(op, g, t.group_seq[i0], rows, waits, nbytes, kind, latest - min(starts), duration, algbw, busbw,
                   root, complete, is_async, ranks[starts.index(latest)], min(int(s * factor), _MAX_VOLUME), missing)
        culprits.append(culprit)
    return out, instance_of, culprits, suspects
