"""A killed rank: rank 1 kills itself with SIGKILL at the start of step 5 of 10, each step one synchronous
all_reduce. Its trace ends after all_reduce #4, intact (records are durable the moment they are written). Rank 0
enters all_reduce #5 and gloo raises at once ("Connection reset by peer" or "Connection closed by peer"): the
kernel closes the dead rank's sockets before torchrun, which looks every 0.1 s, stops rank 0 (exit code 1).

The verdict: rank 1 died after all_reduce #4, and rank 0's all_reduce #5 ended in an error; no hang."""

import os
import signal

from tagged import line

RUN = {"nproc": 2, "summaries": "off", "rc": 1}
STEPS, KILL_STEP, KILLED_RANK = 10, 5, 1


SITE = f"verdict_killed.py:{line(__file__, 'all_reduce')}"

EXPECT = {
    "problems": [
        {"kind": "died", "ranks": [KILLED_RANK],
         "message": ["trace ends here", f"after all_reduce #{KILL_STEP - 1}", SITE, "1 later collective(s)"]},
        {"kind": "error", "ranks": [1 - KILLED_RANK], "message": [f"all_reduce #{KILL_STEP}", SITE, "Connection"]},
    ],
}


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1024)
    for step in range(STEPS):
        if rank == KILLED_RANK and step == KILL_STEP:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)  # <all_reduce>
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
