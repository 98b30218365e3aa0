"""torch.compile'd jobs compile the same traced as untraced, and their collectives are still recorded.

tests/jobs/compile_modes.py runs compiled DDP (with a compiled optimizer step), FSDP2 under compile, a fullgraph=True
step that calls dist.all_reduce and a compiled functional collective, and writes what Dynamo counted: its graph
breaks with their reasons, frames, graphs, recompiles and AOT compilations. The job runs once untraced and once
under `disttrace run`; the counts must be equal (before disttrace's code was hidden from Dynamo, the traced run had
17 graph breaks against 3 and 6 AOT compilations against 1), and so must the numbers the job computed."""

from __future__ import annotations

import json
import subprocess

import orjson
import pytest

from harness import JOBS, aborted_at_exit, run_traced, torchrun_cmd

pytestmark = pytest.mark.slow


# torch 2.13 sometimes aborts a rank of this job at the interpreter's exit (harness.EXIT_ABORT). What the job did is
# complete by then (its outputs written, its trace closed by atexit), and that is what this test compares; any
# other failure, or that one before the outputs, fails it.


def _check_finished(proc, outputs: list) -> None:
    done = all(p.exists() for p in outputs)
    assert proc.returncode == 0 or (done and aborted_at_exit(proc)), proc.stderr[-3000:]
    assert done, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compile")
    plain = subprocess.run(torchrun_cmd(JOBS / "compile_modes.py", 2, [tmp / "untraced"]), capture_output=True,
                           text=True, timeout=300)
    _check_finished(plain, [tmp / f"untraced.{r}" for r in (0, 1)])
    traced = run_traced("compile_modes.py", tmp / "trace", 2, [tmp / "traced"], summaries="off", timeout=300)
    _check_finished(traced, [tmp / f"traced.{r}" for r in (0, 1)])
    load = lambda name, r: json.loads((tmp / f"{name}.{r}").read_text())  # noqa: E731
    return {r: (load("untraced", r), load("traced", r)) for r in (0, 1)}, tmp / "trace"


def test_the_compiler_does_the_same_traced_and_untraced(runs):
    counts, _ = runs
    for rank, (plain, traced) in counts.items():
        # nothing of disttrace's in the graph breaks, no extra frame, graph, recompile or AOT compilation
        assert traced["graph_breaks"] == plain["graph_breaks"], rank
        for key in ("frames", "stats", "recompiles", "aot_autograd"):
            assert traced[key] == plain[key], (rank, key)
        assert plain["stats"]["unique_graphs"] >= 3 and plain["aot_autograd"]["ok"] >= 1  # it did compile
        assert traced["results"] == plain["results"], rank


def test_collectives_inside_compiled_code_are_recorded_at_the_users_line(runs):
    _, trace = runs
    events = [orjson.loads(line) for f in sorted(trace.glob("rank-00000-*.jsonl"))
              for line in f.read_bytes().rstrip(b"\0").splitlines() if b'"k":"b"' in line]
    in_graph = [e for e in events if e.get("api") == "compiled.forward"]
    # 3 calls of the fullgraph step (its dist.all_reduce) and 3 of the functional collective, each recorded; the
    # compiled code is the graph's, and the site the user's compiled function (Dynamo's frame keeps its def line)
    assert len(in_graph) == 6, [(e["op"], e.get("api"), e["site"]) for e in events]
    assert all(e["op"] == "all_reduce" and e["site"].startswith(str(JOBS / "compile_modes.py")) for e in in_graph)
    assert sorted(e["site"].rsplit(" in ", 1)[1] for e in in_graph) == ["fullgraph_step"] * 3 + ["funcol_step"] * 3
    # DDP's bucket all-reduces from the compiled model's backward, FSDP2's all-gathers and reduce-scatters
    apis = {e["api"] for e in events}
    assert {"ddp.reducer_allreduce", "all_gather_single", "reduce_scatter_single"} <= apis, apis
