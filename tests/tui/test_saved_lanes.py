"""The timeline's lanes kept beside the trace's store (tui/model/saved_lanes.py): read back on the next open, they
are the lanes that building them makes; a damaged or stale file is never used."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from disttrace.tracer.analysis import analyze
from disttrace.tracer.data.load import load_trace
from disttrace.tui.model import saved_lanes
from disttrace.tui.model.store import TraceStore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synth import write_synthetic  # noqa: E402


def lanes_of(store: TraceStore) -> list:
    return [(rr.rank, rr.host, list(rr.lane.rows), list(rr.lane.starts), list(rr.lane.ends), bytes(rr.lane.cats),
             [list(c) for c in rr.lane.cum], list(rr.lane.maxend)) for rr in store.rows]


def opened(path: str) -> TraceStore:
    table = load_trace(path, settled=True)
    assert table.origin is not None  # (from its store)
    return TraceStore(table, None)


def test_kept_lanes_are_the_lanes_built_and_take_the_analysis_the_same(tmp_path):
    path = str(tmp_path / "events.jsonl")
    write_synthetic(path, 2_000, 8)
    built = opened(path)
    assert not built.lanes_kept
    built.keep_lanes()
    again = opened(path)
    assert again.lanes_kept and lanes_of(again) == lanes_of(built)
    analysis = analyze(again.table)
    assert lanes_of(again.with_analysis(analysis)) == lanes_of(built.with_analysis(analysis))
    # what a frame reads of them is the mapped file, not a copy
    assert isinstance(again.rows[0].lane.starts, memoryview) and again.rows[0].lane.starts.readonly


def test_damaged_or_stale_kept_lanes_are_built_again(tmp_path):
    path = str(tmp_path / "events.jsonl")
    write_synthetic(path, 2_000, 8)
    first = opened(path)
    first.keep_lanes()
    kept = first.table.origin.beside(saved_lanes.KIND)
    data = bytearray(Path(kept).read_bytes())
    data[len(data) // 2] ^= 0xFF  # (a byte of the columns)
    Path(kept).write_bytes(data)
    damaged = opened(path)
    assert not damaged.lanes_kept and lanes_of(damaged) == lanes_of(first)
    damaged.keep_lanes()
    assert opened(path).lanes_kept
    with open(path, "ab") as f:  # the trace changed: its store, and the lanes with it, are stale
        f.write(Path(path).read_bytes().splitlines(keepends=True)[-1].replace(b'"rank":', b'"rank":1,"x":', 1))
    os.utime(path, (1, 1))
    changed = opened(path)
    assert not changed.lanes_kept and changed.n_events == first.n_events + 1
