"""Collectives torch issues itself are recorded too: DDP's reducer, FSDP2, DTensor tensor parallel, functional
collectives and pipelining, checked against PyTorch's own Flight Recorder on the same real run."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from disttrace.tracer.data.load import load_trace

pytestmark = pytest.mark.slow

DTYPE_BYTES = {"Float": 4, "Long": 8, "Int": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Byte": 1, "Bool": 1}


@pytest.fixture(scope="module")
def run(traced, tmp_path_factory):
    fr_dir = tmp_path_factory.mktemp("fr")
    trace = traced("cov_all.py", nproc=2, args=(fr_dir,), summaries="off")
    fr = {r: json.loads((fr_dir / f"fr-{r}.json").read_text()) for r in (0, 1)}
    return load_trace([str(trace)]), fr


def test_every_flight_recorder_collective_is_recorded_with_its_bytes(run):
    table, fr = run
    for rank in (0, 1):
        ours = {table.seq[i]: i for i in range(len(table)) if table.rank[i] == rank and table.group_seq[i] >= 0}
        entries = [e for e in fr[rank]["entries"] if not e["is_p2p"]]
        assert len(entries) >= 20
        for e in entries:
            i = ours.get(e["op_id"])
            assert i is not None, f"rank {rank}: Flight Recorder's {e['profiling_name']} #{e['op_id']} not recorded"
            fr_op = e["profiling_name"].split(":", 1)[1]
            # gloo runs reduce_scatter as all_reduce
            assert table.op[i] == fr_op or (table.op[i], fr_op) == ("reduce_scatter", "all_reduce"), (table.row(i), e)
            nbytes = sum(math.prod(s) * DTYPE_BYTES[d] for s, d in zip(e["input_sizes"], e["input_dtypes"]))
            assert table.bytes[i] == nbytes, (table.row(i), e)
        per_op_fr = Counter(e["profiling_name"].split(":", 1)[1] for e in entries)
        per_op_ours = Counter("all_reduce" if table.op[i] == "reduce_scatter" else table.op[i] for i in ours.values())
        for op, n in per_op_fr.items():
            assert per_op_ours[op] >= n, (op, per_op_ours, per_op_fr)


def test_origins_and_call_sites_are_named(run):
    table, _ = run
    rows = [table.row(i) for i in range(len(table)) if table.rank[i] == 0]
    apis = Counter(e["api"] for e in rows)
    origins = Counter(e.get("origin") for e in rows)
    assert apis["ddp.reducer_allreduce"] == 2  # one bucket per backward, issued by DDP's C++ reducer
    assert apis["ddp.DistributedDataParallel.__init__"] == 3  # shape check + start-up broadcasts
    assert origins["fsdp.DefaultAllGather.__call__"] == 4 and origins["fsdp.DefaultReduceScatter.__call__"] == 2
    assert sum(1 for e in rows if (e.get("origin") or "").startswith("dtensor.")) >= 3
    assert {"funcol.all_reduce", "funcol.reduce_scatter_single"} <= set(apis)
    reducer = [e for e in rows if e["api"] == "ddp.reducer_allreduce"]
    # DDP's bucket all-reduce is launched from autograd: the site is the user's backward() line
    assert all(e["site"].endswith("cov_all.py:26 in <module>") for e in reducer)
    assert all(e["status"] == "ok" for e in rows)


def test_functional_collectives_complete_through_wait_tensor(run):
    table, _ = run
    for i in range(len(table)):
        if table.api[i].startswith("funcol."):
            assert table.async_op[i] and table.status[i] == "ok"
            if table.op[i] == "reduce_scatter":  # no completion callback on gloo: the wait is what we see
                assert table.wait_start_ns[i] >= table.start_ns[i] and table.end_ns[i] == table.wait_end_ns[i]


def test_pipelining_p2p_matches_the_gpipe_schedule(run):
    table, _ = run
    # GPipe, 2 stages, 4 micro-batches of 2 x 8 floats: stage 0 sends 4 activations forward and receives 4
    # gradients back; stage 1 the opposite. Each is 2 * 8 * 4 = 64 bytes.
    for rank, peer in ((0, 1), (1, 0)):
        batch = Counter((table.op[i], table.peer[i], table.bytes[i]) for i in range(len(table))
                        if table.rank[i] == rank and table.api[i] in ("isend", "irecv")
                        and (table.row(i).get("origin") or "").startswith("pipelining."))
        assert batch == Counter({("send", peer, 64): 4, ("recv", peer, 64): 4}), batch
