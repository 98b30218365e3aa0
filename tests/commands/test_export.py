"""`disttrace export --format chrome`: a real traced job (tests/jobs/ex_p2p.py, known messages) exported and checked
against the Chrome Trace Event format's rules, plus unit tests of the mapping on synthetic tables."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections import defaultdict

import pytest

from harness import job, run_disttrace
from disttrace.tracer.analysis import analyze
from disttrace.tracer.data.table import NONE, EventTable
from disttrace.tracer.commands.export import to_chrome
from disttrace.tracer.data.load import load_trace

_KNOWN_M = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def validate_chrome(doc: dict) -> dict:
    """Check a Chrome trace against the format's rules; returns {flow id: (s, f)}. Raises AssertionError."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    num = (int, float)
    flows: dict = defaultdict(dict)
    slices: dict = defaultdict(list)
    for k, e in enumerate(doc["traceEvents"]):
        ph = e.get("ph")
        assert isinstance(e.get("name"), str) and e["name"], e
        assert isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), e
        if ph == "M":
            assert e["name"] in _KNOWN_M and isinstance(e.get("args"), dict), e
            continue
        assert isinstance(e.get("ts"), num) and not isinstance(e["ts"], bool) and e["ts"] >= 0, e
        if ph == "X":
            assert isinstance(e.get("dur"), num) and e["dur"] >= 0, e
            assert isinstance(e.get("args"), dict), e
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        elif ph in ("s", "f"):
            assert "id" in e, e
            assert ph not in flows[e["id"]], f"flow id {e['id']} has two '{ph}' events"
            if ph == "f":
                assert e.get("bp") == "e", e
                assert "s" in flows[e["id"]], f"flow {e['id']}: 'f' before its 's' in the file"
            flows[e["id"]][ph] = (k, e)
        elif ph == "C":
            assert isinstance(e.get("args"), dict) and e["args"], e
            assert all(isinstance(v, num) for v in e["args"].values()), e
        else:
            raise AssertionError(f"unexpected phase {ph!r}: {e}")
    pairs = {}
    for fid, d in flows.items():
        assert set(d) == {"s", "f"}, f"flow {fid} does not pair up: {d}"
        (ks, s), (kf, f) = d["s"], d["f"]
        assert ks < kf and s["ts"] <= f["ts"], (s, f)
        for ev in (s, f):  # each end binds to a slice of its track: it lies inside one
            assert any(a <= ev["ts"] <= b for a, b in slices[(ev["pid"], ev["tid"])]), ev
        pairs[fid] = (s, f)
    for track, spans in slices.items():  # one track: slices never overlap (Perfetto wants them nested)
        spans.sort()
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            assert b0 >= a1 - 1e-3, (track, (a0, a1), (b0, b1))
    return pairs


@pytest.fixture(scope="module")
def exported(traced, tmp_path_factory):
    trace = traced("ex_p2p.py", nproc=2)
    out = tmp_path_factory.mktemp("export") / "out.json"
    p = run_disttrace("export", str(trace), "--format", "chrome", "-o", str(out))
    assert p.returncode == 0, p.stderr
    return trace, out, json.loads(out.read_bytes())


