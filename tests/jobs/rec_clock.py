"""Clock alignment off the job's path: 3 ranks run a few all_reduces over ~0.8 s; rank 2 leaves early (no
destroy_process_group, it just returns), the others destroy the world. Each rank writes how long its
destroy_process_group took to argv[1].RANK (traced, the exchange runs in a thread: destroy may wait neither for it
nor for the rank that left)."""

import json
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for _ in range(4):
    dist.all_reduce(torch.ones(4))
    time.sleep(0.2)
destroy_s = None
if rank != 2:
    t0 = time.monotonic()
    dist.destroy_process_group()
    destroy_s = time.monotonic() - t0
with open(f"{sys.argv[1]}.{rank}", "w") as f:
    json.dump({"destroy_s": destroy_s}, f)
