"""all-gather: every rank collects every rank's tensor (the guide's "5. All-Gather": docs/TEACHING.md#all-gather).

    before: rank 0 [1, 2]   rank 1 [3, 4]   rank 2 [5, 6]
    after:  every rank [1, 2, 3, 4, 5, 6]

Typical use: tensor parallelism puts the column shards of an activation back together (the lecture's program).
"""

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup, show


def main():
    world = setup()
    r = world.rank
    tensor = torch.tensor([2.0 * r + 1, 2.0 * r + 2], device=world.device)
    print(f"rank {r} before: {show(tensor)}", flush=True)

    # One output buffer with room for world_size pieces; piece i comes from rank i (the lecture's call).
    output = torch.zeros(2 * world.world_size, device=world.device)
    dist.all_gather_into_tensor(output, tensor)

    print(f"rank {r} after:  {show(output)}", flush=True)
    cleanup(world)


if __name__ == "__main__":
    main()
