"""torch.compile under `disttrace run --memory` (tests/jobs/mem_compile.py: compiled DDP with inductor, 2 ranks on
gloo): the job compiles as untraced (Dynamo's frames and graphs; a dispatch mode on the stack had made Dynamo skip
every frame, the job running eager without a word) and computes the same numbers bit for bit, and the report's
parameters, gradients and Adam state are the formula's (4 + 4 + 8 bytes a value)."""

import json
import os
import subprocess

import pytest

from harness import aborted_at_exit, job, run_disttrace, run_traced, torchrun_cmd

pytestmark = pytest.mark.slow
M = job("mem_compile")


def _results(prefix) -> dict:
    return {r: json.loads(open(f"{prefix}.{r}").read()) for r in (0, 1)}


def test_compiled_job_compiles_and_computes_as_untraced_and_its_memory_is_the_formulas(tmp_path):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # both runs compile from cold
    proc = subprocess.run(torchrun_cmd("mem_compile.py", 2, [tmp_path / "untraced"]), capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0 or aborted_at_exit(proc), proc.stderr[-3000:]
    out = tmp_path / "trace"
    proc = run_traced("mem_compile.py", out, 2, [tmp_path / "traced"], "off", ("--memory",), env=env, timeout=300)
    assert proc.returncode == 0 or aborted_at_exit(proc), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "memory recording stopped" not in proc.stderr, proc.stderr[-3000:]
    untraced, traced = _results(tmp_path / "untraced"), _results(tmp_path / "traced")
    assert traced == untraced
    assert all(r["frames_ok"] > 0 for r in traced.values()), traced
    report = run_disttrace("report", "--json", str(out))
    assert report.returncode == 0, report.stderr
    mem = json.loads(report.stdout)["memory"]
    f = mem["formula"]
    assert (f["scheme"], f["psi"], f["k"], f["n"]) == ("ddp", M.PSI, 8, 2), f
    for r, m in mem["ranks"].items():
        assert (m["params_bytes"], m["grads_bytes"]) == (4 * M.PSI, 4 * M.PSI), (r, m)
        assert 8 * M.PSI <= m["optimizer_bytes"] <= 8 * M.PSI + 4 * 2 * M.LAYERS, (r, m)  # + Adam's step counts
