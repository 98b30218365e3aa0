"""The first read of a large trace split across processes (tracer/data/store/parallel.py), and the typed decoding of an
events file's lines (tracer/data/importers/event_batches.py): each makes the very table that the in-process, event-by-event
reader makes, damage, warnings and line numbers included."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import orjson
import pytest

from disttrace.tracer.data import store
from disttrace.tracer.data.importers import event_batches
from disttrace.tracer.data.store import codec, parallel
from disttrace.tracer.data.importers.events_files import read_jsonl
from disttrace.tracer.errors import TraceError
from disttrace.tracer.data.load import load_trace

from test_store import EVENTS, _copy, age, assert_same, opened_from_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synth import write_synthetic  # noqa: E402


@pytest.fixture
def split(monkeypatch):
    """Any trace is split, in three shares where it can be."""
    monkeypatch.setattr(parallel, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(parallel, "SHARE_BYTES", 1)
    monkeypatch.setenv(parallel.ENV, "3")
    built = []
    real = parallel.build

    def counted(plan, *args, **kwargs):
        built.append(len(plan.shares))
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(parallel, "build", counted)
    return built


@pytest.fixture
def careful(monkeypatch):
    """read(path, **kw): the in-process reader, event by event (no typed decoding), without the store."""
    def read(path, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(event_batches, "decode", lambda lines: None)
            m.setenv(parallel.ENV, "1")
            return load_trace(path, cache=False, **kwargs)
    return read


def sorted_ranks(t):
    t.ranks = dict(sorted(t.ranks.items()))  # (their order is the order of first sight, batch by batch)
    return t


def damaged_events_file(path: Path, runs: int = 1) -> str:
    """The synthetic job's events with odd events (unknown keys, nulls, errors) and damage spread through it:
    lines that are not JSON, a summary that is not UTF-8, a number past a double, a wrong type, a blank line."""
    write_synthetic(str(path), 6000, 16)
    lines = path.read_bytes().splitlines(keepends=True)
    odd = [orjson.dumps(ev) + b"\n" for ev in EVENTS] + [
        b"not json\n",
        b'{"rank":2,"op":"send","start_ns":5,"in":{"a":"\xff"}}\n',
        b'{"rank":2,"op":"send","start_ns":6,"in":{"a":1e999}}\n',
        b'{"rank":"2","op":"send","start_ns":7}\n',
        b"\n",
        b'{"rank":3,"op":"recv","start_ns":8,"in":null,"out":{"x":[1,2]},"group_ranks":null}\n',
    ]
    out = []
    for k, line in enumerate(lines):
        out.append(line)
        if k % 997 == 500 and k > len(lines) / 2:  # (the first in a later share than the first)
            out += odd
    if runs > 1:  # the same events again as later runs (`disttrace events --run all`)
        out = [line if not line.startswith(b"{") else b'{"v":3,"run":%d,' % r + line[1:]
               for r in range(1, runs + 1) for line in out]
    path.write_bytes(b"".join(out))
    age(str(path))
    return str(path)


def test_typed_decoding_makes_the_careful_readers_table(tmp_path, careful, monkeypatch):
    path = damaged_events_file(tmp_path / "events.jsonl")
    monkeypatch.setenv(parallel.ENV, "1")
    fast = load_trace(path, cache=False)
    slow = careful(path)
    assert "malformed line(s)" in slow.warnings[-1] and len(slow) > 6000
    assert slow.extra.any() and slow.error.any() and slow.in_.any() and slow.out.any()
    assert_same(sorted_ranks(slow), sorted_ranks(fast))


def test_typed_decoding_declines_what_orjson_would_not_read_back():
    ok = b'{"rank":0,"op":"send","start_ns":1,"in":{"a":1}}'
    assert event_batches.decode([ok]) is not None
    for bad in (b'{"rank":0,"op":"send","start_ns":1,"in":{"a":"\x80"}}',   # not UTF-8 (the decoder skips it)
                b'{"rank":0,"op":"send","start_ns":1,"in":{"a":1e400}}'):   # past a double: orjson refuses
        t = read_jsonl_lines([ok, bad])
        assert len(t) == 1 and "skipped 1 malformed line(s) (line 2: " in t.warnings[0]
    assert event_batches.decode([b'{"rank":true,"op":"send","start_ns":1}']) is None  # a bool for an int
    assert event_batches.decode([b'{"rank":0,"op":"send","start_ns":1,"new_key":1}']) is None  # kept in extra


def read_jsonl_lines(lines):
    import tempfile
    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as fh:
        fh.write(b"\n".join(lines) + b"\n")
    try:
        return read_jsonl(fh.name)
    finally:
        os.unlink(fh.name)


@pytest.mark.slow
def test_a_split_events_file_reads_as_one(tmp_path, split, careful):
    path = damaged_events_file(tmp_path / "events.jsonl")
    first = load_trace(path)
    assert split == [3] and opened_from_store(first)
    assert os.path.isfile(store.cache_path([path], None, False))
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]  # no part, no temp file left
    slow = careful(path)
    # the first malformed line is numbered in the whole file, though a worker read it from the middle
    lines = Path(path).read_bytes().split(b"\n")
    first_bad = lines.index(b"not json") + 1
    assert first_bad > len(lines) / 2 and f"(line {first_bad}: " in slow.warnings[-1]
    assert_same(sorted_ranks(slow), sorted_ranks(first))
    again = load_trace(path)
    assert split == [3] and opened_from_store(again)  # opened, not read again
    assert_same(sorted_ranks(slow), sorted_ranks(again))


@pytest.mark.slow
def test_more_shares_than_workers_are_read_a_few_at_a_time(tmp_path, split, careful, monkeypatch):
    """A trace larger than the workers' shares may be (MAX_SHARE_BYTES) is cut into more shares, which at most
    workers() processes read at once: the table is the same."""
    path = damaged_events_file(tmp_path / "events.jsonl")
    monkeypatch.setattr(parallel, "MAX_SHARE_BYTES", os.path.getsize(path) // 7 + 1)  # (7 shares)
    monkeypatch.setenv(parallel.ENV, "2")
    running, most = [], []
    popen = parallel.subprocess.Popen

    class Counted(popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            running.append(self)
            most.append(sum(p.poll() is None for p in running))

    monkeypatch.setattr(parallel.subprocess, "Popen", Counted)
    t = load_trace(path)
    assert split == [7] and len(running) == 7 and max(most) <= 2 and opened_from_store(t)
    assert_same(sorted_ranks(careful(path)), sorted_ranks(t))


@pytest.mark.slow
def test_a_split_read_of_one_run_of_several(tmp_path, split, careful):
    path = damaged_events_file(tmp_path / "events.jsonl", runs=3)
    for run in (2, None):
        t = load_trace(path, run=run)
        assert_same(sorted_ranks(careful(path, run=run)), sorted_ranks(t))
        assert t.run == (run or 3) and len(t) == len(careful(path, run=1))  # (each run: the same events)
    assert "holds 3 runs; reading the last" in t.warnings[0]
    assert split == [3, 3]


@pytest.mark.slow
def test_a_newer_format_in_a_later_share_is_the_readers_message(tmp_path, split, careful):
    path = tmp_path / "events.jsonl"
    write_synthetic(str(path), 3000, 16)
    with open(path, "ab") as fh:
        fh.write(b'{"v":99,"rank":0,"op":"send","start_ns":1}\n')
    age(str(path))
    with pytest.raises(TraceError) as slow:
        careful(str(path))
    with pytest.raises(TraceError) as fast:
        load_trace(str(path))
    assert str(fast.value) == str(slow.value) and "newer disttrace" in str(fast.value) and split == [3]


@pytest.mark.slow
def test_a_file_of_no_events_says_so_split_or_not(tmp_path, split, careful):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"not json\n" * 5000)
    age(str(path))
    with pytest.raises(TraceError) as slow:
        careful(str(path))
    with pytest.raises(TraceError) as fast:
        load_trace(str(path))
    assert str(fast.value) == str(slow.value) == f"{path}: no disttrace events in this file" and split == [3]


@pytest.mark.slow
def test_workers_that_fail_leave_the_read_to_the_process(tmp_path, split, careful, monkeypatch):
    path = damaged_events_file(tmp_path / "events.jsonl")
    monkeypatch.setattr(parallel.sys, "executable", "/bin/false")  # every worker exits 1 at once
    t = load_trace(path)
    assert split == [3] and opened_from_store(t)  # read in process, and its store written as ever
    assert_same(sorted_ranks(careful(path)), sorted_ranks(t))
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]


@pytest.mark.slow
def test_a_read_only_trace_dir_is_split_through_the_temp_dir(tmp_path, split, careful, monkeypatch):
    path = damaged_events_file(tmp_path / "events.jsonl")
    real = codec.create_temp

    def refuse_beside(folder):
        if os.path.samefile(folder, tmp_path):
            raise PermissionError("read-only")
        return real(folder)

    monkeypatch.setattr(codec, "create_temp", refuse_beside)
    t = load_trace(path)
    assert split == [3] and t.origin is None and len(t) == len(careful(path))
    assert not os.path.exists(store.cache_path([path], None, False))


@pytest.mark.slow
def test_a_split_trace_dir_reads_as_one(traced, tmp_path, split, careful):
    t = _copy(traced("rec_ops.py", nproc=4), tmp_path)
    first = load_trace(t)
    assert split == [3] and opened_from_store(first)
    assert_same(careful(t), first)


@pytest.mark.slow
def test_a_split_damaged_trace_dir_reads_as_one(traced, tmp_path, split, careful):
    t = _copy(traced("rec_crash.py", nproc=2, args=("kill",), summaries="off", expect_rc=1), tmp_path)
    rank_file = os.path.join(t, sorted(f for f in os.listdir(t) if f.startswith("rank-"))[-1])
    with open(rank_file, "ab") as fh:
        fh.write(b'\x00\x00{"k":"b","id":999,"t":')
    age(t)
    first = load_trace(t)
    assert split == [2] and first.damage_summary()
    assert_same(careful(t), first)


def test_the_parts_of_a_killed_reader_are_removed_by_the_next(tmp_path):
    gone = tmp_path / ".part-999999999-ab12-0.arrow"   # (no such process)
    mine = tmp_path / f".part-{os.getpid()}-ab12-0.arrow"  # a reader at work
    other = tmp_path / "events.jsonl.disttrace.arrow"
    for f in (gone, mine, other):
        f.write_bytes(b"x")
    parallel._remove_stale_parts(str(tmp_path))
    assert not gone.exists() and mine.exists() and other.exists()


# -- a trace of several nodes' dirs, merged from each dir's own store (tracer/data/store/node_stores.py) -------------

def _node_dirs(tmp_path: Path, nodes: int = 3, restart_in: int | None = None) -> list[str]:
    """The synthetic job's trace dir cut into `nodes` dirs of consecutive ranks, as `disttrace run` on each node
    leaves them; `restart_in`: that dir also holds a later run of its ranks (a restart after the job)."""
    from synth import write_trace_dir

    write_synthetic(str(tmp_path / "events.jsonl"), 6000, 12)
    write_trace_dir(str(tmp_path / "events.jsonl"), str(tmp_path / "all"))
    names = sorted(os.listdir(tmp_path / "all"))
    dirs = [str(tmp_path / f"node{k}") for k in range(nodes)]
    for k, name in enumerate(names):
        os.makedirs(dirs[k * nodes // len(names)], exist_ok=True)
        os.replace(tmp_path / "all" / name, os.path.join(dirs[k * nodes // len(names)], name))
    if restart_in is not None:
        d = dirs[restart_in]
        first = sorted(n for n in os.listdir(d) if n.startswith("rank-"))[0]
        text = Path(d, first).read_bytes().replace(b'"pid":', b'"pid":9', 1)
        meta, rest = text.split(b"\n", 1)
        later = orjson.loads(meta)
        later["mono_ns"] = later.get("mono_ns", 0) + 10**12  # (started after the first run)
        later["wall_ns"] = later.get("wall_ns", 0) + 10**12
        Path(d, "rank-%05d-later-9.jsonl" % later["rank"]).write_bytes(orjson.dumps(later) + b"\n" + rest)
    age(*dirs)
    return dirs


@pytest.fixture
def node_reads(monkeypatch):
    """How many rank files were parsed, and whether the nodes' stores were merged."""
    from disttrace.tracer.data.store import node_stores
    from disttrace.tracer.data.importers import rank_files as reader

    counts = {"files": 0, "merged": 0}
    real_read, real_merge = reader.read_rank_files, node_stores.merge

    def read(files, *args, **kwargs):
        counts["files"] += len(files)
        return real_read(files, *args, **kwargs)

    def merge(*args):
        done = real_merge(*args)
        counts["merged"] += done
        return done

    monkeypatch.setattr(reader, "read_rank_files", read)
    monkeypatch.setattr(node_stores, "merge", merge)
    from dataclasses import replace

    from disttrace.tracer.data import load
    monkeypatch.setattr(load, "IMPORTERS", (replace(load.IMPORTERS[0], merge=merge),) + load.IMPORTERS[1:])
    return counts


