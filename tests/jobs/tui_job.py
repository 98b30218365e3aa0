"""A small job for the viewer's tests: 4 ranks on gloo run each kind of collective, a barrier where rank 2 is
a known straggler (it sleeps STRAGGLE_S first), and a ring of send/recv (each rank sends to the next)."""

import os
import time

import torch
import torch.distributed as dist

STRAGGLER = 2
STRAGGLE_S = 0.3


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.full((1024,), float(rank + 1))
    dist.all_reduce(x)
    out = torch.empty(world * 256)
    dist.all_gather_into_tensor(out, torch.full((256,), float(rank)))
    rs = torch.empty(256)
    dist.reduce_scatter_tensor(rs, torch.ones(world * 256))
    b = torch.arange(4, dtype=torch.float32) if rank == 0 else torch.zeros(4)
    dist.broadcast(b, src=0)
    if rank == STRAGGLER:
        time.sleep(STRAGGLE_S)
    dist.barrier()
    # a ring by hand: even ranks send first, odd ranks receive first, so gloo never deadlocks
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    send = torch.full((64 * 1024,), float(rank))
    recv = torch.empty(64 * 1024)
    if rank % 2 == 0:
        dist.send(send, nxt)
        dist.recv(recv, prv)
    else:
        dist.recv(recv, prv)
        dist.send(send, nxt)
    assert recv[0].item() == prv
    small = torch.tensor([float(rank)] * 4)
    dist.all_reduce(small)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
