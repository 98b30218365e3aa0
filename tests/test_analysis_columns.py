"""The analysis stages that run on columns (numpy) against the rules they vectorize, said one item at a time:
random small tables, every odd case of the columns (unmatched sides, a recv from any source, tags, ends missing or
before their start, sizes on one side only)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from disttrace.tracer.analysis.matching import finished_at, match_p2p
from disttrace.tracer.analysis.p2p import build_p2p
from disttrace.tracer.analysis.waits import p2p_waits
from disttrace.tracer.data.events import NONE, EventTable


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

    from disttrace.tracer.data import columns

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
