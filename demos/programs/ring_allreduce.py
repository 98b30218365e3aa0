"""Ring all-reduce written by hand with isend/irecv, checked against dist.all_reduce (docs/TEACHING.md#ring-allreduce).

Every rank splits its K values into N chunks of K/N (N = world size) and talks only to its two neighbours:
it sends to rank r+1 and receives from rank r-1.

  1. reduce-scatter phase, N-1 steps: at step s rank r sends chunk (r - s) mod N and receives chunk
     (r - s - 1) mod N, which it adds into its own copy of that chunk. After N-1 steps rank r holds the
     complete sum of chunk (r + 1) mod N.
  2. all-gather phase, N-1 steps: at step s rank r sends chunk (r + 1 - s) mod N (complete) and receives
     chunk (r - s) mod N, which it copies over its own. After N-1 steps every rank holds every summed chunk.

Each rank sends 2(N-1) messages of K/N values: 2(N-1)K/N in all, about 2K for large N, whatever N is.
That is why the ring is "bandwidth optimal" (the notes, and the chapter's table: 2(N_d - 1)Φ for the whole ring;
docs/TEACHING.md#sources).
"""

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup, show


def exchange(outgoing: torch.Tensor, send_to: int, incoming: torch.Tensor, recv_from: int) -> None:
    """Send one chunk to the right neighbour while receiving one from the left: an isend and an irecv, posted
    together (batch_isend_irecv: on NCCL a lone send and a lone recv could each wait for the other side)."""
    ops = [dist.P2POp(dist.isend, outgoing, send_to), dist.P2POp(dist.irecv, incoming, recv_from)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def ring_all_reduce(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Sum `tensor` over all ranks, in place, with 2(N-1) neighbour-to-neighbour steps."""
    n = world_size
    chunks = list(tensor.chunk(n))             # views into `tensor`: updating a chunk updates the tensor
    send_to, recv_from = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[0])

    # Phase 1: reduce-scatter. The partial sums travel around the ring, growing by one rank's chunk per step.
    for step in range(n - 1):
        send_chunk, recv_chunk = (rank - step) % n, (rank - step - 1) % n
        exchange(chunks[send_chunk], send_to, incoming, recv_from)
        chunks[recv_chunk] += incoming

    # Phase 2: all-gather. The complete chunks travel around the ring, overwriting the stale copies.
    for step in range(n - 1):
        send_chunk, recv_chunk = (rank + 1 - step) % n, (rank - step) % n
        exchange(chunks[send_chunk], send_to, incoming, recv_from)
        chunks[recv_chunk].copy_(incoming)
    return tensor


def main():
    world = setup(size=0)
    r, n = world.rank, world.world_size
    k = world.args.size or 2 * n               # K values per rank; by default 2 values per chunk
    if k % n:
        raise SystemExit(f"--size {k} must be a multiple of the world size {n}")
    # Rank r holds [100r + 1, 100r + 2, ..., 100r + K]: the hundreds say whose value it is.
    data = torch.arange(1.0, k + 1, device=world.device) + 100 * r
    if k <= 16:
        print(f"rank {r} starts with {show(data)}", flush=True)

    ours = ring_all_reduce(data.clone(), r, n)

    reference = data.clone()
    dist.all_reduce(reference, op=dist.ReduceOp.SUM)   # what torch's own all-reduce gives
    assert torch.equal(ours, reference), f"rank {r}: ring {ours} != all_reduce {reference}"
    print(f"rank {r} ring result {show(ours) if k <= 16 else ''} == dist.all_reduce: True", flush=True)
    world.results = {"ring": ours.tolist() if k <= 64 else None, "all_reduce_equal": True, "k": k}
    cleanup(world)


if __name__ == "__main__":
    main()
