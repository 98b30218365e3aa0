"""reduce: every rank's tensor is summed onto one root rank (the guide's "2. Reduce": docs/TEACHING.md#reduce).

    before: rank 0 [1, 2, 3]   rank 1 [4, 5, 6]   rank 2 [7, 8, 9]
    after (SUM to rank 0): rank 0 [12, 15, 18]; the other ranks' tensors are not part of the result

Typical use: small things only one rank needs, like the loss to log.
"""

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup, show


def main():
    world = setup()
    r = world.rank
    tensor = torch.tensor([3.0 * r + 1, 3.0 * r + 2, 3.0 * r + 3], device=world.device)
    print(f"rank {r} before: {show(tensor)}", flush=True)

    dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM)

    if r == 0:
        print(f"rank {r} after:  {show(tensor)}  <- the sum", flush=True)
    cleanup(world)


if __name__ == "__main__":
    main()
