"""The head of a large trace (tracer/data/store/head.py), which the viewer shows while the whole is read: every event
of the stretch of time it covers, as the whole read has it, and nothing after; none of a file out of time order."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from disttrace.tracer.data.store import head, parallel
from disttrace.tracer.data.load import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synth import write_synthetic, write_trace_dir  # noqa: E402


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """The synthetic job (16 ranks, a straggler) as an events file in time order and as a trace dir."""
    d = tmp_path_factory.mktemp("head")
    events = d / "events.jsonl"
    write_synthetic(str(events), 20_000, 16)
    write_trace_dir(str(events), str(d / "trace"))
    return events, d / "trace"


@pytest.fixture
def small_head(monkeypatch):
    """Any trace is split for a parallel read, and its head is a few percent of it."""
    monkeypatch.setattr(parallel, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(parallel, "SHARE_BYTES", 1)
    monkeypatch.setenv(parallel.ENV, "2")
    monkeypatch.setattr(head, "HEAD_BYTES", 300_000)
    monkeypatch.setattr(head, "FILE_HEAD_BYTES", 1_000)


def by_event(table) -> dict:
    return {(r["rank"], r["id"]): r for r in map(table.row, range(len(table)))}


def test_an_events_files_head_is_its_first_events_as_the_whole_read_has_them(traces, small_head):
    events, _ = traces
    whole = load_trace(str(events), cache=False)
    got, fraction = head.read_head(parallel.plan_events_file(str(events), None))
    assert 0 < len(got) < len(whole) / 10
    assert [got.row(i) for i in range(len(got))] == [whole.row(i) for i in range(len(got))]
    assert fraction == pytest.approx(300_000 / events.stat().st_size, rel=0.01)
    assert not got.warnings


def test_an_events_file_out_of_time_order_has_no_head(traces, small_head, tmp_path):
    events, _ = traces
    lines = events.read_bytes().splitlines(keepends=True)
    lines[10], lines[500] = lines[500], lines[10]  # (a later event before an earlier one, within the head)
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_bytes(b"".join(lines))
    assert head.read_head(parallel.plan_events_file(str(shuffled), None)) is None


def test_a_trace_dirs_head_is_every_event_before_its_cut_and_none_after(traces, small_head):
    _, trace = traces
    whole = load_trace(str(trace), cache=False)
    got, fraction = head.read_head(parallel.plan_trace_dirs([str(trace)], None))
    assert 0 < len(got) < len(whole) / 5 and 0 < fraction < 0.2
    assert sorted(got.ranks) == sorted(whole.ranks)
    cut = max(got.start_ns)
    # the straggler's file is as long as the others': the head stops where the first rank's read stops
    before = {k: r for k, r in by_event(whole).items() if r["start_ns"] <= cut}
    seen = by_event(got)
    assert seen.keys() == before.keys()
    unfinished = [k for k, r in seen.items() if r["status"] == "unfinished"]
    assert len(unfinished) <= len(got.ranks)  # (an op begun before its rank's read stopped, its end not read)
    assert all(seen[k] == before[k] for k in seen.keys() - set(unfinished))
    assert all(seen[k]["start_ns"] == before[k]["start_ns"] for k in unfinished)
    assert not got.warnings and not any(info.damage for info in got.ranks.values())
