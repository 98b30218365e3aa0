"""A job that takes a few seconds: 2 ranks, an all_reduce every 0.4 s, 10 times (for following a live trace)."""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(16)
for step in range(10):
    dist.all_reduce(t)
    time.sleep(0.4)
dist.destroy_process_group()
