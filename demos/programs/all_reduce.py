"""all-reduce: every rank ends with the sum of everyone's tensor (the guide's "3. All-Reduce":
docs/TEACHING.md#all-reduce).

    before: rank 0 [1, 2, 3]   rank 1 [4, 5, 6]   rank 2 [7, 8, 9]
    after (SUM): every rank [12, 15, 18]

Typical use: data parallelism sums (or averages) the gradients of all replicas after each backward pass.
"""

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup, show


def main():
    world = setup()
    r = world.rank
    tensor = torch.tensor([3.0 * r + 1, 3.0 * r + 2, 3.0 * r + 3], device=world.device)
    print(f"rank {r} before: {show(tensor)}", flush=True)

    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)   # in place: the input buffer receives the result

    print(f"rank {r} after:  {show(tensor)}", flush=True)
    cleanup(world)


if __name__ == "__main__":
    main()
