"""A hang: one rank never arrives at a collective, and the others wait for it until the timeout.

The ranks run all-reduces in a loop. At step `--hang-step`, rank `--hang-rank` (the last rank by default)
takes another path - think of a rank that got an empty batch and skipped the step, or an `if rank == 0:`
around a collective - and never calls the all-reduce. The other ranks enter it and wait: a collective ends
only when every rank of the group has entered it. Real jobs then sit there, silent, until the process
group's timeout (10 minutes by default on NCCL). This demo sets the timeout to `--timeout-s` seconds so that
it ends by itself: the waiting ranks get a timeout error, print it and stop.

What the debugger shows: the all-reduce that some ranks entered and one never did, and which rank is missing.
"""

import os
import time

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup


def main():
    os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")  # NCCL: raise the timeout in this thread, not abort
    world = setup(steps=3, hang_step=2, hang_rank=-1, timeout_s=2.0)
    rank, n, a = world.rank, world.world_size, world.args
    hang_rank = a.hang_rank % n
    for step in range(a.steps):
        gradient = torch.full((4,), float(rank + 1), device=world.device)
        if step == a.hang_step and rank == hang_rank:
            print(f"rank {rank} step {step}: skips the all_reduce (the bug)", flush=True)
            time.sleep(a.timeout_s + 1.0)  # alive, but elsewhere, until the others have given up
            break
        try:
            dist.all_reduce(gradient, op=dist.ReduceOp.SUM)
            if world.device.type == "cuda":
                torch.cuda.synchronize()
        except Exception as error:  # noqa: BLE001 - the timeout error: gloo RuntimeError, NCCL DistBackendError
            first_line = str(error).strip().splitlines()[0][:200]
            print(f"rank {rank} step {step}: all_reduce gave up after the {a.timeout_s:g} s timeout: {first_line}",
                  flush=True)
            break
        print(f"rank {rank} step {step}: all_reduce done", flush=True)
    # The process group is unusable after a timeout; leave without the collective teardown.
    world.results = {"hang_rank": hang_rank, "hang_step": a.hang_step, "timeout_s": a.timeout_s}
    cleanup(world, destroy=False)


if __name__ == "__main__":
    main()
