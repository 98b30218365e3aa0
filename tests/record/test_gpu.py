"""The CUDA paths on a real GPU: NCCL in a world of one (every collective kind, its end and its device duration
against the job's own CUDA events and clock, device summaries, a traced call behind a busy device, a hang), gloo
with CUDA tensors, DDP, compiled jobs (inductor) traced and untraced.
Run with `pytest -m gpu`; skipped where there is no CUDA device (the CPU suite never needs one)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

from disttrace.tracer.data.load import load_trace

from harness import (all_reduces_by_bucket, assert_compiled_collectives_recorded, assert_compiled_the_same,
                     compile_modes_runs, run_disttrace, run_traced)

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
nccl = pytest.mark.skipif(torch.cuda.is_available() and not (dist.is_available() and dist.is_nccl_available()),
                          reason="torch built without NCCL")

KINDS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier"]


def _job(tmp_path, mode, summaries="stats", run_args=(), expect_rc=0):
    tmp_path.mkdir(parents=True, exist_ok=True)
    side = tmp_path / "timings.json"
    out = tmp_path / "trace"
    proc = run_traced("gpu_ops.py", out, 1, [mode, str(side)], summaries, run_args, again=expect_rc == 0)
    if expect_rc is not None:
        assert proc.returncode == expect_rc, proc.stderr[-4000:]
    table = load_trace(str(out))
    rows = [table.row(i) for i in range(len(table))]
    timings = json.loads(side.read_text()) if side.exists() else []
    return rows, timings, proc


@nccl
def test_nccl_every_kind_ends_through_the_hook_with_the_device_duration(tmp_path):
    rows, timings, _ = _job(tmp_path, "timing", summaries="off")
    assert sorted({r["op"] for r in rows}) == sorted(KINDS)
    assert all(r["status"] == "ok" and r["end_ns"] >= r["start_ns"] for r in rows), _brief(rows)
    timed = [r for r in rows if r["op"] != "barrier"]  # (the job's own barrier may add a collective of its own)
    assert all("device_ns" in r for r in timed), _brief([r for r in timed if "device_ns" not in r])
    mine = [t for t in timings if t[0] != "barrier"]
    assert len(mine) == len(timed)
    per_round = len(KINDS) - 1
    for i, (r, (op, ms, t0, t1)) in enumerate(zip(timed, mine)):
        # the op's end is when the device finished it, not when NCCL's watchdog noticed (every ~100 ms): the
        # recorded span lies within the job's own host times around it, give or take the watcher's latency
        assert r["end_ns"] - r["start_ns"] <= t1 - t0 + 5_000_000, (r["op"], r["end_ns"] - r["start_ns"], t1 - t0)
        if i < per_round:
            continue  # (the first round makes NCCL's communicator: the host, not the device, sets its times)
        # the recorded device time against the job's own CUDA events around the op's kernel (its only work on
        # the stream between them, summaries off; a world of one's no-op kernels take microseconds)
        dev_ms = r["device_ns"] / 1e6
        assert ms * 0.7 - 0.01 <= dev_ms <= ms * 1.05 + 0.01, (r["op"], dev_ms, ms)


def _brief(rows) -> list:
    return [{k: r.get(k) for k in ("id", "op", "api", "status", "error", "start_ns", "end_ns", "device_ns")}
            for r in rows][:8]


@nccl
def test_nccl_device_summaries_equal_the_cpu_ones(tmp_path):
    gpu_rows, _, _ = _job(tmp_path / "nccl", "ops", summaries="full")
    cpu_rows, _, _ = _job(tmp_path / "gloo", "gloo", summaries="full")

    def summaries(rows):
        return [(r["op"], r["in"], r["out"]) for r in rows if r["op"] in ("all_reduce", "broadcast")]
    assert summaries(gpu_rows) and summaries(gpu_rows) == summaries(cpu_rows)


@nccl
def test_nccl_hook_off_falls_back_to_the_watcher(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTTRACE_NCCL_HOOK", "0")
    rows, _, _ = _job(tmp_path, "ops")
    assert all(r["status"] == "ok" for r in rows) and not any("device_ns" in r for r in rows)


def test_gloo_with_cuda_tensors(tmp_path):
    rows, _, _ = _job(tmp_path, "gloo")
    assert sorted({r["op"] for r in rows}) == sorted(KINDS)
    assert all(r["status"] == "ok" for r in rows), _brief([r for r in rows if r["status"] != "ok"])


@nccl
def test_ddp_on_one_gpu(tmp_path):
    rows, _, _ = _job(tmp_path, "ddp")
    grads = [r for r in rows if r["api"] == "ddp.reducer_allreduce"]
    assert grads and all(r["status"] == "ok" for r in grads), _brief(grads)
    assert all(r["site"] and "gpu_ops.py" in r["site"] for r in grads)  # the backward() line


@nccl
def test_memory_on_one_gpu_reads_the_caching_allocator(tmp_path):
    """`--memory` on CUDA (issue 51): each sample at an op carries the caching allocator's counters and the device's
    use (read, never reset: the job's own peak statistic stays the job's), and the report counts the DDP model's
    parameters and gradients (Linear(512, 512): Ψ = 512·512 + 512 values of fp32) as on the CPU, what the device
    holds beyond the allocator in a row of its own. Written on a machine without a GPU: first run when one is lent."""
    _job(tmp_path, "ddp", summaries="off", run_args=["--memory"])
    (mem_file,) = (tmp_path / "trace").glob("rank-*.mem")
    samples = [json.loads(line) for line in mem_file.read_bytes().rstrip(b"\0").splitlines() if line.strip()]
    at_ops = [m for m in samples if m.get("k") == "m" and m.get("at") == "op"]
    assert at_ops and all({"alloc", "reserved", "max_alloc", "used", "total"} <= set(m.get("dev") or {})
                          for m in at_ops), at_ops[:2]
    proc = run_disttrace("report", "--json", tmp_path / "trace")
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    mem = json.loads(proc.stdout)["memory"]
    psi = 512 * 512 + 512
    assert (mem["formula"]["scheme"], mem["formula"]["psi"]) == ("ddp", psi), mem["formula"]
    m = mem["ranks"]["0"]
    assert m["params_bytes"] == pytest.approx(4 * psi, rel=0.05) and m["grads_bytes"] == pytest.approx(4 * psi,
                                                                                                         rel=0.05), m
    assert m["outside_allocator_bytes"] >= 0 and m["peak_bytes"] >= m["params_bytes"] + m["grads_bytes"], m


@nccl
def test_the_traced_call_returns_before_the_device_ran_the_op(tmp_path):
    # summaries are computed by kernels queued on the job's stream, never waited for: on an H200 the first traced
    # op returned only when the kernel before it was done (CUDA's lazy loading of the summary kernels), until
    # tracing loaded them at init_process_group (summaries.warm_up; a job that first touches CUDA after
    # init_process_group still meets it once). The job makes NCCL's communicator at init_process_group: made at
    # the first op, it waits for the device untraced too (seen on an H200: 311 ms, traced or not)
    rows, timings, _ = _job(tmp_path, "busy", summaries="stats")
    assert len(timings) == 3 and all(r["status"] == "ok" for r in rows), _brief(rows)
    for op, returned, done in timings:
        assert returned < done / 4, (returned / 1e6, done / 1e6)


@nccl
def test_nccl_hang_is_diagnosed(tmp_path):
    # (summaries off: the watchdog is what is tested, not the summaries' warm-up above)
    rows, _, proc = _job(tmp_path, "hang", summaries="off", run_args=["--hang-timeout", "5", "--kill-on-hang"],
                         expect_rc=None)
    assert "HANG" in proc.stderr and "all_reduce #0 of group world never finished on rank 0" in proc.stderr, \
        proc.stderr[-4000:]
    assert [r["status"] for r in rows if r["op"] == "all_reduce"][-1] == "unfinished"


@nccl
def test_compiled_cuda_jobs_compile_the_same_traced_and_untraced(tmp_path):
    # test_compile.py's jobs on NCCL with inductor: the CUDA ends (the watcher, the stream ends of ops without a
    # Work, the completion hook) run beside compiled code and inside the collectives its kernels call. Inductor's
    # caches off, so that the traced run (second) compiles as much as the untraced one
    counts, trace = compile_modes_runs(tmp_path, nproc=1, env={"COMPILE_DEVICE": "cuda",
                                                               "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"})
    assert_compiled_the_same(counts)
    assert_compiled_collectives_recorded(trace, fsdp=False)  # (FSDP2 in a world of one issues no collective)


# -- the black box on NCCL (issue 50's NCCL side) ---------------------------------------------------------------
BB = ["--black-box", "--ring", "200"]


@nccl
def test_the_black_box_on_nccl_keeps_the_last_ops_ended_by_the_device_and_counts_every_op(tmp_path):
    """`disttrace run --black-box --ring 200` on a training loop on one GPU (tests/jobs/bb_train.py on NCCL, ten
    times the ring in ops): the trace dir opens like any trace, its ops the ring's last ones, each ended through the
    CUDA path with the completion hook's device duration; the aggregates count every op the job issued, their
    durations those ends'. Written on a machine without a GPU: first run when one is lent."""
    from disttrace.tracer.data.importers.aggregates import read_aggregates

    out, truth = tmp_path / "trace", tmp_path / "truth"
    proc = run_traced("bb_train.py", out, 1, ["--steps", "300", "--truth", truth, "--device", "cuda"],
                      summaries="off", run_args=BB, again=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    issued = json.loads((tmp_path / "truth.0").read_text())["allreduce"]
    table = load_trace(str(out))
    rows = [table.row(i) for i in range(len(table))]
    ops = [r for r in rows if r["op"] == "all_reduce"]
    assert 200 <= len(ops) < sum(issued.values()), len(ops)  # the ring's last ops, not the whole run
    assert all(r["status"] == "ok" and r["end_ns"] >= r["start_ns"] for r in ops), _brief(ops)
    assert all("device_ns" in r for r in ops), _brief([r for r in ops if "device_ns" not in r])
    agg = read_aggregates(str(out))
    assert agg is not None and not agg.damage and not agg.w_lost.any(), agg and agg.damage
    counted = {}
    for key, count in zip(agg.cell_key, agg.cell_count):
        k = agg.keys[key]
        counted[(k.op, k.lo)] = counted.get((k.op, k.lo), 0) + int(count)
    assert counted == all_reduces_by_bucket(issued)
    report = run_disttrace("report", "--json", out, timeout=120)
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr[-3000:]
    assert not json.loads(report.stdout)["problems"]


@nccl
def test_the_black_box_on_nccl_snapshots_a_device_hang(tmp_path):
    """An all_reduce stuck behind a spinning kernel, in black-box mode: the watchdog's hang snapshot holds the
    rank's ring, and the report of the snapshot names the hung all_reduce."""
    _rows, _, proc = _job(tmp_path, "hang", summaries="off",
                          run_args=[*BB, "--hang-timeout", "5", "--kill-on-hang"], expect_rc=None)
    snaps = sorted((tmp_path / "trace" / "snapshots").glob("*-hang"))
    assert snaps and list(snaps[-1].glob("rank-00000-*.ring")), proc.stderr[-4000:]
    report = run_disttrace("report", "--json", snaps[-1], timeout=120)
    assert report.returncode in (0, 1) and "Traceback" not in report.stderr, report.stderr[-3000:]
    hangs = [p for p in json.loads(report.stdout)["problems"] if p["kind"] == "hang"]
    assert hangs and hangs[0]["op"] == "all_reduce", json.loads(report.stdout)["problems"]
