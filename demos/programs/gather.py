"""gather: one root rank collects every rank's tensor (the guide's "4. Gather": docs/TEACHING.md#gather).

    before: rank 0 [1, 2]   rank 1 [3, 4]   rank 2 [5, 6]
    after (gather to rank 0): rank 0 holds [1, 2], [3, 4], [5, 6] -> concatenated [1, 2, 3, 4, 5, 6]

Typical use: collect predictions on one rank to save them.
"""

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup, show


def main():
    world = setup()
    r = world.rank
    tensor = torch.tensor([2.0 * r + 1, 2.0 * r + 2], device=world.device)
    print(f"rank {r} sends: {show(tensor)}", flush=True)

    # Only the root allocates the list of buffers that receive one tensor from each rank.
    gather_list = [torch.zeros(2, device=world.device) for _ in range(world.world_size)] if r == 0 else None
    dist.gather(tensor, gather_list=gather_list, dst=0)

    if r == 0:
        print(f"rank 0 gathered: {show(torch.cat(gather_list))}", flush=True)
    cleanup(world)


if __name__ == "__main__":
    main()
