"""Memory's ground truth on real jobs (tests/jobs/mem_train.py under `disttrace run --memory`, 2 ranks on gloo):
the scheme recognized and each rank's parameters, gradients and optimizer state within 5% of the formula (DDP,
ZeroRedundancyOptimizer as ZeRO-1, FSDP2 as ZeRO-3); in the DDP job, the leak named from step 20 on rank 1 (report
exits 1) and rank 0's extra buffer named as its imbalance."""

import json

import pytest

from harness import job, run_disttrace

pytestmark = pytest.mark.slow
M = job("mem_train")
SCHEMES = {"ddp": "ddp", "zero": "zero1", "fsdp2": "fsdp2"}


def _report(traced, scheme):
    out = traced("mem_train.py", args=(scheme,), summaries="off", run_args=("--memory",))
    proc = run_disttrace("report", "--json", out)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _predicted(scheme: str, kind: str) -> float:
    """The seed's formula for fp32 Adam (4 + 4 + 8 bytes a value), by hand: ZeRO-1 shards the optimizer state,
    ZeRO-3 everything."""
    per_value = {"params": 4, "grads": 4, "optimizer": 8}[kind]
    sharded = scheme == "fsdp2" or (scheme == "zero" and kind == "optimizer")
    return per_value * M.PSI / (2 if sharded else 1)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_formula_within_5_percent(traced, scheme):
    _, d = _report(traced, scheme)
    mem = d["memory"]
    f = mem["formula"]
    assert (f["scheme"], f["psi"], f["k"], f["n"]) == (SCHEMES[scheme], M.PSI, 8, 2), f
    assert not f["unrecognized"], f
    for r in ("0", "1"):
        rank = mem["ranks"][r]
        for kind in ("params", "grads", "optimizer"):
            measured = rank[f"{kind}_bytes"]
            assert measured == pytest.approx(_predicted(scheme, kind), rel=0.05), (r, kind, measured)
            assert f["predicted"][r][kind] == pytest.approx(_predicted(scheme, kind), rel=0.05)
    if scheme == "zero":
        assert f["even_optimizer_bytes"] == pytest.approx(8 * M.PSI / 2, rel=0.01)
    if scheme == "fsdp2":  # the all-gathered unit is a communication buffer while it is used
        assert all(mem["ranks"][r]["comm_buffers_peak_bytes"] > 0 for r in ("0", "1"))


def test_leak_named_from_its_step_on_its_rank(traced):
    rc, d = _report(traced, "ddp")
    leaks = [p for p in d["problems"] if p["kind"] == "leak"]
    assert rc == 1
    assert [(p["ranks"], p["step"]) for p in leaks] == [([M.LEAK_RANK], M.LEAK_STEP)], leaks
    assert "activations" in leaks[0]["message"]


def test_imbalance_names_the_rank_and_kind(traced):
    _, d = _report(traced, "ddp")
    imb = d["memory"]["imbalance"]
    assert [(i["rank"], i["kind"]) for i in imb] == [(M.EXTRA_RANK, "activations")], imb
    assert imb[0]["bytes"] - imb[0]["typical_bytes"] == pytest.approx(M.EXTRA_BYTES / 2, rel=0.1)


def test_report_has_a_memory_section(traced):
    out = traced("mem_train.py", args=("zero",), summaries="off", run_args=("--memory",))
    proc = run_disttrace("report", out)
    assert proc.returncode == 0, proc.stderr
    assert "Memory (disttrace run --memory)" in proc.stdout and "zero1" in proc.stdout
