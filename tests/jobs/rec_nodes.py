"""A 2-node job simulated on one machine (one torchrun per node): rank 1 is late to a barrier by 0.3 s."""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.tensor([float(rank)])
dist.all_reduce(t)
if rank == 1:
    time.sleep(0.3)
dist.barrier()
if rank == 0:
    dist.send(torch.ones(256), dst=1)
else:
    dist.recv(torch.empty(256), src=0)
dist.destroy_process_group()
