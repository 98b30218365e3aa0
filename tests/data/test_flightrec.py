"""Import of PyTorch Flight Recorder dumps (tracer/flightrec.py) against what disttrace recorded of the same run.

tests/jobs/fr_ddp.py runs gloo DDP (a Linear, a few steps) and plain collectives with TORCH_FR_BUFFER_SIZE set,
under `disttrace run`; each rank dumps its Flight Recorder record as JSON and as a pickle. Both recordings of
the one run must agree on every collective: op, group, group_seq, backend sequence number and bytes."""

from __future__ import annotations

import json
import os
import pickle

import orjson
import pytest

from harness import JOBS, job, run_disttrace, traced_fr_run
from disttrace.tracer.errors import TraceError
from disttrace.tracer.data.importers.flightrec import is_fr_dir, load_fr_dir
from disttrace.tracer.data.table import EventTable
from disttrace.tracer.data.load import load_trace


@pytest.fixture(scope="module")
def fr_run(traced, tmp_path_factory):
    return traced_fr_run(traced, tmp_path_factory)


def _collectives(table):
    """rank -> [(group ranks, group_seq, op, bytes, seq, dtype)] in group_seq order per group."""
    out: dict[int, list] = {}
    for i in range(len(table)):
        r = table.row(i)
        if r["group_seq"] is not None:
            out.setdefault(r["rank"], []).append(
                (tuple(r["group_ranks"]), r["group"], r["group_seq"], r["op"], r["bytes"], r["seq"], r["dtype"],
                 r["api"]))
    return {rank: sorted(v, key=lambda x: (x[1], x[2])) for rank, v in out.items()}


@pytest.mark.slow
def test_fr_import_matches_what_disttrace_recorded(fr_run):
    trace, dumps = fr_run
    J = job("fr_ddp")
    ours = _collectives(load_trace([str(trace)]))
    fr_table = load_trace([str(dumps / "json")])
    theirs = _collectives(fr_table)
    assert sorted(ours) == sorted(theirs) == [0, 1]
    for rank in (0, 1):
        assert len(ours[rank]) == len(theirs[rank]), rank
        for a, b in zip(ours[rank], theirs[rank]):
            ranks_a, group_a, gseq_a, op_a, bytes_a, seq_a, dtype_a, api_a = a
            ranks_b, group_b, gseq_b, op_b, bytes_b, seq_b, dtype_b, api_b = b
            assert (ranks_a, group_a, gseq_a, bytes_a, seq_a, dtype_a) == (ranks_b, group_b, gseq_b, bytes_b, seq_b,
                                                                           dtype_b), (a, b)
            assert api_b == f"fr:gloo:{op_b}"
            if api_a == "reduce_scatter_tensor":
                # gloo implements reduce_scatter_tensor as an all_reduce of the whole input, and Flight Recorder
                # names the op by what gloo ran: same bytes (the input), different name.
                assert (op_a, op_b) == ("reduce_scatter", "all_reduce")
            else:
                assert op_a == op_b, (a, b)
    # Ground truth of the job itself, seen through Flight Recorder
    r0 = theirs[0]
    world = [c for c in r0 if c[0] == (0, 1) and c[1] == "world"]
    ddp = [c for c in ours[0] if c[7] == "ddp.reducer_allreduce"]
    assert len(ddp) == J.STEPS
    assert [c[2] for c in world] == list(range(len(world)))  # group_seq is 0-based and dense
    plain = [c for c in r0 if c[4] == J.PLAIN_ELEMS * 4 and c[3] == "all_reduce"]
    assert len(plain) == 1
    sub = [c for c in r0 if c[1] != "world"]
    assert [(c[3], c[2], c[4]) for c in sub] == [("broadcast", 0, J.PLAIN_ELEMS * 4)]
    # every op finished; its end is the lower bound (gloo records no end time): never before a peer's start
    for i in range(len(fr_table)):
        assert fr_table.status[i] == "ok"
        assert fr_table.row(i)["fr_end"] == "lower_bound"
    assert any("no member lists for groups 1" in w for w in fr_table.warnings)


@pytest.mark.slow
def test_pickle_dumps_read_the_same_and_give_the_user_line(fr_run):
    _, dumps = fr_run
    js = load_trace([str(dumps / "json")])
    pk = load_trace([str(dumps / "pickle")])
    strip = lambda t: [{k: v for k, v in t.row(i).items() if k != "site"} for i in range(len(t))]  # noqa: E731
    assert strip(js) == strip(pk)
    script = str(JOBS / "fr_ddp.py")
    sites = {pk.site[i] for i in range(len(pk))}
    assert sites and all(s.startswith(script + ":") and s.endswith(" in main") for s in sites), sites
    assert all(not s for s in js.site)  # the JSON dump carries no stack frames


@pytest.mark.slow
def test_cli_reads_a_flight_recorder_dir(fr_run):
    _, dumps = fr_run
    d = str(dumps / "json")
    ev = run_disttrace("events", d)
    assert ev.returncode == 0, ev.stderr
    lines = [json.loads(x) for x in ev.stdout.splitlines()]
    assert len(lines) == len(load_trace([d])) and {x["rank"] for x in lines} == {0, 1}
    rep = run_disttrace("report", "--json", d)
    assert rep.returncode in (0, 1), rep.stderr
    assert "Traceback" not in rep.stderr
    assert json.loads(rep.stdout)
    # what `disttrace view DIR` loads in its worker thread, without the terminal
    from disttrace.tui.loading import load_store

    store, _ = load_store([d])
    assert len(store.table) == len(lines) and len(store.analysis.collectives) == len(lines) // 2