@pytest.mark.slow
def test_real_trace_is_a_valid_chrome_trace_with_one_flow_per_message(exported):
    trace, out, doc = exported
    J = job("ex_p2p")
    pairs = validate_chrome(doc)
    a = analyze(load_trace([str(trace)]))
    matched = [m for m in a.p2p if m.send is not None and m.recv is not None]
    assert len(matched) == len(J.MESSAGES) + J.ASYNC_MESSAGES
    p2p_flows = [(s, f) for s, f in pairs.values() if s["cat"] == "p2p"]
    # an arrow whose recv ended before its send began (the ranks' aligned clocks disagree by more than a short
    # message takes: it happens on a loaded machine) is left out, and counted; every other message has its arrow
    t = a.table
    skewed = [m for m in matched if t.end_ns[m.recv] != NONE and t.end_ns[m.recv] < t.start_ns[m.send]]
    assert len(skewed) <= 1, skewed
    assert len(p2p_flows) == len(matched) - len(skewed)
    assert doc["otherData"]["flows_left_out"] == len(skewed)
    # each arrow goes from the sender's send slice to the receiver's recv slice, in message order
    got = defaultdict(list)
    for s, f in sorted(p2p_flows, key=lambda sf: sf[0]["ts"]):
        got[(s["pid"], f["pid"])].append(s["id"])
    want = defaultdict(int)
    for src, dst, _ in J.MESSAGES:
        want[(src, dst)] += 1
    want[(1, 0)] += J.ASYNC_MESSAGES
    for m in skewed:
        want[(m.src, m.dst)] -= 1
    assert {k: len(v) for k, v in got.items()} == {k: n for k, n in want.items() if n}
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    sends = sorted((e for e in xs if e["name"] == "send" and e["args"]["api"] == "send"), key=lambda e: e["ts"])
    assert [(e["pid"], e["args"]["peer"], e["args"]["bytes"]) for e in sends] == J.MESSAGES
    # the late first send: the receiver's recv slice carries its Late Sender wait
    first_recv = min((e for e in xs if e["name"] == "recv" and e["pid"] == 1), key=lambda e: e["ts"])
    assert first_recv["args"]["wait_kind"] == "late_sender"
    assert first_recv["args"]["wait_ns"] >= J.LATE_SEND_S * 1e9 * 0.8
    # collectives: one arrow from the last-arriving rank to each other rank of the group
    coll_flows = [(s, f) for s, f in pairs.values() if s["cat"] == "collective"]
    assert len(coll_flows) == sum(len(c.events) - 1 for c in a.collectives if c.last_arrival is not None) == 5
    for s, f in coll_flows:
        assert s["pid"] != f["pid"]
    # processes and tracks are named; timestamps are relative to the first event
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    host = a.table.ranks[0].host
    assert names == {0: f"rank 0 ({host})", 1: f"rank 1 ({host})"}
    assert min(e["ts"] for e in xs) == 0
    ops = [e for e in xs if e["cat"] != "schedule"]  # (the analysis may read the messages as a pipeline's schedule)
    assert len(ops) == len(a.table)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600


@pytest.mark.slow
def test_bytes_in_flight_counter_returns_to_zero(exported):
    _, _, doc = exported
    by_rank = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            by_rank[e["pid"]].append((e["ts"], e["args"]["bytes"]))
    assert set(by_rank) == {0, 1}
    for rank, pts in by_rank.items():
        assert [p[0] for p in pts] == sorted(p[0] for p in pts)
        assert all(v >= 0 for _, v in pts) and pts[-1][1] == 0
        assert max(v for _, v in pts) >= 1 << 16  # the async all_reduce's 64 KiB overlaps the isends


