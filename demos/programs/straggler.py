"""A straggler: one rank is late to a collective, and every other rank waits for it.

The ranks run `--steps` all-reduces, as a training loop would (one per step, say for the gradients). Before
step `--late-step`, rank `--late-rank` (the last rank by default) spends an extra `--delay-ms` on something
else - a slow data loader, a garbage collection, a noisy neighbour. A collective cannot finish before every
rank has entered it, so the other ranks sit in that all-reduce for as long as the straggler is late.

In a real job nobody tells you which rank was late or why the step was slow: the debugger reads it off the
trace - the rank that arrived last, and how long each other rank waited for it.
"""

import time

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup, show


def main():
    world = setup(steps=3, late_step=1, late_rank=-1, delay_ms=300)
    rank, n, a = world.rank, world.world_size, world.args
    late_rank = a.late_rank % n
    for step in range(a.steps):
        gradient = torch.full((4,), float(rank + 1), device=world.device)
        if step == a.late_step and rank == late_rank:
            time.sleep(a.delay_ms / 1000)  # the straggler's extra work
        start = time.perf_counter()
        dist.all_reduce(gradient, op=dist.ReduceOp.SUM)
        if world.device.type == "cuda":
            torch.cuda.synchronize()  # NCCL returns at once; wait for the result to time it
        waited = time.perf_counter() - start
        print(f"rank {rank} step {step}: all_reduce -> {show(gradient)} took {waited * 1e3:.0f} ms", flush=True)
    world.results = {"late_rank": late_rank, "late_step": a.late_step, "delay_ms": a.delay_ms}
    cleanup(world)


if __name__ == "__main__":
    main()