def test_the_nodes_stores_merge_into_the_table_a_read_makes(tmp_path, node_reads):
    """Each node stored its dir (its `disttrace run`); the dirs opened together are merged from those stores,
    parsing no rank file, into the very table a read of the whole makes; opened again, that store is opened."""
    dirs = _node_dirs(tmp_path)
    for d in dirs:
        assert not opened_from_store(load_trace(d, cache=False)) and opened_from_store(load_trace(d))
    node_reads["files"] = 0
    merged = load_trace(dirs)
    assert node_reads == {"files": 0, "merged": 1} and opened_from_store(merged)
    assert_same(load_trace(dirs, cache=False), merged)
    again = load_trace(dirs)
    assert node_reads["merged"] == 1 and again.origin.path == merged.origin.path


@pytest.mark.parametrize("case", ["a node without its store", "a node's store stale", "a restart in a node's dir",
                                  "the dirs in another order"])
def test_what_the_nodes_stores_do_not_hold_exactly_is_read(tmp_path, node_reads, case):
    """A node's dir with no store, or a stale one; a dir holding a later run too (the whole's runs are not the
    stores'); the dirs given in another order than their ranks' (the whole's files would interleave): the trace
    is read, to the table a read makes."""
    dirs = _node_dirs(tmp_path, restart_in=1 if case.startswith("a restart") else None)
    for d in dirs[1:] if case == "a node without its store" else dirs:
        load_trace(d)
    if case == "a node's store stale":
        one = os.path.join(dirs[2], sorted(n for n in os.listdir(dirs[2]) if n.startswith("rank-"))[0])
        os.utime(one, ns=(0, os.stat(one).st_mtime_ns + 10**9))
    if case == "the dirs in another order":
        dirs = dirs[::-1]
    node_reads["files"] = 0
    whole = load_trace(dirs)
    assert node_reads["merged"] == 0 and node_reads["files"] > 0 and opened_from_store(whole)
    assert len(whole.runs) == (2 if case.startswith("a restart") else 1)
    assert_same(load_trace(dirs, cache=False), whole)


@pytest.mark.slow
def test_a_split_black_box_trace_dir_reads_as_one(tmp_path, split, careful):
    """A black-box trace dir (rank files and their rings, tests/ringfiles.py) split across workers makes the table
    the in-process reader makes, each rank's ring window (RankInfo.ring) included."""
    from ringfiles import rank_files_of, to_black_box
    from test_ring import _job

    box = tmp_path / "box"
    to_black_box(rank_files_of(_job(), tmp_path / "plain"), box, {0: 3000, 1: 5000})
    age(str(box))
    first = load_trace(str(box))
    assert split == [2] and opened_from_store(first)
    whole = careful(str(box))
    assert_same(whole, first)
    assert {r: i.ring for r, i in first.ranks.items()} == {r: i.ring for r, i in whole.ranks.items()}
    assert all(i.ring["wraps"] for i in first.ranks.values())
