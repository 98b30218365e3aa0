"""all-to-all: every rank sends piece j of its tensor to rank j (a transpose across ranks).

    before: rank 0 [0, 1]     rank 1 [10, 11]         (rank r holds [10r + 0, ..., 10r + N-1])
    after:  rank 0 [0, 10]    rank 1 [1, 11]          (rank j holds piece j of everyone: [j, 10 + j, ...])

Typical use: mixture-of-experts routes each token to the rank that holds its expert; sequence/context
parallelism switches a tensor from being split by sequence to being split by heads.
"""

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup, show


def main():
    world = setup()
    r, n = world.rank, world.world_size
    inputs = torch.arange(10.0 * r, 10.0 * r + n, device=world.device)   # piece j = element j, for rank j
    output = torch.zeros(n, device=world.device)
    print(f"rank {r} before: {show(inputs)}", flush=True)

    dist.all_to_all_single(output, inputs)

    print(f"rank {r} after:  {show(output)}", flush=True)
    cleanup(world)


if __name__ == "__main__":
    main()
