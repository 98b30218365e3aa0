"""Memory's other ground truths on real jobs (tests/jobs/mem_train.py on gloo): a model whose activations dominate
(the step's peak where the forward ends and the backward begins, at the user's line); the Python API's
`trace(out=..., memory=True)` measuring what `disttrace run --memory` measures; DDP, ZeRO-1 and FSDP2 on 4 ranks
(the formula's N = 4); mixed precision by hand: only the fp32 copies of 16-bit parameters counted as optimizer
state."""

import json
import subprocess

import pytest

from harness import aborted_at_exit, job, run_disttrace, torchrun_cmd

pytestmark = pytest.mark.slow
M = job("mem_train")
KINDS = ("params", "grads", "optimizer")


def _memory(out):
    proc = run_disttrace("report", "--json", out)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)["memory"]


def test_activations_peak_at_the_forward_backward_boundary_on_the_users_line(traced):
    mem = _memory(traced("mem_train.py", args=("acts",), summaries="off", run_args=("--memory",)))
    assert mem["formula"]["scheme"] == "ddp"
    for r, m in mem["ranks"].items():
        states = sum(m[f"{k}_bytes"] for k in KINDS)
        assert m["activations_peak_bytes"] > 3 * states, (r, m)            # the activations dominate
        # every activation of the forward still held at the peak, whose op is the backward's first: the boundary
        assert m["peak_by_kind"]["activations"] == m["activations_peak_bytes"], (r, m["peak_by_kind"])
        assert m["peak_site"].endswith(f"mem_train.py:{M.BACKWARD_LINE} in train"), (r, m["peak_site"])


def test_the_python_api_measures_what_disttrace_run_does(traced, tmp_path):
    run = _memory(traced("mem_train.py", args=("zero",), summaries="off", run_args=("--memory",)))
    out = tmp_path / "trace"
    proc = subprocess.run(torchrun_cmd("mem_train.py", 2, ["zero", "--api", out]), capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0 or aborted_at_exit(proc), proc.stderr[-3000:]
    api = _memory(out)
    fields = ("scheme", "psi", "k", "n", "bytes_per_value", "predicted", "even_optimizer_bytes")
    assert {f: api["formula"][f] for f in fields} == {f: run["formula"][f] for f in fields}
    assert api["formula"]["scheme"] == "zero1"
    for r in ("0", "1"):
        for k in KINDS:
            assert api["ranks"][r][f"{k}_bytes"] == run["ranks"][r][f"{k}_bytes"], (r, k)


# per scheme: its name in the formula, and the bytes a value of parameters, gradients, optimizer state, each divided
# by N where the scheme shards it (fp32 Adam: 4 + 4 + 8)
ON_4 = {"ddp": ("ddp", (4, 4, 8), ()), "zero": ("zero1", (4, 4, 8), ("optimizer",)),
        "fsdp2": ("fsdp2", (4, 4, 8), KINDS)}


@pytest.mark.parametrize("scheme", list(ON_4))
def test_each_scheme_on_4_ranks_divides_what_it_shards_by_4(traced, scheme):
    mem = _memory(traced("mem_train.py", nproc=4, args=(scheme,), summaries="off", run_args=("--memory",)))
    f = mem["formula"]
    name, per_value, sharded = ON_4[scheme]
    assert (f["scheme"], f["psi"], f["k"], f["n"]) == (name, M.PSI, 8, 4), f
    assert scheme != "fsdp2" or f["expression"] == "(4 + 4 + 8)Ψ/N", f
    assert sorted(mem["ranks"]) == ["0", "1", "2", "3"]
    for r, m in mem["ranks"].items():
        for k, b in zip(KINDS, per_value):
            want = b * M.PSI / (4 if k in sharded else 1)
            assert m[f"{k}_bytes"] == pytest.approx(want, rel=0.05), (r, k, m[f"{k}_bytes"], want)


def test_only_real_master_copies_are_optimizer_state(traced):
    """Mixed precision by hand (jobs/mem_mixed.py): the fp32 copies of the bf16 parameters are optimizer state; the
    LayerNorm kept in fp32 and a free fp32 scale with its own optimizer (shaped like a bf16 bias) are parameters."""
    mm = job("mem_mixed")
    mem = _memory(traced("mem_mixed.py", summaries="off", run_args=("--memory",)))
    for r, m in mem["ranks"].items():
        assert (m["params_bytes"], m["grads_bytes"]) == (mm.PARAM_BYTES, mm.PARAM_BYTES), (r, m)
        assert m["optimizer_bytes"] == mm.OPT_BYTES, (r, m)
    assert mem["formula"]["k"] == 12 and mem["formula"]["psi"] == mm.BF16_VALUES + mm.NORM_VALUES
