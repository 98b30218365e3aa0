"""reduce-scatter: sum everyone's tensors, and rank i keeps only piece i of the sum.

Two worked examples, one after the other (both with world size 2, op SUM; docs/TEACHING.md#reduce-scatter). The
labels they print, "seed 000" and "seed 002", name the notes and the guide of docs/TEACHING.md#sources:

  seed 000: rank 0 [[-1, 5], [2, 2]]   rank 1 [[3, -3], [4, 1]]
            -> rank 0 [2, 2] (= [-1, 5] + [3, -3])   rank 1 [6, 3] (= [2, 2] + [4, 1])
  seed 002: rank 0 [1, 2, 3, 4]        rank 1 [5, 6, 7, 8]
            -> rank 0 [6, 8]                          rank 1 [10, 12]

With another world size N, rank r holds [2rN+1, ..., 2(r+1)N] (the guide's pattern) and keeps 2 values.
Typical use: ZeRO sums the gradients and leaves each rank only the shard of the sum it updates.
"""

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup, show


def reduce_scatter(inputs: torch.Tensor, pieces: int) -> torch.Tensor:
    # The buffer is seen as one flat row divided into `pieces` equal slices (the notes' X_0, ..., X_{P-1}).
    flat = inputs.reshape(-1)
    output = torch.zeros(flat.numel() // pieces, device=inputs.device)
    dist.reduce_scatter_tensor(output, flat, op=dist.ReduceOp.SUM)   # the lecture's call
    return output


def main():
    world = setup()
    r, n = world.rank, world.world_size
    if n == 2:
        examples = {
            "seed 000": [[[-1.0, 5.0], [2.0, 2.0]], [[3.0, -3.0], [4.0, 1.0]]][r],
            "seed 002": [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]][r],
        }
    else:
        examples = {"seed 002 pattern": torch.arange(2.0 * r * n + 1, 2.0 * (r + 1) * n + 1).tolist()}

    for name, values in examples.items():
        inputs = torch.tensor(values, device=world.device)
        output = reduce_scatter(inputs, n)
        print(f"[{name}] rank {r}: {show(inputs)} -> {show(output)}", flush=True)
    cleanup(world)


if __name__ == "__main__":
    main()
