"""Build one CollectiveInstance per matched (group, group_seq): arrival skew, waits, completion, bandwidth.

The common instances (their ranks agree, the group all there, an all-to-all wait) in numpy over every instance's
rows at once; the others one at a time by `_instance`, the rules' home (tests/analysis/test_analysis.py checks every
instance of the table against it): one at a time is several times slower on a large trace."""

from __future__ import annotations

from array import array
from collections import Counter
from math import nan

from ...data.table.columns import as_int64, filled, order_by, repeat_each
from ...data.table import NONE, EventTable
from .bandwidth import busbw_factor, size_s
from ..core.matching import Instances, finished, finished_column
from ..core.results import NULL, WAIT_BARRIER, WAIT_NXN
from ..core.tables import CollectiveTable
from ..waits.wait_states import WAIT_KIND, collective_waits

_MAX_VOLUME = 2 ** 63 - 1  # the column's limit: a damaged byte count near it, times the busbw factor, passes it

_OK = {"ok"}
_ROOT_INPUT_IS_S = frozenset({"broadcast", "scatter"})  # the root's input is the payload; others may put in 0


def build_collectives(t: EventTable, buckets: Instances, traced: set[int], progress=None
                      ) -> tuple[CollectiveTable, array, list[int | None], set[int]]:
    """Instances, event row -> instance index (or -1), per instance the rank that caused its waits, and the
    instances whose ranks disagree on some argument (candidates for a mismatch).

    The common instance (its ranks agree on every argument, every rank of the group there once, an all-to-all
    wait whose ops all ended after the last arrival) is built in numpy, all at once; the others one by one
    (`_instance`), which holds every rule and is the reference the numpy path is tested against."""
    import numpy as np

    expected_cache: dict[int, tuple[int, ...]] = {}

    def expected_of(g: int) -> tuple[int, ...]:
        expected = expected_cache.get(g)
        if expected is None:
            grp = t.groups[g]
            expected = expected_cache[g] = tuple(r for r in grp.ranks if r in traced) or grp.ranks
        return expected

    n_inst = len(buckets)
    sizes = np.diff(buckets.offsets)
    rows, first = buckets.rows, buckets.offsets[:-1]
    inst = repeat_each(np.arange(n_inst), sizes)  # each row's instance
    instance_of = filled("i", len(t), -1)  # 4 bytes a row, not a pointer and an int object
    np.frombuffer(instance_of, np.int32)[rows] = inst
    v = _Common(t, rows, first, sizes, inst, np.array([len(expected_of(g)) for g in range(len(t.groups))] + [0], np.int64))
    culprits: list[int | None] = np.where(v.common, v.culprit, -1).tolist()
    suspects: set[int] = set()
    slow = np.flatnonzero(~v.common).tolist()
    if progress is not None:
        progress(0.0, "collectives")
    step = max(1, len(slow) // 20)
    done = {}
    for n, k in enumerate(slow):
        if progress is not None and n % step == 0:
            progress(n / len(slow), "collectives")
        rows_k = buckets[k]
        done[k] = _instance(t, rows_k, expected_of(t.gid[rows_k[0]]))
        culprits[k] = done[k]["culprit"]
        if done[k]["suspect"]:
            suspects.add(k)
    return v.table(t, sizes, first, rows, done), instance_of, culprits, suspects


class _Common:
    """The instances' columns in numpy, right for the common ones (`common`)."""

    def __init__(self, t: EventTable, rows, first, sizes, inst, n_expected) -> None:
        import numpy as np

        def agree(col) -> "np.ndarray":  # per instance: its rows' values are all one
            c = np.asarray(col)[rows]
            return np.maximum.reduceat(c, first) == np.minimum.reduceat(c, first)

        self.i0 = i0 = rows[first]
        op = as_int64(t.op.codes)[i0]
        self.op_code = op
        nxn = np.array([WAIT_KIND.get(name) in (WAIT_NXN, WAIT_BARRIER) for name in t.op.values] + [False], bool)
        self.is_async = np.frombuffer(t.async_op, np.uint8)[i0] != 0
        start = np.frombuffer(t.start_ns, np.int64)[rows]
        end = np.where(self.is_async[inst], finished_column(t)[rows],
                       np.frombuffer(t.end_ns, np.int64)[rows])
        self.latest = np.maximum.reduceat(start, first)
        self.skew = self.latest - np.minimum.reduceat(start, first)
        self.last_end = np.maximum.reduceat(end, first)
        self.waits = self.latest[inst] - start
        rank = np.frombuffer(t.rank, np.int32)[rows].astype(np.int64)
        # the first row to arrive last (its rank caused the waits)
        at = np.flatnonzero(start == self.latest[inst])
        self.culprit = rank[at[np.flatnonzero(np.diff(inst[at], prepend=-1))]]  # (inst[at] ascends)
        # a rank twice (a damaged trace) or the group's ranks not all there
        by = order_by(inst, rank)
        twice = np.zeros(len(first), bool)
        same = (inst[by][1:] == inst[by][:-1]) & (rank[by][1:] == rank[by][:-1])
        twice[inst[by][1:][same]] = True
        gid = np.frombuffer(t.gid, np.int32)[i0]
        self.gid, self.n = gid, n_expected[gid]
        self.nbytes = np.frombuffer(t.bytes, np.int64)[i0]
        self.status_ok = np.array([v == "ok" for v in t.status.values] + [False], bool)[as_int64(t.status.codes)[i0]]
        self.root = as_int64(t.root)[i0]
        # the busbw factor and S per (op, group size): a few pairs
        width = int(self.n.max()) + 1 if len(self.n) else 1
        pairs, which = np.unique(op * width + self.n, return_inverse=True)  # (one integer key: a quick sort)
        factor, times = np.array([[f(t.op.values[o], m) for o, m in zip(*(x.tolist() for x in divmod(pairs, width)))]
                                  for f in (busbw_factor, _size_times)]).reshape(2, -1)
        self.factor = factor[which.ravel()]
        self.s = self.nbytes * times.astype(np.int64)[which.ravel()]
        self.volume = self.s * self.factor
        self.common = (agree(t.op.codes) & agree(t.status.codes) & agree(t.async_op) & agree(t.dtype.codes)
                       & agree(t.root) & agree(t.bytes) & agree(t.shape.codes) & nxn[op] & ~twice
                       & (np.minimum.reduceat(end, first) >= self.latest) & (sizes >= self.n)
                       & (self.volume < 2.0 ** 62))

    def table(self, t: EventTable, sizes, first, rows, done: dict) -> CollectiveTable:
        """The table: the common instances' columns, the others' from `done` (instance -> _instance's values)."""
        import numpy as np

        n = len(sizes)
        complete = self.status_ok.copy()
        duration = np.where(complete, self.last_end - self.latest, NULL)
        s = self.s.astype(np.float64)
        bw = complete & (duration > 0) & (self.s > 0) & (np.array([v != "barrier" for v in t.op.values] + [True],
                                                                      bool)[self.op_code])
        algbw = np.full(n, nan)
        algbw[bw] = s[bw] / duration[bw]
        busbw = algbw * self.factor
        cols = {"gid": self.gid.astype(np.int64),
                "group_seq": np.frombuffer(t.group_seq, np.int64)[self.i0], "bytes": self.nbytes.copy(),
                "skew_ns": self.skew, "duration_ns": duration, "algbw_gbps": algbw, "busbw_gbps": busbw,
                "root": self.root.copy(), "complete": complete, "is_async": self.is_async.copy(),
                "last_arrival": self.culprit.copy(),
                "volume_bytes": np.minimum(self.volume, _MAX_VOLUME).astype(np.int64)}
        kinds = np.array([WAIT_KIND.get(v, "") for v in t.op.values] + [""], object)[self.op_code]
        op_names = np.array(list(t.op.values) + [""], object)[self.op_code]
        lengths = sizes.copy()
        for k, d in done.items():
            op_names[k], kinds[k] = d["op"], d["kind"]
            for name in ("gid", "group_seq", "bytes", "skew_ns", "root", "complete", "is_async", "last_arrival",
                         "volume_bytes"):
                cols[name][k] = d[name]
            cols["duration_ns"][k] = NULL if d["duration_ns"] is None else d["duration_ns"]
            cols["algbw_gbps"][k] = nan if d["algbw"] is None else d["algbw"]
            cols["busbw_gbps"][k] = nan if d["busbw"] is None else d["busbw"]
            lengths[k] = len(d["rows"])
        # the rows and their waits: the common instances' as they came, the others' as _instance kept them
        offset = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offset[1:])
        out_rows = np.empty(int(offset[-1]), np.int64)
        out_waits = np.empty(int(offset[-1]), np.int64)
        keep = repeat_each(self.common, sizes)
        to = repeat_each(offset[:-1] - first, sizes) + np.arange(len(rows))
        out_rows[to[keep]] = rows[keep]
        out_waits[to[keep]] = self.waits[keep]
        for k, d in done.items():
            out_rows[offset[k]:offset[k + 1]] = d["rows"]
            out_waits[offset[k]:offset[k + 1]] = d["waits"]
        return CollectiveTable.of(t, op_names.tolist(), kinds.tolist(), cols, out_rows, out_waits, offset,
                                  {k: d["missing"] for k, d in done.items() if d["missing"]})


