"""A forward-only pipeline for the viewer's pipeline view: 4 stages (ranks in order), M=4 micro-batches; each
stage computes for COMPUTE_S per micro-batch (a sleep), receives activations from the stage before and sends
them to the next, GPipe style."""

import time

import torch
import torch.distributed as dist

MICRO = 4
COMPUTE_S = 0.02


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    act = torch.zeros(16 * 1024)
    for _ in range(MICRO):
        if rank > 0:
            dist.recv(act, rank - 1)
        time.sleep(COMPUTE_S)
        act += 1
        if rank < world - 1:
            dist.send(act, rank + 1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
