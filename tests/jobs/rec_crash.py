"""Ranks that die inside collectives, in the ways real jobs die. Usage: rec_crash.py MODE

kill:    rank 1 SIGKILLs rank 0 while rank 0 waits in an all_reduce; torchrun then SIGTERMs rank 1, which is
         waiting in a barrier by then.
abort:   ranks disagree on the all_reduce size; gloo aborts the process (SIGABRT from C++).
timeout: rank 1 never joins the all_reduce; rank 0's times out (a short process-group timeout) and raises.
"""

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

mode = sys.argv[1]
dist.init_process_group("gloo", timeout=timedelta(seconds=3 if mode == "timeout" else 60))
rank = dist.get_rank()
pids = [None, None]
dist.all_gather_object(pids, os.getpid())
dist.barrier()

if mode == "kill":
    if rank == 0:
        dist.all_reduce(torch.ones(4))      # rank 1 never joins: it kills us while we wait here
    else:
        time.sleep(1.0)
        os.kill(pids[0], signal.SIGKILL)
        dist.barrier()                      # rank 0 is gone: torchrun's SIGTERM finds us waiting here
elif mode == "abort":
    dist.all_reduce(torch.ones(4 if rank == 0 else 8))
elif mode == "timeout":
    if rank == 0:
        try:
            dist.all_reduce(torch.ones(4))
        except Exception as e:              # noqa: BLE001
            print(f"rank 0 caught {type(e).__name__}", flush=True)
            sys.exit(3)
    else:
        time.sleep(8)
