"""Rank 1 never arrives at the second all_reduce: it is stuck in its own code (sleeping 'forever')."""

import time

import torch
import torch.distributed as dist


def load_next_batch():
    time.sleep(3600)  # rank 1 is stuck here


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 1:
        load_next_batch()
    dist.all_reduce(t)  # rank 0 waits here forever


main()
