"""The cost of `disttrace run --memory` (issue 51): a realistic DDP step (tests/jobs/mem_train.py's 4-layer MLP with
Adam, 2 ranks on gloo) timed traced without and with --memory. Every op then passes through the tracker's dispatch
mode (Python), so on CPU a step of small ops costs several times more: a diagnosis mode, not one to leave on.

    python benchmarks/bench_memory_cost.py [--steps N]

Prints the median step time of each mode (the job prints its own, measured around its loop body)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

JOB = '''
import statistics, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(*(torch.nn.Linear(256, 256) for _ in range(4)))
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
times = []
for step in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    x = torch.randn(64, 256)
    opt.zero_grad()
    loss = ddp(x).square().mean()
    loss.backward()
    opt.step()
    dist.all_reduce(loss.detach().clone())
    times.append(time.perf_counter() - t0)
if dist.get_rank() == 0:
    print("STEP_MS", statistics.median(times[3:]) * 1e3)
dist.destroy_process_group()
'''


def run(memory: bool, steps: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        job = os.path.join(d, "job.py")
        with open(job, "w") as f:
            f.write(JOB)
        cmd = [sys.executable, "-m", "disttrace", "run", "--out", os.path.join(d, "trace"), "--no-store",
               *(["--memory"] if memory else []), "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", job, str(steps)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        return float(next(line.split()[1] for line in out.splitlines() if line.startswith("STEP_MS")))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    off, on = run(False, args.steps), run(True, args.steps)
    print(f"step (median, rank 0): traced {off:.2f} ms, traced with --memory {on:.2f} ms: {on / off:.2f}x")


if __name__ == "__main__":
    main()
