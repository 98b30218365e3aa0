"""A chain of waits across three ranks through P2P: every step each rank computes 20 ms (its own work, as a
forward), then rank 0 sends to rank 1, which computes 5 ms on what it received and sends on to rank 2, which
computes 5 ms on it too; then the three all_reduce. The fault: rank 0 computes 40 ms more before its send in every
4th step from step 3 (6 of 24), so rank 1 waits for it in its recv, and rank 2 waits for rank 1 in its own (the delay
propagated through rank 1). With --no-fault it runs on time: "rank 0 on time" on the faulty run must predict the
on-time run's step time (tests/analysis/causal/test_critical_path.py)."""

import sys
import time

from tagged import line

STEPS = 24
LATE_RANK, LATE_STEPS, LATE_S = 0, (3, 7, 11, 15, 19, 23), 0.040
COMPUTE_S, FORWARD_S = 0.020, 0.005
NUMEL = 1024
NO_FAULT = "--no-fault" in sys.argv


SEND0_LINE, SEND1_LINE = line(__file__, "send0"), line(__file__, "send1")


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    buf, total = torch.zeros(NUMEL), torch.ones(16)
    for step in range(STEPS):
        time.sleep(COMPUTE_S)
        if rank == 0:
            if step in LATE_STEPS and not NO_FAULT:
                time.sleep(LATE_S)
            buf.fill_(step)
            dist.send(buf, dst=1)  # <send0>
        elif rank == 1:
            dist.recv(buf, src=0)  # <recv1>
            time.sleep(FORWARD_S)
            dist.send(buf, dst=2)  # <send1>
        else:
            dist.recv(buf, src=1)  # <recv2>
            time.sleep(FORWARD_S)
        dist.all_reduce(total)  # <all_reduce>
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
