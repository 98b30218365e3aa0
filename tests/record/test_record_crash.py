"""The evidence survives the rank: ops a rank entered show as unfinished or error after it died
(SIGKILL, gloo's C++ abort, torchrun's SIGTERM, a timeout exception), from real crashing jobs."""

from __future__ import annotations

import pytest

from disttrace.tracer.data.load import load_trace

pytestmark = pytest.mark.slow


def last_op(table, rank):
    rows = [i for i in range(len(table)) if table.rank[i] == rank]
    return table.row(rows[-1])


def crashed(traced, mode):
    # torchrun reports the failed worker with exit code 1; `disttrace run` passes that on
    return load_trace([str(traced("rec_crash.py", nproc=2, args=(mode,), summaries="off", expect_rc=1))])


def test_sigkilled_rank_shows_the_op_it_was_in(traced):
    table = crashed(traced, "kill")
    ev = last_op(table, 0)
    assert (ev["op"], ev["group_seq"], ev["status"], ev["end_ns"]) == ("all_reduce", 3, "unfinished", None)
    # rank 1 was in the barrier when rank 0 died: it failed there (connection lost, or torchrun's SIGTERM)
    ev1 = last_op(table, 1)
    assert ev1["op"] == "barrier" and ev1["group_seq"] == 3 and ev1["status"] in ("error", "unfinished")


def test_size_mismatch_abort_leaves_both_ranks_in_the_all_reduce(traced):
    table = crashed(traced, "abort")
    evs = [last_op(table, r) for r in (0, 1)]
    assert [(e["op"], e["group_seq"]) for e in evs] == [("all_reduce", 3)] * 2
    assert [e["bytes"] for e in evs] == [16, 32]  # the evidence of the mismatch itself
    assert all(e["status"] in ("unfinished", "error") for e in evs)


def test_timeout_exception_is_an_error_with_its_message(traced):
    table = crashed(traced, "timeout")
    ev = last_op(table, 0)
    assert (ev["op"], ev["status"]) == ("all_reduce", "error")
    assert "RuntimeError" in ev["error"]
    assert ev["end_ns"] - ev["start_ns"] >= 2.5e9  # it failed at the 3 s process-group timeout
    # rank 1 never entered it
    assert last_op(table, 1)["op"] == "barrier"