def _size_times(op: str, n: int) -> int:
    """nccl-tests' S over the per-rank input size."""
    return size_s(op, 1, n)


def _instance(t: EventTable, rows: list[int], expected: tuple[int, ...]) -> dict:
    """One instance's columns (CollectiveTable's), its culprit and whether its ranks disagree on some argument (a
    suspect, which problems/checks.py compares in detail), from its rows."""
    rank_c, start_c, end_c, bytes_c, root_c = t.rank, t.start_ns, t.end_ns, t.bytes, t.root
    # the text and shape columns are dictionary-encoded: their codes compare as the values do, and faster
    op_c, status_c, dtype_c, shape_c = t.op.codes, t.status.codes, t.dtype.codes, t.shape.codes
    op_names, status_names = t.op.values, t.status.values
    async_c = t.async_op
    i0 = rows[0]
    # one set over the rows says whether the ranks agree on op, status, async, dtype, root and size (the common
    # case); the others are suspects
    sig = {(op_c[i], status_c[i], async_c[i], dtype_c[i], root_c[i], bytes_c[i]) for i in rows}
    shapes = [shape_c[i] for i in rows]
    suspect = False
    if len(sig) == 1:
        op, status, is_async, _, _, nbytes = next(iter(sig))
        op = op_names[op]
        all_ok = status_names[status] == "ok"
        if shapes.count(shapes[0]) != len(shapes):
            suspect = True
    else:
        suspect = True
        op = op_names[op_c[i0]]
        if len({x[0] for x in sig}) > 1:  # a mismatch: take the majority's op, on a tie the lowest rank's (never
            # the first to arrive: two runs of one desync named the one op, then the other)
            op = op_names[Counter(op_c[j] for j in sorted(rows, key=lambda j: rank_c[j])).most_common(1)[0][0]]
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
        waits = [latest - s for s in starts]
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
    if len(set(ranks)) < len(ranks):  # a rank twice (a damaged trace): as in a dict keyed by rank, the last wins
        last = {r: k for k, r in enumerate(ranks)}.values()
        rows, waits = [rows[k] for k in last], [waits[k] for k in last]
    return {"op": op, "kind": kind, "gid": t.gid[i0], "group_seq": t.group_seq[i0], "rows": rows, "waits": waits,
            "bytes": nbytes, "skew_ns": latest - min(starts), "duration_ns": duration, "algbw": algbw,
            "busbw": busbw, "root": NONE if root is None else root, "complete": complete, "is_async": is_async,
            "last_arrival": ranks[starts.index(latest)], "volume_bytes": min(int(s * factor), _MAX_VOLUME),
            "missing": missing, "culprit": culprit, "suspect": suspect}