@pytest.mark.slow
def test_cli_errors_are_one_line(exported, tmp_path):
    trace, _, _ = exported
    p = run_disttrace("export", str(trace), "--format", "svg", "-o", str(tmp_path / "x.json"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    p = run_disttrace("export", str(tmp_path / "missing"), "-o", str(tmp_path / "x.json"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "no such file" in p.stderr
    assert not (tmp_path / "x.json").exists()
    p = run_disttrace("export", str(trace), "-o", str(tmp_path / "no" / "dir" / "x.json"))
    assert p.returncode == 2 and "cannot write" in p.stderr and "Traceback" not in p.stderr
    p = run_disttrace("export", str(trace), "-o", "-")
    assert p.returncode == 0 and validate_chrome(json.loads(p.stdout))


@pytest.mark.slow
def test_export_and_flight_recorder_import_load_neither_torch_nor_textual():
    code = ("import sys, disttrace.tracer.commands.export, disttrace.tracer.data.importers.flightrec; "
            "print(sorted(m for m in ('torch', 'textual') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stdout + p.stderr


# -- unit tests on synthetic tables ------------------------------------------------------------------------------

def _ev(rank, op, start, end, **kw):
    ev = {"rank": rank, "op": op, "start_ns": start, "end_ns": end, "group": "0", "group_ranks": [0, 1],
          "bytes": 100, "host": "h"}
    ev.update(kw)
    return ev


def _table(evs):
    t = EventTable()
    for e in evs:
        t.append(e)
    t.sort()
    return t


def test_unfinished_op_runs_to_the_end_of_the_trace():
    t = _table([
        _ev(0, "all_reduce", 1_000, 5_000, group_seq=0), _ev(1, "all_reduce", 3_000, 5_500, group_seq=0),
        _ev(0, "all_reduce", 10_000, None, group_seq=1),          # rank 1 never arrives: a hang
        _ev(1, "barrier", 9_000, 20_000, group="1", group_ranks=[1], group_seq=0),
    ])
    doc = to_chrome(analyze(t))
    validate_chrome(doc)
    xs = sorted((e for e in doc["traceEvents"] if e["ph"] == "X"), key=lambda e: (e["ts"], e["pid"]))
    hung = [e for e in xs if e["args"]["status"] == "unfinished"]
    assert len(hung) == 1 and hung[0]["pid"] == 0
    assert hung[0]["ts"] == 9.0 and hung[0]["dur"] == 10.0  # from 10 µs to the trace's last end, 20 µs (t0 = 1 µs)
    first = xs[0]
    assert (first["ts"], first["dur"], first["args"]["wait_ns"], first["args"]["wait_kind"]) == \
        (0.0, 4.0, 2_000, "wait_at_nxn")
    # the hung op's bytes never leave rank 0's counter
    c0 = [e["args"]["bytes"] for e in doc["traceEvents"] if e["ph"] == "C" and e["pid"] == 0]
    assert c0[-1] == 100


def test_overlapping_async_ops_get_separate_tracks_and_odd_values_survive():
    t = _table([
        _ev(0, "all_reduce", 0, 10_000, group_seq=0, async_op=True, extra_big=1 << 70),
        _ev(0, "all_reduce", 1_000, 4_000, group_seq=1, async_op=True, shape=[[[[1]]]]),
        _ev(1, "all_reduce", 0, 10_000, group_seq=0), _ev(1, "all_reduce", 1_000, 4_000, group_seq=1),
    ])
    doc = json.loads(json.dumps(to_chrome(analyze(t))))
    validate_chrome(doc)
    tracks = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e["ph"] == "X"}
    assert tracks == {(0, 0), (0, 1), (1, 0), (1, 1)}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names[(0, 0)] == "collectives" and names[(0, 1)] == "collectives (2)"
    big = [e for e in doc["traceEvents"] if e["ph"] == "X" and "extra_big" in e["args"]]
    assert big[0]["args"]["extra_big"] == str(1 << 70)


def test_an_arrow_against_the_clock_is_left_out_and_counted():
    g = {"group": "0", "group_ranks": [0, 1], "bytes": 8}
    t = _table([{**g, "rank": 0, "op": "send", "peer": 1, "start_ns": 100, "end_ns": 200},
                {**g, "rank": 1, "op": "recv", "peer": 0, "start_ns": 10, "end_ns": 50},   # done before its send
                {**g, "rank": 0, "op": "send", "peer": 1, "start_ns": 300, "end_ns": 400},
                {**g, "rank": 1, "op": "recv", "peer": 0, "start_ns": 290, "end_ns": 450}])
    doc = to_chrome(analyze(t))
    pairs = validate_chrome(doc)
    assert doc["otherData"]["flows_left_out"] == 1 and len(pairs) == 1
    (s, f), = pairs.values()
    assert (s["pid"], s["ts"], f["pid"], f["ts"]) == (0, 0.29, 1, 0.29)  # the later of the two starts, 300 ns


def test_a_pipeline_stage_has_a_track_of_its_schedule():
    """Each rank of a pipeline gets the track 'pipeline schedule (stage S)': its forwards and backwards as
    slices named by micro-batch (the analysis' pipeline.schedule), in order, never overlapping."""
    from test_schedule import gpipe_sync

    tr, truth = gpipe_sync(2, 4, tf=10, tb=20)
    a = analyze(tr.table())
    doc = to_chrome(a)
    validate_chrome(doc)
    names = {(e["pid"], e["args"]["name"]) for e in doc["traceEvents"] if e["ph"] == "M" and e["tid"] == 2000
             and e["name"] == "thread_name"}
    assert names == {(0, "pipeline schedule (stage 0)"), (1, "pipeline schedule (stage 1)")}
    t0 = doc["otherData"]["t0_ns"]
    cells = [e for e in doc["traceEvents"] if e.get("cat") == "schedule"]
    assert len(cells) == len(truth) == 32
    for e in cells:
        args = e["args"]
        start, end = truth[(args["iteration"], e["pid"], e["name"][0], args["micro_batch"])]
        assert e["name"] == f"{e['name'][0]}{args['micro_batch']}" and e["tid"] == 2000
        assert e["ts"] == pytest.approx((start - t0) / 1000) and e["dur"] == pytest.approx((end - start) / 1000)
        assert args["kind"] == {"F": "forward", "B": "backward"}[e["name"][0]] and args["stage"] == e["pid"]
    rank0 = [e["name"] for e in sorted(cells, key=lambda e: e["ts"]) if e["pid"] == 0 and e["args"]["iteration"] == 0]
    assert rank0 == ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]
