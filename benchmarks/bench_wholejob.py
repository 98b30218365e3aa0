"""Whole-process overhead: a job run under `disttrace run` against the same job untraced, side by side.

    python benchmarks/bench_wholejob.py [--rounds 5] [--job trivial|ddp|compiled ...] [--device cpu|cuda]

Each round runs every job once untraced (`torchrun --nproc_per_node=2 ...`) and once traced (`disttrace run --
torchrun ...`), the order alternating between rounds, on 2 ranks of gloo (`--device cuda`: NCCL, a rank per GPU). Printed per job: the whole process's wall
time, traced / untraced as the median of the rounds' ratios (and their spread), and where the time goes, phase by
phase (medians over rounds, rank 0), from timestamps the job takes itself (this file is also the job):
  launch   the command's start to the script's first line: launcher, torchrun's agent, the interpreter
  import   `import torch`, torch.distributed (the tracer's own imports come with it when traced)
  init     init_process_group (traced: starting the recorder, aligning the clocks, installing the hooks)
  setup    DDP's construction and start-up collectives; torch.compile's first step for `compiled`
  steps    the training steps (or the 10 all_reduces of `trivial`)
  destroy  destroy_process_group (traced: the closing clock alignment)
  exit     the end of the script to the command's exit (traced: flushing and closing the trace)
Jobs: `trivial` (10 small all_reduces), `ddp` (20 steps of DDP around a small MLP), `compiled` (torch.compile
around DDP of that MLP, inductor backend, 20 steps). Goals (issue 15): whole-process <= 1.05x, or +0.1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PHASES = ("launch", "import", "init", "setup", "steps", "destroy", "exit")


def _job(kind: str, out: str, device: str) -> None:
    marks = {"start": time.time()}
    import torch
    import torch.distributed as dist

    marks["import"] = time.time()
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    marks["init"] = time.time()
    if kind == "trivial":
        marks["setup"] = time.time()
        for _ in range(10):
            dist.all_reduce(torch.ones(4, device=device))
        if device == "cuda":
            torch.cuda.synchronize()
    else:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(device))
        if kind == "compiled":
            model = torch.compile(model)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(dist.get_rank())

        def step() -> None:
            opt.zero_grad()
            model(torch.randn(8, 16, generator=g).to(device)).square().mean().backward()
            opt.step()

        step()  # construction and the first step (compilation, for `compiled`)
        marks["setup"] = time.time()
        for _ in range(19):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
        # DDP's reducer holds the default group: destroyed after it, gloo can abort the process at exit
        del model, opt, step
    marks["steps"] = time.time()
    dist.destroy_process_group()
    marks["destroy"] = time.time()
    with open(f"{out}.{os.environ.get('RANK', '0')}", "w") as f:
        json.dump(marks, f)


RERUNS = {False: 0, True: 0}  # runs done again after torch's abort at exit, untraced and traced


def _run(kind: str, traced: bool, tmp: str, n: int, device: str, nproc: int) -> dict:
    out = os.path.join(tmp, f"{kind}-{'t' if traced else 'u'}-{n}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", __file__,
           "--as-job", kind, out, device]
    if traced:
        cmd = [sys.executable, "-m", "disttrace", "run", "--out", out + ".trace", "--", *cmd]
    for attempt in range(3):
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        t1 = time.time()
        if proc.returncode == 0:
            break
        # torch 2.13 now and then aborts a rank at the interpreter's exit, untraced as often as traced ("terminate
        # called without an active exception"): that run's time is not the job's, so it is run again
        if "exitcode  : -6" not in proc.stderr or attempt == 2:
            raise SystemExit(f"{kind} ({'traced' if traced else 'untraced'}) failed:\n{proc.stderr[-2000:]}")
        RERUNS[traced] += 1
    with open(out + ".0") as f:
        m = json.load(f)
    times = [t0, m["start"], m["import"], m["init"], m["setup"], m["steps"], m["destroy"], t1]
    return {"total": t1 - t0, **{p: b - a for p, a, b in zip(PHASES, times, times[1:])}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--job", nargs="+", default=["trivial", "ddp", "compiled"], choices=["trivial", "ddp", "compiled"])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--as-job", nargs=3, help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.as_job:
        _job(*ns.as_job)
        return
    nproc = 2
    if ns.device == "cuda":
        import torch

        nproc = min(2, torch.cuda.device_count())
        print(f"{nproc} rank(s) on {torch.cuda.get_device_name()}, NCCL", file=sys.stderr)
    tmp = tempfile.mkdtemp(prefix="disttrace-wholejob-")
    res: dict = {(k, t): [] for k in ns.job for t in (False, True)}
    for n in range(ns.rounds):
        for kind in ns.job:
            for traced in ((False, True) if n % 2 == 0 else (True, False)):
                res[(kind, traced)].append(_run(kind, traced, tmp, n, ns.device, nproc))
        print(f"round {n + 1}/{ns.rounds} done", file=sys.stderr)
    med = statistics.median
    for kind in ns.job:
        u, t = res[(kind, False)], res[(kind, True)]
        ratios = sorted(a["total"] / b["total"] for a, b in zip(t, u))
        q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
        print(f"\n{kind}: untraced {med(r['total'] for r in u):.2f} s, traced {med(r['total'] for r in t):.2f} s; "
              f"traced/untraced {med(ratios):.3f}x (rounds' 25th-75th percentile {q[0]:.3f}-{q[2]:.3f}x), "
              f"{med(r['total'] for r in t) - med(r['total'] for r in u):+.2f} s")
        print("  phase      untraced    traced     diff  (medians, ms)")
        for p in PHASES:
            a, b = med(r[p] for r in u) * 1e3, med(r[p] for r in t) * 1e3
            print(f"  {p:<8} {a:9.0f} {b:9.0f} {b - a:+8.0f}")
    if any(RERUNS.values()):
        print(f"\nruns repeated after torch's abort at exit: untraced {RERUNS[False]}, traced {RERUNS[True]}")


if __name__ == "__main__":
    main()
