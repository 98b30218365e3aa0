"""The fast path (fastpath.py: Python-API ops recorded in ProcessGroup's methods) and the dispatcher kernel's
path (hooks.py) must record the same thing: a real 2-rank job runs the same ops both ways (tests/jobs/rec_paths.py)
with known values, and the two halves of each rank's trace are compared field by field."""

from __future__ import annotations

import re

import pytest

from harness import run_traced
from disttrace.tracer.data.load import load_trace

pytestmark = pytest.mark.slow
N_OPS = 13  # ops() in the job: 9 collectives, send/recv, isend/irecv
# the call site too: a mode's __torch_dispatch__ is not the user's line (callsite.py looks past it)
FIELDS = ("op", "api", "group_ranks", "peer", "root", "bytes", "dtype", "shape", "async_op", "status", "in", "out",
          "site")


# summaries full: the fast path's general path (begin_fields); off: its lean path (fastpath._lean_issue)
@pytest.fixture(scope="module", params=["full", "off"])
def run(tmp_path_factory, request):
    out = tmp_path_factory.mktemp("paths") / "trace"
    proc = run_traced("rec_paths.py", out, nproc=2, summaries=request.param, again=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc, request.param


def test_python_api_ops_take_the_fast_path_and_a_dispatch_mode_takes_the_kernel(run):
    proc = run[1]
    lines = re.findall(r"PATHS (\d) first=(\{.*?\}) second=(\{.*?\})", proc.stdout)
    assert len(lines) == 2, proc.stdout[-2000:]
    for _, first, second in lines:
        assert eval(first) == {"kernel": 0, "python": N_OPS}
        assert eval(second) == {"kernel": N_OPS, "python": 0}


def test_under_the_profiler_the_op_takes_the_dispatcher_and_the_profile_sees_it(run):
    proc = run[1]
    lines = re.findall(r"PROFILED (\d) kernel=(\d+) python=(\d+) c10d_op_in_profile=(True|False)", proc.stdout)
    assert sorted(lines) == [("0", "1", "0", "True"), ("1", "1", "0", "True")], proc.stdout[-2000:]


def test_both_paths_record_the_same_fields(run):
    table = load_trace([str(run[0])])
    for rank in (0, 1):
        evs = [table.row(i) for i in range(len(table)) if table.rank[i] == rank]
        assert len(evs) == 2 * N_OPS + 1  # and the profiled all_reduce; not the FakeTensorMode one
        fast, kernel = evs[:N_OPS], evs[N_OPS:2 * N_OPS]
        for a, b in zip(fast, kernel):
            assert {k: a[k] for k in FIELDS} == {k: b[k] for k in FIELDS}, (a, b)
            if a["group_seq"] is not None:
                assert b["group_seq"] == a["group_seq"] + 9  # the second run of the 9 collectives
        assert all(e["site"].endswith(" in ops") for e in fast), [e["site"] for e in fast]
        assert fast[0]["op"] == "all_reduce"
        assert fast[0]["out"]["values"] == [3.0] * 4 if run[2] == "full" else fast[0]["out"] is None
        assert [e["op"] for e in fast[-4:]] == (["send", "recv"] * 2 if rank == 0 else ["recv", "send", "send", "recv"])
