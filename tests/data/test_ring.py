"""Black-box rings (issue 50; docs/FORMAT.md "The black box"): a ring's lines read oldest first after it wrapped,
its seams (the line the writer cut, a header one line behind) never taken for damage, and a black-box trace dir
read like any: its ranks' rank file records then their rings', the ends whose begin was overwritten dropped and
counted, the store keyed on the rings. Hand-built rings (tests/ringfiles.py writes them as the recorder does)."""

from __future__ import annotations

import json

import pytest

from ringfiles import rank_files_of, ring_lines_of, to_black_box, write_ring
from synthetic import MS, Trace
from disttrace.tracer.data.importers.ring import read_ring, read_ring_wraps
from disttrace.tracer.data.importers.runs import find_runs, find_snapshots, snapshots_note
from disttrace.tracer.data.load import find_rank_files, load_trace, trace_size


def _lines(n: int, pad: int = 0) -> list[bytes]:
    return [json.dumps({"k": "b", "i": i, "op": "barrier", "t": 1000 + i, "site": "x" * (pad + i % 7)},
                       separators=(",", ":")).encode() + b"\n" for i in range(n)]


def test_ring_without_wrap_holds_every_line(tmp_path):
    lines = _lines(20)
    assert write_ring(tmp_path / "r.ring", lines, 4096) == 0
    assert read_ring(tmp_path / "r.ring") == [x.rstrip(b"\n") for x in lines]


@pytest.mark.parametrize("lag", [False, True])
def test_wrapped_ring_holds_the_last_lines_oldest_first(tmp_path, lag):
    """After several wraps: the newest lines, in order, ending at the last one written; the line the writer cut in
    part is not among them (and, with the header one line behind, nor is anything torn: at most the newest line is
    left out)."""
    lines = _lines(500, pad=20)
    wraps = write_ring(tmp_path / "r.ring", lines, 4096, lag=lag)
    assert wraps >= 5
    got, w = read_ring_wraps(tmp_path / "r.ring")
    assert w == wraps
    ids = [json.loads(x)["i"] for x in got]
    assert ids == list(range(ids[0], ids[-1] + 1))  # consecutive: none torn, none out of order
    assert ids[-1] == (498 if lag else 499)
    assert len(got) > 4096 // 100 - 5  # the ring's worth of lines (each about 60-70 bytes)


def test_not_a_ring(tmp_path):
    (tmp_path / "x.ring").write_bytes(b"hello" * 40)
    assert read_ring(tmp_path / "x.ring") == []


def _job(steps: int = 40) -> Trace:
    """Two ranks: each step a send 0 -> 1 then an all_reduce."""
    tr = Trace(2)
    for k in range(steps):
        t = k * 10 * MS
        tr.send(0, 1, t, t + MS, 64)
        tr.recv(1, 0, t, t + MS, 64)
        tr.coll("all_reduce", {0: t + 2 * MS, 1: t + 2 * MS}, t + 3 * MS, nbytes=1024)
    return tr


def test_black_box_trace_dir_reads_its_rings(tmp_path):
    plain = rank_files_of(_job(), tmp_path / "plain")
    box = tmp_path / "box"
    wraps = to_black_box(plain, box, {0: 3000, 1: 5000})
    assert all(wraps.values())
    t = load_trace(str(box), cache=False)
    for r in (0, 1):
        ring = t.ranks[r].ring
        assert ring and ring["wraps"] and 0 < ring["ops"] < 80
        assert not t.ranks[r].damage  # an end whose begin the ring overwrote is not damage
    assert t.ranks[0].ring["ops"] < t.ranks[1].ring["ops"]  # the smaller ring holds fewer
    assert not [w for w in t.warnings if "without a begin" in w or "malformed" in w]
    assert sum(r["dropped"] for r in (t.ranks[0].ring, t.ranks[1].ring)) >= 1
    assert len(t) == t.ranks[0].ring["ops"] + t.ranks[1].ring["ops"]
    # `disttrace runs`: the ring's ops are the rank's
    (run,), _ = find_runs(find_rank_files(str(box)))
    assert run.ops == len(t)


def test_store_follows_the_rings(tmp_path, monkeypatch):
    """The trace store is keyed on the rings too: a ring written anew (a later snapshot of a running job, the
    same size) is read again, not served from the store."""
    monkeypatch.setenv("DISTTRACE_CACHE", "1")
    plain = rank_files_of(_job(), tmp_path / "plain")
    box = tmp_path / "box"
    to_black_box(plain, box, 3000)
    first = len(load_trace(str(box), settled=True))
    to_black_box(plain, box, 6000)
    again = len(load_trace(str(box), settled=True))
    assert again > first
    (ring,) = box.glob("rank-00000-*.ring")
    write_ring(ring, [], ring.stat().st_size)  # the rank file as it was; its ring of the same size, emptied
    assert len(load_trace(str(box), settled=True)) < again


def test_snapshots_are_trace_dirs_listed_beside_the_trace(tmp_path):
    """A black-box trace dir's snapshots/NNNNNN-REASON/ are trace dirs of their own: each opens like any, and the
    trace lists them (`disttrace runs`, the report's note), its own reading unchanged by them."""
    plain = rank_files_of(_job(), tmp_path / "plain")
    box = tmp_path / "box"
    to_black_box(plain, box, 3000)
    snap = box / "snapshots" / "000002-signal"
    to_black_box(plain, snap, 5000)
    (snap / "snapshot.json").write_text(json.dumps({"seq": 2, "reason": "signal", "by_rank": 1, "wall_ns": 5}))
    (box / "snapshots" / "000003-empty").mkdir()  # (one being written: no rank file yet)
    (s,) = find_snapshots(str(box))
    assert (s["path"], s["seq"], s["reason"], s["by_rank"]) == (str(snap), 2, "signal", 1)
    assert "000002-signal" in snapshots_note([str(box)]) and snapshots_note([str(plain)]) == ""
    assert len(load_trace(str(snap), cache=False)) > len(load_trace(str(box), cache=False))


def test_a_followed_ring_grows(tmp_path):
    """A live black-box trace's size (what `report --follow` and the viewer watch) grows as its rings are
    written, although a ring's file keeps its size."""
    plain = rank_files_of(_job(), tmp_path / "plain")
    box = tmp_path / "box"
    to_black_box(plain, box, 3000)
    before = trace_size([str(box)])
    (ring,) = box.glob("rank-00000-*.ring")
    write_ring(ring, ring_lines_of(plain / ring.name.replace(".ring", ".jsonl")) * 2, 3000)
    assert trace_size([str(box)]) > before and ring.stat().st_size == 3000
