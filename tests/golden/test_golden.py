"""Golden outputs: `report` (text and --json), `diff` (text and --json), `export` and `runs` on committed traces,
frozen before issue 52's restructuring of tracer/analysis/ and tui/ (which must change none of them), compared
byte for byte. The cases and how they run: golden_cases.py; the goldens: out/ (cases.json holds each case's argv,
exit code and stderr); rewrite them for an intended change only, with refresh.py, naming the change in the commit.

The traces, and what each holds for the analysis:

| name (as the cases spell it) | committed at | what it is |
|---|---|---|
| tui_job.jsonl | tests/tui/data | tests/jobs/tui_job.py, 4 ranks on gloo: every collective kind, a hand-written ring of send/recv, rank 2 late once (a straggler) |
| hang.jsonl | tests/tui/data | the same job with rank 3 never entering all_reduce #5 (a hang) |
| pipeline_job.jsonl | tests/tui/data | tests/jobs/tui_pipeline_job.py: a forward-only pipeline, 4 stages x 4 micro-batches |
| pp_1f1b.jsonl | tests/tui/data | tests/jobs/pp_schedules.py --schedule=1f1b: torch.distributed.pipelining's 1F1B on 2 stages |
| gpipe_warmup.jsonl | tests/tui/data | tests/jobs/pp_gpipe_warmup.py: GPipe with a warm-up iteration |
| pipeline_demo.jsonl | tests/tui/data | `disttrace demo pipeline-parallel`: GPipe, then 1F1B |
| ddp_none/, ddp_slow/ | tests/golden/traces | trace dirs of tests/jobs/diff_job.py (4 ranks, 40 steps of DDP with a tensor-parallel pair group), --change=none and --change=slow (rank 3 80 ms slower in one span of every step: a straggler in every step); the diff pair |
| mismatch/ | tests/golden/traces | tests/jobs/verdict_mismatch.py: a size mismatch at all_reduce #3, rank 0 aborted inside it (its file's zero-filled tail cut to 4 KiB: 4 MB otherwise; the report is the same) |
| nan/ | tests/golden/traces | tests/jobs/verdict_nan.py with --summaries stats: a NaN in rank 1's input from step 3 (nonfinite) |
| damaged/ | tests/golden/traces | nan/ with rank 1's file damaged by hand: its 6th line garbled, its last record torn |
| cycles/ | tests/golden/traces | tests/jobs/runs_cases.py cycles: two runs (process-group worlds) in one trace dir |
| fr/ | tests/golden/traces | the Flight Recorder JSON dumps of tests/jobs/fr_ddp.py (gloo DDP, 3 steps, plain collectives, a subgroup) |
| nccl2.17/ | tests/data/kineto | Kineto traces of 2 ranks, NCCL 2.17 layout (device kernels, rank 1's clock 2.5 ms ahead) |
| gloo-r0.json.gz, gloo-r1.json.gz | tests/data/kineto/host/torch2.13-gloo-r{0,1}.json.gz | Kineto host traces of 2 gloo ranks (torch 2.13) |

The traces in tests/golden/traces were recorded with `disttrace run` on this repository's jobs at the commit the
goldens were first frozen at (their call sites name where they ran).

Every case runs with the store off; every case runs with it on too, twice (the store and the saved analysis
written, then read back): all three print the golden. The store-off runs of FAST are in the contributors' loop
(a report --json of each kind of trace, an export); the rest (text reports, the diffs, the large trace, every
store-on run) take ~0.1-3.5 s a case and are marked slow: run `pytest tests/golden` whole after each step of a
restructuring.
"""

from __future__ import annotations

import json

import pytest

from golden_cases import CASES, INDEX, OUT, copy_traces, normalize, normalize_text, run, traces_of

# the store-off runs in the contributors' loop: one of each kind, each well under 0.1 s on a quiet machine
FAST = ("report.tui_job.json", "report.hang.json", "report.pp_1f1b.json", "report.nan.json", "report.fr.json",
        "report.nccl2.17.json", "export.hang.json")

# read without the store: several profiler files given one by one (data/load.py, _through_store); `runs` reads the
# runs' bounds only
UNSTORED = ("report.gloo-host.txt", "report.gloo-host.json", "runs.cycles.txt")

INDEXED = json.loads(INDEX.read_text())


def _params():
    for name in CASES:
        yield pytest.param(name, False, id=f"{name}-store-off", marks=() if name in FAST else pytest.mark.slow)
        yield pytest.param(name, True, id=f"{name}-store-on", marks=pytest.mark.slow)


def _check(name: str, cwd, cache: bool) -> None:
    rc, out, err = run(CASES[name], cwd, cache)
    want = INDEXED[name]
    assert normalize(out, cwd) == (OUT / name).read_bytes(), f"{name}: stdout differs from tests/golden/out/{name}"
    assert (rc, normalize_text(err, cwd)) == (want["rc"], want["stderr"]), name


@pytest.mark.parametrize("name, cache", _params())
def test_golden(name, cache, tmp_path):
    assert INDEXED[name]["argv"] == CASES[name], f"{name}: its argv changed: refresh.py {name}"
    copy_traces(tmp_path, traces_of(CASES[name]))
    _check(name, tmp_path, cache)
    if cache:
        stores = sorted(p.name for p in tmp_path.rglob("*.arrow"))
        if name not in UNSTORED:  # (else the store's runs would try nothing)
            assert any("analysis" not in s for s in stores), (name, stores)
            if "--what-if" not in CASES[name]:  # (report --what-if recomputes: analysis/core/saved_analysis.py)
                assert any("analysis" in s for s in stores), (name, stores)
        _check(name, tmp_path, cache)  # read back from the store and the saved analysis


def test_every_golden_is_a_case():
    files = {p.name for p in OUT.iterdir()} - {INDEX.name}
    assert files == set(CASES) == set(INDEXED), "refresh.py rewrites out/ from golden_cases.CASES"
