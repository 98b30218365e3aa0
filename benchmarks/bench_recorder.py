"""Recording overhead, measured side by side in one run: traced / untraced time per op.

    python benchmarks/bench_recorder.py [--iters 2000] [--rounds 20] [--case '4 KiB']

Starts 2 ranks on gloo with torchrun (this file is also the worker). Each round runs the same loop untraced and
traced in every summaries mode, in short interleaved blocks (--rounds of them, the order rotated each time), so
that the machine's noise hits all of them alike. Every op (or step) is timed on its own and each block's median
is taken: on 2 shared cores a gloo op is ~0.4 ms when both ranks are scheduled and several ms when one is not,
and a mean would measure the scheduler. Printed: traced / untraced as the median over rounds
of the ratio of a round's traced and untraced block medians (so that drifts between rounds cancel), and the
process's CPU time per op in each mode. Cases:
- 2000 all_reduces of 4 KiB (goal: default mode <= 1.05x), and of 1 MiB;
- a DDP training step of a small MLP (goal <= 1.03x);
- a compute-only step, forward/backward with no collective (goal <= 1.01x): the dispatcher hooks are on
  the c10d operators only, so ordinary aten ops must not pay anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _worker(iters: int, rounds: int, only: str) -> None:
    import torch
    import torch.distributed as dist

    from disttrace.tracer import trace

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tmp = tempfile.mkdtemp(prefix="disttrace-bench-")
    torch.manual_seed(0)

    clock = time.perf_counter

    def allreduce_loop(numel: int, n: int):
        t = torch.ones(numel)

        def run():
            times = []
            for _ in range(n):
                t0 = clock()
                dist.all_reduce(t)
                times.append(clock() - t0)
            return times
        return run

    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(64, 256)

    def ddp_loop(n: int):
        def run():
            times = []
            for _ in range(n):
                t0 = clock()
                opt.zero_grad()
                ddp(x).square().mean().backward()
                opt.step()
                times.append(clock() - t0)
            return times
        return run

    local = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))

    def compute_loop(n: int):
        def run():
            times = []
            for _ in range(n):
                t0 = clock()
                local(x).square().mean().backward()
                times.append(clock() - t0)
            return times
        return run

    blocks = rounds
    cases = [
        ("all_reduce 4 KiB", allreduce_loop(1024, iters // blocks), iters),
        ("all_reduce 1 MiB", allreduce_loop(256 * 1024, max(iters // 10 // blocks, 2)), max(iters // 10, 2 * blocks)),
        ("DDP training step", ddp_loop(max(iters // 8 // blocks, 2)), max(iters // 8, 2 * blocks)),
        ("compute only (no collective)", compute_loop(max(iters // 8 // blocks, 2)), max(iters // 8, 2 * blocks)),
    ]
    cases = [c for c in cases if only.lower() in c[0].lower()]
    modes = ["untraced", "off", "stats", "full"]
    results: dict = {}
    for name, run, n in cases:
        run()  # warm up
        med = {m: [] for m in modes}  # per block: the median time of its ops
        cpu = {m: [] for m in modes}  # per block: this process's CPU time (all threads) per op
        for b in range(blocks):
            # a short block of each mode in turn, the order rotated each time: the machine's slow phases
            # (seconds long on a shared VM) then fall on every mode alike
            for m in modes[b % len(modes):] + modes[:b % len(modes)]:
                dist.barrier()
                if m == "untraced":
                    c0 = time.process_time()
                    times = run()
                else:
                    with trace(out=os.path.join(tmp, f"{name[:3]}-{m}-{b}"), summaries=m):
                        dist.barrier()
                        c0 = time.process_time()
                        times = run()
                cpu[m].append((time.process_time() - c0) / len(times))
                med[m].append(statistics.median(times))
        # Each traced block is compared with the untraced block of the same round (seconds apart), and the
        # median of those ratios is taken: drifts of the machine's speed between rounds cancel out.
        ratio = {m: statistics.median(t / u for t, u in zip(med[m], med["untraced"])) for m in modes}
        base = statistics.median(med["untraced"]) * 1e6
        cpu_us = {m: statistics.median(v) * 1e6 for m, v in cpu.items()}
        results[name] = (base, ratio, cpu_us)
    if rank == 0:
        goals = {"all_reduce 4 KiB": 1.05, "DDP training step": 1.03, "compute only (no collective)": 1.01}
        print(f"{'case':30} {'untraced':>11} {'off':>16} {'stats':>16} {'full':>16}   goal (default mode)")
        for name, (base, ratio, cpu_us) in results.items():
            cells = [f"{base:9.1f} µs"] + [f"{ratio[m]:6.3f}x ({(ratio[m] - 1) * base:+.0f})" for m in modes[1:]]
            goal = goals.get(name)
            verdict = "" if goal is None else (f"<= {goal:.2f}x " + ("met" if ratio["off"] <= goal else "MISSED"))
            print(f"{name:30} {cells[0]:>11} {cells[1]:>16} {cells[2]:>16} {cells[3]:>16}   {verdict}")
        print(f"(wall time per op or step: median over {blocks} rounds of traced / untraced block medians; in "
              f"parentheses the µs added)")
        print(f"\n{'CPU time per op or step':30} {'untraced':>11} {'off':>16} {'stats':>16} {'full':>16}")
        for name, (_base, _ratio, cpu_us) in results.items():
            u = cpu_us["untraced"]
            cells = [f"{u:9.1f} µs"] + [f"{cpu_us[m] / u:6.3f}x ({cpu_us[m] - u:+.0f})" for m in modes[1:]]
            print(f"{name:30} {cells[0]:>11} {cells[1]:>16} {cells[2]:>16} {cells[3]:>16}")
        print("(rank 0's process, all threads: what tracing costs the machine, less sensitive to the scheduler)")
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=20, help="interleaved blocks per mode")
    p.add_argument("--case", default="", help="run only the cases whose name contains this (e.g. '4 KiB', 'DDP')")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        _worker(a.iters, a.rounds, a.case)
        return 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__,
           "--worker", "--iters", str(a.iters), "--rounds", str(a.rounds), "--case", a.case]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
