"""scatter: the root splits its data and sends piece i to rank i (the guide's "6. Scatter": docs/TEACHING.md#scatter).

    before: rank 0 [1, 2, 3, 4, 5, 6] (the root)   rank 1 [0, 0]   rank 2 [0, 0]
    after:  rank 0 [1, 2]   rank 1 [3, 4]   rank 2 [5, 6]

Typical use: rank 0 reads a batch and hands each worker its slice.
"""

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup, show


def main():
    world = setup()
    r, n = world.rank, world.world_size
    output = torch.zeros(2, device=world.device)   # every rank receives one piece of 2 values
    scatter_list = None
    if r == 0:
        data = torch.arange(1.0, 2 * n + 1, device=world.device)   # [1, 2, ..., 2n]
        scatter_list = list(data.chunk(n))                         # piece i goes to rank i
        print(f"rank 0 scatters: {show(data)}", flush=True)

    dist.scatter(output, scatter_list=scatter_list, src=0)

    print(f"rank {r} received: {show(output)}", flush=True)
    cleanup(world)


if __name__ == "__main__":
    main()
