"""The puzzlers' puzzler 2 (docs/TEACHING.md#allreduce-three-ways): the same sum three ways, timed side by side.

  1. all_reduce                      - one collective
  2. reduce to rank 0 + broadcast    - everything goes through one rank (the chapter's "naive AllReduce")
  3. reduce_scatter + all_gather     - what a ring all-reduce does inside (the notes)

The three functions are the post's, with two changes: the device is the demo's (cpu on gloo, cuda:LOCAL_RANK
on NCCL), and approach 3 allocates the reduce-scatter output with tensor_size / N values - one rank's
shard; the post's `torch.zeros(tensor_size)` is rejected by the reduce-scatter. Each returns the time its
collectives took on this rank. The trace records the same calls with their bytes and durations.

Theoretical volume each rank sends, for a tensor of Φ bytes on N ranks (the notes and the chapter):
  all_reduce (ring)            2(N-1)/N Φ on every rank
  reduce + broadcast           rank 0: (N-1)Φ received, then (N-1)Φ sent; every other rank Φ each way
  reduce_scatter + all_gather  (N-1)/N Φ + (N-1)/N Φ = 2(N-1)/N Φ on every rank
"""

import time

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup

DEVICE = None  # set in main(): the post's functions use torch.device(f"cuda:{local_rank}")


def elapsed(start: float) -> float:
    """Seconds since start, once the collectives are done (on CUDA they run asynchronously on a stream)."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


# approach 1 - call All_Reduce directly
def all_reduce_demo(size, local_rank, tensor_size=2**20):
    group = dist.new_group(list(range(size)))
    device = DEVICE
    tensor = torch.rand(tensor_size, device=device)
    start = time.perf_counter()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return elapsed(start)


# approach 2 - implement All_Reduce using Reduce and Broadcast
def reduce_broadcast_demo(size, local_rank, tensor_size=2**20):
    group = dist.new_group(list(range(size)))
    device = DEVICE
    tensor = torch.rand(tensor_size, device=device)

    start = time.perf_counter()
    dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM, group=group)
    dist.broadcast(tensor, src=0, group=group)
    return elapsed(start)


# approach 3 - implement All_Reduce using Reduce_Scatter and All_Gather
def reduce_scatter_all_gather_demo(size, local_rank, tensor_size=2**20):
    group = dist.new_group(list(range(size)))
    device = DEVICE

    reduce_scatter_input = torch.rand(tensor_size, device=device)
    reduce_scatter_output = torch.zeros(tensor_size // size, device=device)   # one shard (seed: tensor_size)
    all_gather_output = torch.zeros(tensor_size, device=device)

    start = time.perf_counter()
    dist.reduce_scatter_tensor(
        reduce_scatter_output,
        reduce_scatter_input,
        op=dist.ReduceOp.SUM,
        group=group
    )
    dist.all_gather_into_tensor(
        all_gather_output,
        reduce_scatter_output,
        group=group
    )
    return elapsed(start)


APPROACHES = {
    "all_reduce": all_reduce_demo,
    "reduce + broadcast": reduce_broadcast_demo,
    "reduce_scatter + all_gather": reduce_scatter_all_gather_demo,
}


def main():
    global DEVICE
    world = setup(size=2**20, repeat=3)
    DEVICE = world.device
    n, size = world.world_size, world.args.size
    if size % n:
        raise SystemExit(f"--size {size} must be a multiple of the world size {n}")
    times = {}
    for name, demo in APPROACHES.items():
        # Several rounds, because the first call of anything is slower; the trace keeps every round.
        times[name] = [demo(n, world.local_rank, tensor_size=size) for _ in range(world.args.repeat)]
        best = min(times[name])
        print(f"rank {world.rank}: {name:28s} best of {world.args.repeat}: {best * 1e3:8.2f} ms", flush=True)
    world.results = {"tensor_size": size, "bytes": size * 4, "seconds": times}
    cleanup(world)


if __name__ == "__main__":
    main()