# -- safety: nothing read from a dump runs code ----------------------------------------------------------------

class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _fr_json(rank_entries: list, pg_config: dict | None = None, version: str = "2.10") -> bytes:
    return orjson.dumps({"version": version, "pg_config": pg_config or {}, "pg_status": {}, "entries": rank_entries})


def _entry(name, seq, t, pg=("0", "default_pg"), sizes=((4,),), dtypes=("Float",), **kw):
    e = {"profiling_name": name, "process_group": list(pg), "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
         "record_id": seq, "input_sizes": [list(s) for s in sizes], "input_dtypes": list(dtypes),
         "output_sizes": [list(s) for s in sizes], "output_dtypes": list(dtypes), "state": "completed",
         "retired": True, "time_created_ns": t, "time_discovered_started_ns": None,
         "time_discovered_completed_ns": None}
    e.update(kw)
    return e


@pytest.mark.slow
def test_a_pickle_that_names_a_class_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "pwned"
    d = tmp_path / "fr"
    d.mkdir()
    (d / "fr_trace_rank_0").write_bytes(pickle.dumps({"version": "2.10", "entries": [_Evil(str(marker))]},
                                                     protocol=2))
    assert is_fr_dir(str(d))
    with pytest.raises(TraceError, match="no readable Flight Recorder dumps"):
        load_trace([str(d)])
    assert not marker.exists()
    # next to a good dump: the bad one is skipped with a warning saying why
    (d / "fr_trace_rank_1.json").write_bytes(_fr_json([_entry("gloo:all_reduce", 1, 1000)]))
    t = load_trace([str(d)])
    assert len(t) == 1 and not marker.exists()
    assert any("refused to load posix.mkdir" in w for w in t.warnings), t.warnings
    # the CLI: the good rank is read, one warning line, no traceback
    (d / "fr_trace_rank_1.json").unlink()
    p = run_disttrace("events", str(d))
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not marker.exists()


# -- the mapping, on synthetic NCCL-like dumps (fields as torch 2.13 writes them) -----------------------------

def test_nccl_dump_mapping(tmp_path):
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
           "5": {"name": "5", "desc": "pp", "ranks": "[2, 3]"}}
    for rank in (2, 3):
        ents = [
            _entry("nccl:all_reduce", 1, 1_000_000, sizes=[(1024,)], dtypes=["BFloat16"], duration_ms=0.5,
                   time_discovered_started_ns=1_000_100),
            _entry("nccl:send 0->1" if rank == 2 else "nccl:recv 1<-0", 0, 2_000_000, pg=("5", "pp"),
                   sizes=[(8, 2)], dtypes=["Float"], collective_seq_id=0, p2p_seq_id=1,
                   time_discovered_completed_ns=2_500_000),
            _entry("nccl:all_gather", 2, 3_000_000, state="scheduled", retired=False, sizes=[(3,)], dtypes=["Long"]),
        ]
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(_fr_json(ents, cfg))
    t = EventTable()
    load_fr_dir(str(tmp_path), t)
    rows = sorted((t.row(i) for i in range(len(t))), key=lambda r: (r["rank"], r["start_ns"]))
    ar, p2p, ag = rows[0:3]
    assert (ar["op"], ar["api"], ar["group_ranks"], ar["group_seq"], ar["bytes"], ar["dtype"]) == \
        ("all_reduce", "fr:nccl:all_reduce", [0, 1, 2, 3], 0, 2048, "bfloat16")
    assert (ar["start_ns"], ar["end_ns"], ar["status"]) == (1_000_000, 1_000_100 + 500_000, "ok")
    assert (p2p["op"], p2p["peer"], p2p["group_ranks"], p2p["group_seq"], p2p["bytes"]) == ("send", 3, [2, 3], None, 64)
    assert p2p["end_ns"] == 2_500_000
    assert rows[4]["op"] == "recv" and rows[4]["peer"] == 2
    assert (ag["status"], ag["end_ns"], ag["bytes"]) == ("unfinished", None, 24)
    assert not t.warnings


def test_newer_version_warns_and_reads_what_it_knows(tmp_path):
    (tmp_path / "rank0.json").write_bytes(_fr_json([_entry("gloo:barrier", 1, 5, sizes=[], dtypes=[]),
                                                    _entry("gloo:mystery_op", 2, 6)], version="3.1"))
    t = load_trace([str(tmp_path)])
    assert [t.op[i] for i in range(len(t))] == ["barrier"]
    assert any("newer" in w for w in t.warnings) and any("mystery_op" in w for w in t.warnings)


def test_not_a_flight_recorder_dir(tmp_path):
    (tmp_path / "notes1.txt").write_text("hello")
    assert not is_fr_dir(str(tmp_path))
    with pytest.raises(TraceError, match="not a disttrace trace"):
        load_trace([str(tmp_path)])
