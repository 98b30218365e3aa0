"""A step of identical ops: each of 40 steps runs a forward (a small matmul) and then averages 50 gradients of one
size (256 floats) from one line; rank 1 sleeps 200 ms at each step's start from step 25 on.

Every op is the same (op, group, site, size), so the ops alone cannot tell a step of 50 from 50 steps of one;
the time between them can: the forward's compute is a gap far longer than the gaps between the all-reduces, and it
recurs every 50 ops. The steps are 40 (they were 6,000 one-op steps), the verdict rank 1, steps 25..39, ~200 ms a
step. With --no-forward the all-reduces run back to back: neither the ops nor the time between them tell the steps,
which the report says (test_verdicts.py checks that run apart)."""

import sys
import time

# the same loop, fault and verdict as a step over identical layers, but every op of the step alike
from verdict_identical_layers import EXPECT, LATE_FROM, LATE_RANK, LATE_S, RUN, STEPS  # noqa: F401

LAYERS = 50
FORWARD = "--no-forward" not in sys.argv


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(rank)
    weight = torch.randn(256, 256, generator=g)
    grads = [torch.zeros(256) for _ in range(LAYERS)]
    x = weight
    for step in range(STEPS):
        if rank == LATE_RANK and step >= LATE_FROM:
            time.sleep(LATE_S)
        if FORWARD:  # the forward
            x = torch.randn(256, 256, generator=g)
            for _ in range(4):
                x = torch.tanh(x @ weight)
        for grad in grads:
            grad.copy_(x[0])
            dist.all_reduce(grad)
            grad /= world
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
