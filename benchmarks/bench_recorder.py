"""Recording overhead, measured side by side in one run: traced / untraced time per op.

    python benchmarks/bench_recorder.py [--iters 2000] [--rounds 20] [--case '4 KiB'] [--device cuda]

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
And a reference, measured in the same rounds: the 4 KiB loop untraced with 5 µs of pure Python added per op,
beside the tracer's own CPU time per op measured alone (a world of one): what a given amount of Python on the
critical path costs on this machine, whoever runs it.

--device cuda: NCCL in a world of one (one process, one GPU), all_reduces of 4 KiB and 1 MiB, untraced and traced
(summaries off) in interleaved blocks: per op, the wall time to the device's completion (synchronized per op) and
the process's CPU time, whose difference traced - untraced is the recorder's CPU per op (the begin record, the
end through NCCL's completion hook; the same goal as on gloo: default mode <= 1.05x). Where that time goes, piece
by piece, and the black box beside Flight Recorder: benchmarks/bench_nccl_cost.py.
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

    def allreduce_loop(numel: int, n: int, pause: int = 0):
        t = torch.ones(numel)

        def run():
            times = []
            for _ in range(n):
                t0 = clock()
                dist.all_reduce(t)
                for _ in range(pause):  # the reference mode: this much pure Python, untraced
                    pass
                times.append(clock() - t0)
            return times
        return run

    # The reference: how much wall time a few µs of any Python per op costs on this machine, untraced. On a small
    # VM the ranks' threads share a couple of vCPUs, and a little work on one rank's critical path can miss the
    # peer's wake-up and cost many times its own duration; this row says how much of the tracer's ratio is that.
    pause_us = 5.0
    pause = _iterations_for(pause_us)

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
    reference = allreduce_loop(1024, iters // blocks, pause)  # the "python" mode of the 4 KiB case
    cases = [
        ("all_reduce 4 KiB", allreduce_loop(1024, iters // blocks), iters),
        ("all_reduce 1 MiB", allreduce_loop(256 * 1024, max(iters // 10 // blocks, 2)), max(iters // 10, 2 * blocks)),
        ("DDP training step", ddp_loop(max(iters // 8 // blocks, 2)), max(iters // 8, 2 * blocks)),
        ("compute only (no collective)", compute_loop(max(iters // 8 // blocks, 2)), max(iters // 8, 2 * blocks)),
    ]
    cases = [c for c in cases if only.lower() in c[0].lower()]
    results: dict = {}
    for name, run, n in cases:
        modes = ["untraced", "off", "stats", "full"] + (["python"] if name == "all_reduce 4 KiB" else [])
        run()  # warm up
        med = {m: [] for m in modes}  # per block: the median time of its ops
        cpu = {m: [] for m in modes}  # per block: this process's CPU time (all threads) per op
        for b in range(blocks):
            # a short block of each mode in turn, the order rotated each time: the machine's slow phases
            # (seconds long on a shared VM) then fall on every mode alike
            for m in modes[b % len(modes):] + modes[:b % len(modes)]:
                dist.barrier()
                if m == "untraced" or m == "python":
                    c0 = time.process_time()
                    times = run() if m == "untraced" else reference()
                else:
                    with trace(out=os.path.join(tmp, f"{name[:3]}-{m}-{b}"), summaries=m):
                        dist.barrier()
                        c0 = time.process_time()
                        times = run()
                cpu[m].append((time.process_time() - c0) / len(times))
                med[m].append(statistics.median(times))
        # Each traced block is compared with the untraced block of the same round (seconds apart), and the
        # median of those ratios is taken: drifts of the machine's speed between rounds cancel out.
        per_round = {m: sorted(t / u for t, u in zip(med[m], med["untraced"])) for m in modes}
        ratio = {m: statistics.median(r) for m, r in per_round.items()}
        spread = {m: (r[len(r) // 4], r[(3 * len(r)) // 4]) for m, r in per_round.items()}
        base = statistics.median(med["untraced"]) * 1e6
        cpu_us = {m: statistics.median(v) * 1e6 for m, v in cpu.items()}
        results[name] = (base, ratio, cpu_us, spread)
    modes = ["untraced", "off", "stats", "full"]
    if rank == 0:
        goals = {"all_reduce 4 KiB": 1.05, "DDP training step": 1.03, "compute only (no collective)": 1.01}
        print(f"{'case':30} {'untraced':>11} {'off':>16} {'stats':>16} {'full':>16}   goal (default mode)")
        for name, (base, ratio, cpu_us, _spread) in results.items():
            cells = [f"{base:9.1f} µs"] + [f"{ratio[m]:6.3f}x ({(ratio[m] - 1) * base:+.0f})" for m in modes[1:]]
            goal = goals.get(name)
            verdict = "" if goal is None else (f"<= {goal:.2f}x " + ("met" if ratio["off"] <= goal else "MISSED"))
            print(f"{name:30} {cells[0]:>11} {cells[1]:>16} {cells[2]:>16} {cells[3]:>16}   {verdict}")
        print(f"(wall time per op or step: median over {blocks} rounds of traced / untraced block medians; in "
              f"parentheses the µs added)")
        print("default mode, the rounds' ratios from the 25th to the 75th percentile: " + ", ".join(
            f"{name} {sp['off'][0]:.3f}-{sp['off'][1]:.3f}x" for name, (_b, _r, _c, sp) in results.items()))
        print(f"\n{'CPU time per op or step':30} {'untraced':>11} {'off':>16} {'stats':>16} {'full':>16}")
        for name, (_base, _ratio, cpu_us, _spread) in results.items():
            u = cpu_us["untraced"]
            cells = [f"{u:9.1f} µs"] + [f"{cpu_us[m] / u:6.3f}x ({cpu_us[m] - u:+.0f})" for m in modes[1:]]
            print(f"{name:30} {cells[0]:>11} {cells[1]:>16} {cells[2]:>16} {cells[3]:>16}")
        print("(rank 0's process, all threads: what tracing costs the machine, less sensitive to the scheduler)")
        if "all_reduce 4 KiB" in results:
            base, ratio, cpu_us, spread = results["all_reduce 4 KiB"]
            print(f"\nreference: {pause_us:.0f} µs of pure Python per op, untraced (a loop timed alone): "
                  f"{ratio['python']:.3f}x ({(ratio['python'] - 1) * base:+.0f} µs; rounds "
                  f"{spread['python'][0]:.3f}-{spread['python'][1]:.3f}x) on all_reduce 4 KiB; "
                  f"the tracer's own CPU per op alone: {_tracer_cpu_us():.1f} µs")
    dist.destroy_process_group()


def _cuda_worker(iters: int, rounds: int) -> None:
    import torch
    import torch.distributed as dist

    from disttrace.tracer import trace

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    tmp = tempfile.mkdtemp(prefix="disttrace-bench-cuda-")
    clock = time.perf_counter
    for name, numel in (("all_reduce 4 KiB", 1024), ("all_reduce 1 MiB", 256 * 1024)):
        t = torch.ones(numel, device="cuda")
        n = max(iters // rounds, 2)

        def run():
            times = []
            for _ in range(n):
                t0 = clock()
                dist.all_reduce(t)
                torch.cuda.synchronize()
                times.append(clock() - t0)
            return times
        run()  # warm up (communicator, allocator)
        med: dict = {"untraced": [], "off": []}
        cpu: dict = {"untraced": [], "off": []}
        for b in range(rounds):
            for m in (("untraced", "off") if b % 2 == 0 else ("off", "untraced")):
                if m == "untraced":
                    c0 = time.process_time()
                    times = run()
                else:
                    with trace(out=os.path.join(tmp, f"{numel}-{b}"), summaries="off"):
                        c0 = time.process_time()
                        times = run()
                cpu[m].append((time.process_time() - c0) / n)
                med[m].append(statistics.median(times))
        ratio = statistics.median(sorted(a / u for a, u in zip(med["off"], med["untraced"])))
        cpu_us = {m: statistics.median(v) * 1e6 for m, v in cpu.items()}
        print(f"{name} (NCCL, world of one): untraced {statistics.median(med['untraced']) * 1e6:.1f} µs/op, "
              f"traced {ratio:.3f}x; CPU per op untraced {cpu_us['untraced']:.1f} µs, traced {cpu_us['off']:.1f} µs "
              f"(the recorder: {cpu_us['off'] - cpu_us['untraced']:+.1f} µs)")
    dist.destroy_process_group()


def _iterations_for(us: float) -> int:
    """Iterations of an empty Python loop that take `us` µs of this thread's CPU time (best of 5)."""
    n = 100_000
    best = min(_thread_time(n) for _ in range(5))
    return max(1, round(n * us / (best * 1e6)))


