"""broadcast: the root sends one tensor to every rank (the guide's "1. Broadcast": docs/TEACHING.md#broadcast).

    before: rank 0 [1, 2, 3] (the root)   rank 1 [0, 0, 0]   rank 2 [0, 0, 0]
    after:  every rank [1, 2, 3]

Typical use: rank 0 loads the initial weights and broadcasts them, so that every data-parallel replica
starts from the same model.
"""

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup, show


def main():
    world = setup()
    if world.rank == 0:
        tensor = torch.tensor([1.0, 2.0, 3.0], device=world.device)   # the root holds the data
    else:
        tensor = torch.zeros(3, device=world.device)                  # the others hold a buffer to fill
    print(f"rank {world.rank} before: {show(tensor)}", flush=True)

    dist.broadcast(tensor, src=0)

    print(f"rank {world.rank} after:  {show(tensor)}", flush=True)
    cleanup(world)


if __name__ == "__main__":
    main()
