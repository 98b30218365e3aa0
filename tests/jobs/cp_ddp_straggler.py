"""DDP whose steps compute 60 ms on every rank (a sleep in the forward: the host busy, as in a real model's
compute), with a straggler: rank 1 computes 100 ms more before its forward in every 4th step from step 3 (6 of 24).
With --no-fault it runs on time: the critical path's what-if for "rank 1 on time" on the faulty run must predict the
on-time run's step time (tests/analysis/causal/test_critical_path.py). The compute is long beside the few ms of the step's real
work, whose pace on a shared 2-core machine moves from run to run (20 ms steps read 23-30 ms)."""

import sys
import time

from tagged import line

STEPS = 24
LATE_RANK, LATE_STEPS, LATE_S, COMPUTE_S = 1, (3, 7, 11, 15, 19, 23), 0.100, 0.060
NO_FAULT = "--no-fault" in sys.argv


BACKWARD_LINE = line(__file__, "backward")


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for step in range(STEPS):
        x = torch.randn(32, 64)
        time.sleep(COMPUTE_S)
        if rank == LATE_RANK and step in LATE_STEPS and not NO_FAULT:
            time.sleep(LATE_S)
        opt.zero_grad()
        ddp(x).square().mean().backward()  # <backward>
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