def _thread_time(n: int) -> float:
    t0 = time.thread_time()
    for _ in range(n):
        pass
    return time.thread_time() - t0


def _tracer_cpu_us() -> float:
    """The tracer's own CPU time per 4 KiB all_reduce in a world of one (no peer to wait for): this thread's time
    traced minus untraced, the minimum over alternating blocks. Runs in a process of its own."""
    code = (
        "import os, time, tempfile, torch, torch.distributed as dist\n"
        "from disttrace.tracer import trace\n"
        "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n"
        "t = torch.ones(1024)\n"
        "def block(n=2000):\n"
        "    c0 = time.thread_time_ns()\n"
        "    for _ in range(n): dist.all_reduce(t)\n"
        "    return (time.thread_time_ns() - c0) / n / 1e3\n"
        "out, un, tr = tempfile.mkdtemp(), [], []\n"
        "for _ in range(10):\n"
        "    un.append(block())\n"
        "    with trace(out=out):\n"
        "        tr.append(block())\n"
        "print(min(tr) - min(un))\n")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        return float(out.stdout.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001 - a reference figure only
        return float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=20, help="interleaved blocks per mode")
    p.add_argument("--case", default="", help="run only the cases whose name contains this (e.g. '4 KiB', 'DDP')")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: 2 ranks on gloo (default); cuda: NCCL, a world of one on one GPU")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.device == "cuda":
        import torch
        import torch.distributed as dist

        if not torch.cuda.is_available() or not dist.is_nccl_available():
            print("bench_recorder: --device cuda needs a CUDA device and a torch built with NCCL; this machine "
                  "has " + ("no CUDA device" if not torch.cuda.is_available() else "no NCCL"), file=sys.stderr)
            return 2
        _cuda_worker(a.iters, a.rounds)
        return 0
    if a.worker:
        _worker(a.iters, a.rounds, a.case)
        return 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__,
           "--worker", "--iters", str(a.iters), "--rounds", str(a.rounds), "--case", a.case]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
