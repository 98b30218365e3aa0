"""The analysis stages that run on columns (numpy) against the rules they vectorize, said one item at a time:
random small tables, every odd case of the columns (unmatched sides, a recv from any source, tags, ends missing or
before their start, sizes on one side only)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from disttrace.tracer.analysis.core.matching import finished_at, match_p2p
from disttrace.tracer.analysis.comms.p2p import build_p2p
from disttrace.tracer.analysis.waits.wait_states import p2p_waits
from disttrace.tracer.data.table import NONE, EventTable


def random_table(seed: int) -> EventTable:
    rng = random.Random(seed)
    t = EventTable()
    for i in range(rng.randrange(0, 60)):
        op = rng.choice(["send", "recv", "all_reduce", "send", "recv"])
        ev = {"rank": rng.randrange(3), "op": op, "start_ns": rng.randrange(100), "id": i,
              "bytes": rng.choice([0, 8, 16])}
        if op in ("send", "recv"):
            ev["peer"] = rng.choice([0, 1, 2, None]) if op == "recv" else rng.randrange(3)
            ev["tag"] = rng.choice([None, 0, 1])
        if rng.random() < 0.8:
            ev["end_ns"] = max(0, ev["start_ns"] + rng.randrange(-5, 50))
        elif rng.random() < 0.5:  # an async op whose end is when its wait() returned
            ev.update(async_op=True, wait_start_ns=ev["start_ns"] + 1, wait_end_ns=ev["start_ns"] + rng.randrange(60))
        t.append(ev)
    t.sort()
    return t


def messages_one_by_one(t: EventTable) -> list[tuple]:
    """The messages as build_p2p's rules say them, message by message."""
    out = []
    for src, dst, _tag, order, s, r in match_p2p(t):
        ls = lr = 0
        transfer = None
        if s is not None and r is not None:
            ls, lr = p2p_waits(t, s, r)
            end = finished_at(t, r)
            if end != NONE and end - max(t.start_ns[s], t.start_ns[r]) > 0:
                transfer = end - max(t.start_ns[s], t.start_ns[r])
            size = t.bytes[s] or t.bytes[r]
        else:
            size = t.bytes[s if s is not None else r]
        out.append((src, dst, order, s, r, size, ls, lr, transfer))
    return out


@pytest.mark.parametrize("seed", range(100))
def test_messages_in_numpy_are_the_rules_one_by_one(seed):
    t = random_table(seed)
    p2p, p2p_of = build_p2p(t)
    expected = messages_one_by_one(t)
    assert [dataclasses.astuple(m) for m in p2p] == expected
    for k, (*_, s, r, _size, _ls, _lr, _tr) in enumerate(expected):
        for row in (s, r):
            if row is not None:
                assert p2p_of[row] == k
    assert sum(1 for x in p2p_of if x >= 0) == sum((m[3] is not None) + (m[4] is not None) for m in expected)


def test_the_rows_a_pattern_may_match_are_found_across_the_scans_slices(monkeypatch):
    """JsonColumn.items(pattern) scans the texts a slice of rows at a time (other threads run between slices):
    every row with a match is found, wherever the slices fall, as a test of each row would find it."""
    import re

    from disttrace.tracer.data.table import columns

    rnd = random.Random(3)
    rows = [None if rnd.random() < 0.2 else {"numel": rnd.randrange(9), "nan": rnd.choice([0, 0, 0, 2])}
            for _ in range(500)]
    col = columns.JsonColumn()
    col.extend(rows)
    pattern = re.compile(rb'"nan"\s*:\s*(?!0\s*[,}])')
    want = [(i, v) for i, v in enumerate(rows) if v and v["nan"]]
    assert len(want) > 20
    for slice_rows in (1, 3, 64, 1 << 15):
        monkeypatch.setattr(columns, "_SCAN_ROWS", slice_rows)
        assert list(col.items(pattern)) == want, slice_rows


