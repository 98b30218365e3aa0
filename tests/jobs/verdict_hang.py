"""A hang: at step 3 of 5 rank 1 never reaches the all_reduce; it is stuck in a function of its own (sleeping,
as a data loader that never returns would). After 2 s every rank's watchdog records its stacks, `disttrace run`
prints its diagnosis and stops the job (`--kill-on-hang`: the job's processes get SIGKILL, exit 137).

The verdict: a hang in all_reduce #3, rank 1 missing, with where each rank was from the recorded stacks: rank 1
in load_next_batch's sleep, rank 0 in the all_reduce call."""

import time

from tagged import line

RUN = {"nproc": 2, "summaries": "off", "run_args": ("--hang-timeout", "2", "--kill-on-hang"), "rc": 137}
STEPS, STUCK_STEP, STUCK_RANK = 5, 3, 1


SLEEP_LINE, ALL_REDUCE_LINE = line(__file__, "sleep"), line(__file__, "all_reduce")

EXPECT = {
    "problems": [
        {"kind": "hang", "ranks": [STUCK_RANK],
         "where": {STUCK_RANK: f"verdict_hang.py:{SLEEP_LINE} in load_next_batch",
                   1 - STUCK_RANK: f"verdict_hang.py:{ALL_REDUCE_LINE} in main"},
         "message": [f"all_reduce #{STUCK_STEP}", f"rank {STUCK_RANK} never did",
                     f"verdict_hang.py:{SLEEP_LINE} in load_next_batch"]},
    ],
}


def load_next_batch() -> None:
    time.sleep(3600)  # <sleep>


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1024)
    for step in range(STEPS):
        if rank == STUCK_RANK and step == STUCK_STEP:
            load_next_batch()
        dist.all_reduce(t)  # <all_reduce>
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
