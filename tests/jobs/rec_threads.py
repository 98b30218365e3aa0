"""Collectives issued from two threads of each rank at once, on two process groups (gloo runs them
concurrently). Writes nothing; the test reads the trace. Usage: rec_threads.py N_PER_THREAD"""

import sys
import threading

import torch
import torch.distributed as dist

n = int(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
groups = [dist.new_group([0, 1]), dist.new_group([0, 1])]
results = {}


def worker(k: int) -> None:
    t = torch.full((64,), float(k + 1))
    for _ in range(n):
        dist.all_reduce(t, group=groups[k])
        t /= 2
    results[k] = t.tolist()


threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
for th in threads:
    th.start()
for th in threads:
    th.join()
assert results[0] == [1.0] * 64 and results[1] == [2.0] * 64, results
dist.destroy_process_group()