def windows_row_by_row(t: EventTable, step_of) -> list[tuple[int, int]]:
    """Each step's (start, end) as build_steps' rule says it, one row at a time: a rank's part of a step starts
    when its op before ended (the latest end among its earlier rows; its own start when none has one) and ends
    when its last op in the step does."""
    n_steps = max(step_of, default=-1) + 1
    lo, hi = [1 << 62] * n_steps, [-1] * n_steps
    cur, prev_end = {}, {}
    for i in range(len(t)):
        k, r, s, e = step_of[i], t.rank[i], t.start_ns[i], finished_at(t, i)
        if k >= 0:
            if cur.get(r) != k:
                cur[r] = k
                lo[k] = min(lo[k], prev_end.get(r, s))
            hi[k] = max(hi[k], e if e != NONE else s)
        if e != NONE and e > prev_end.get(r, -1):
            prev_end[r] = e
    return [(lo[k] if hi[k] >= 0 else 0, max(hi[k], 0)) for k in range(n_steps)]


def warmup_row_by_row(t: EventTable, step_of, windows) -> list[bool]:
    """Which leading steps are warm-up, as _mark_warmup's rule says it: on a sample of ranks, a step whose
    sequence of (op, api, group, site, peer, bytes) is not the rank's most common one, or one over WARMUP_LONG times
    the median length (the first step: WARMUP_FIRST times, or WARMUP_FIRST_QUIET times where that is more than
    WARMUP_SPREAD median absolute deviations above the median), until the first step that is neither."""
    from collections import Counter
    from statistics import median

    from disttrace.tracer.analysis.waits.steps import WARMUP_FIRST, WARMUP_FIRST_QUIET, WARMUP_LONG, WARMUP_SPREAD

    warm = [False] * len(windows)
    if len(windows) < 3:
        return warm
    ranks = sorted(t.ranks)
    sample = set(ranks[::max(1, len(ranks) // 8)])
    sigs: dict = {}
    for i in range(len(t)):
        if step_of[i] >= 0 and t.rank[i] in sample:
            sigs.setdefault((t.rank[i], step_of[i]), []).append((t.op[i], t.api[i], t.gid[i], t.site[i], t.peer[i],
                                                                 t.bytes[i]))
    by_rank: dict = {}
    for (r, _), sig in sigs.items():
        by_rank.setdefault(r, Counter())[tuple(sig)] += 1
    usual = {r: c.most_common(1)[0][0] for r, c in by_rank.items()}
    typical = median(b - a for a, b in windows)
    spread = median(abs(b - a - typical) for a, b in windows)
    for k in range(len(windows) // 2):
        odd = any(tuple(sigs[(r, k)]) != usual[r] for r in usual if (r, k) in sigs)
        bound = WARMUP_LONG * typical
        if k == 0:
            bound = min(WARMUP_FIRST * typical, max(WARMUP_FIRST_QUIET * typical, typical + WARMUP_SPREAD * spread))
        if not odd and windows[k][1] - windows[k][0] <= bound:
            break
        warm[k] = True
    return warm


@pytest.mark.parametrize("seed", range(60))
def test_steps_windows_and_warmup_in_numpy_are_the_rules_row_by_row(seed):
    from array import array

    from disttrace.tracer.analysis.waits.steps import build_steps

    rng = random.Random(seed)
    t = EventTable()
    n_ranks, n_steps = rng.randrange(1, 12), rng.randrange(1, 9)
    base = rng.choice([0, 1_764_000_000_000_000_000])  # (epoch nanoseconds: no lift may overflow)
    for i in range(rng.randrange(0, 150)):
        ev = {"rank": rng.randrange(n_ranks), "op": rng.choice(["all_reduce", "broadcast", "send"]),
              "start_ns": base + rng.randrange(10**6), "id": i, "bytes": rng.choice([8, 8, 8, 16]),
              "site": rng.choice(["train.py:10", "train.py:10", "train.py:12"])}
        if ev["op"] == "send":
            ev["peer"] = 0
        if rng.random() < 0.8:
            ev["end_ns"] = max(0, ev["start_ns"] + rng.randrange(-5, 10**5))  # (some before their start)
        elif rng.random() < 0.5:
            ev.update(async_op=True, wait_start_ns=ev["start_ns"] + 1, wait_end_ns=ev["start_ns"] + rng.randrange(60))
        t.append(ev)
    t.sort()
    # each rank's rows mostly in step order, some out of it, some in none
    step_of = array("i", [-1 if rng.random() < 0.1 else min(n_steps - 1, i * n_steps // max(1, len(t))
                                                             + rng.choice([0, 0, 0, 0, -1, 1]))
                          for i in range(len(t))])
    steps = build_steps(t, step_of)
    windows = windows_row_by_row(t, step_of)
    assert [(s.start_ns, s.end_ns) for s in steps] == windows
    assert [s.warmup for s in steps] == warmup_row_by_row(t, step_of, windows)


@pytest.mark.parametrize("seed", range(40))
def test_union_by_key_in_numpy_is_each_key_s_union(seed):
    """union_by (keys packed into one sort key where their ranges allow, else sorted key by key; the reach of
    each key's earlier intervals by one running maximum) against union_ns, key by key."""
    import numpy as np

    from disttrace.tracer.analysis.waits.wait_states import reach_before, union_by, union_ns

    rng = np.random.default_rng(seed)
    n, n_keys = int(rng.integers(0, 200)), int(rng.integers(1, 4))
    wide = seed % 4 == 0  # key ranges whose product overflows: no packing
    keys = [rng.integers(-(1 << 40) if wide else -3, (1 << 40) if wide else 5, n) for _ in range(n_keys)]
    a = [0, 1_764_000_000_000_000_000][seed % 2] + rng.integers(0, 10**4, n)
    b = a + rng.integers(-50, 3000, n)  # (some end before they start: they add nothing)
    got_keys, got = union_by(keys, a, b)
    expect: dict = {}
    for i in range(n):
        expect.setdefault(tuple(int(k[i]) for k in keys), []).append((int(a[i]), int(b[i])))
    assert [tuple(k) for k in zip(*(c.tolist() for c in got_keys))] == sorted(expect)
    assert got.tolist() == [union_ns([(x, y) for x, y in expect[k] if y > x]) for k in sorted(expect)]
    # a row left out (int64's minimum) is reached over, never reached
    low = np.iinfo(np.int64).min
    values = np.where(rng.random(n) < 0.3, low, b)
    new = rng.random(n) < 0.2
    if n:
        new[0] = True
    group = np.cumsum(new)
    before = reach_before(values, new)
    for i in range(n):
        earlier = [int(values[j]) for j in range(i) if group[j] == group[i] and values[j] != low]
        assert before[i] == (max(earlier) if earlier else low)


@pytest.mark.parametrize("seed", range(30))
def test_order_by_packed_keys_is_lexsort_s_order(seed, monkeypatch):
    """columns.order_by (the keys and the row packed into one int64 and one unstable sort; or the leading keys that
    fit, and the rows alike in them put in order by the others) gives np.lexsort's order, ties in row order: keys
    of every integer kind, narrow (many ties) and wide (no packing past the first key, or none); and
    columns.stable_order np.argsort's stable order of each."""
    import numpy as np

    from disttrace.tracer.data.table import columns

    monkeypatch.setattr(columns, "_PACK_FROM", 2)  # (packed from two rows, not only on large tables)
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n = int(rng.integers(0, 80))
        kinds = [rng.integers(-3, 4, n), rng.integers(0, 3, n).astype(np.uint8), rng.random(n) < 0.5,
                 rng.integers(-10**6, 10**6, n).astype(np.int32), rng.integers(-(1 << 60), 1 << 60, n),
                 rng.integers(0, 3, n) << 61]
        keys = [kinds[i] for i in rng.choice(len(kinds), int(rng.integers(1, 5)))]
        assert columns.order_by(*keys).tolist() == np.lexsort(keys[::-1]).tolist()
        for k in keys:  # (a radix sort where the values span under 2^16)
            assert columns.stable_order(k).tolist() == np.argsort(k, kind="stable").tolist()


@pytest.mark.parametrize("seed", range(10))
def test_run_starts_are_the_rows_whose_keys_differ_from_the_row_before(seed):
    """columns.run_starts, the one home of "the first row of each run of equal keys" (the analyzers' groupings),
    against its rule row by row: empty and one-row columns, one key or several, runs that one key alone ends."""
    import numpy as np

    from disttrace.tracer.data.table.columns import run_starts

    rng = np.random.default_rng(seed)
    for n in (0, 1, 2, 7, 60):
        keys = [np.sort(rng.integers(0, 4, n)), rng.integers(0, 2, n).astype(np.uint8), rng.integers(-2, 2, n)]
        for k in range(1, 4):
            got = run_starts(*keys[:k])
            assert got.dtype == bool and got.tolist() == [
                i == 0 or any(key[i] != key[i - 1] for key in keys[:k]) for i in range(n)]


def quartiles_one_by_one(points: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """theory._quartiles' rule, point by point: per power-of-two bucket of volume (buckets in order of their
    first point), its points sorted by time, stably, and the len // 4-th taken."""
    buckets: dict = {}
    for x, y in points:
        buckets.setdefault(x.bit_length(), []).append((x, y))
    picked = [sorted(pts, key=lambda p: p[1])[len(pts) // 4] for pts in buckets.values()]
    return [x for x, _ in picked], [y for _, y in picked]


@pytest.mark.parametrize("seed", range(30))
def test_alpha_beta_fit_in_numpy_is_its_rule_point_by_point(seed):
    import numpy as np

    from disttrace.tracer.analysis.comms.alpha_beta import _bit_lengths, _quartiles

    rng = random.Random(seed)
    edges = [0, 1, 2, 3, 2**53 - 1, 2**53, 2**53 + 1, 2**62, 2**63 - 1, -1, -(2**62)]
    xs = edges + [rng.randrange(-2**63 + 1, 2**63) for _ in range(200)]
    assert _bit_lengths(np.array(xs, np.int64)).tolist() == [x.bit_length() for x in xs]
    points = [(rng.choice([rng.randrange(2 ** rng.randrange(1, 30)), 1024, 4096]), rng.randrange(10**6))
              for _ in range(rng.randrange(1, 120))]
    got = _quartiles(np.array([x for x, _ in points], np.int64), np.array([y for _, y in points], np.int64))
    assert got == quartiles_one_by_one(points)


def test_a_stage_beside_the_others_may_not_read_what_one_between_fills():
    """engine._check: a stage running in a thread beside the next ones must not read a result that one of them
    fills in while it runs (the critical path reads the steps' windows, not the steps that the verdict fills)."""
    import dataclasses

    from disttrace.tracer.analysis.engine import run as engine

    assert any(s.beside for s in engine.STAGES)
    engine._check(engine.STAGES)
    k = next(k for k, s in enumerate(engine.STAGES) if s.run.__name__ == "critical_paths")
    reads_steps = dataclasses.replace(engine.STAGES[k], reads=engine.STAGES[k].reads + ("steps",))
    with pytest.raises(TypeError, match="fills what critical_paths"):
        engine._check(engine.STAGES[:k] + (reads_steps,) + engine.STAGES[k + 1:])


def test_what_a_stage_beside_the_others_raises_is_raised_by_analyze(monkeypatch):
    import dataclasses

    from disttrace.tracer.analysis.engine import run as engine

    def broken(*args):
        raise ZeroDivisionError("beside")

    stages = tuple(dataclasses.replace(s, run=broken) if s.beside else s for s in engine.STAGES)
    monkeypatch.setattr(engine, "STAGES", stages)
    with pytest.raises(ZeroDivisionError, match="beside"):
        engine.analyze(random_table(3))


def test_a_large_table_s_stages_run_one_after_another(monkeypatch):
    """Beyond BESIDE_MAX_EVENTS no stage runs beside the others (two at once hold both's memory): the analysis is
    the same either way."""
    import threading

    from disttrace.tracer.analysis import to_json
    from disttrace.tracer.analysis.engine import run as engine

    t = random_table(5)
    threads = set()
    run = engine.critical_paths

    def spy(*args):
        threads.add(threading.current_thread().name)
        return run(*args)

    stages = tuple(engine.Stage(spy, s.reads, s.adds, s.label, s.at, s.fills, s.beside)
                   if s.run is run else s for s in engine.STAGES)
    monkeypatch.setattr(engine, "STAGES", stages)
    beside = to_json(engine.analyze(t))
    monkeypatch.setattr(engine, "BESIDE_MAX_EVENTS", len(t) - 1)
    after = to_json(engine.analyze(t))
    assert beside == after
    assert len(threads) == 2 and threading.main_thread().name in threads
