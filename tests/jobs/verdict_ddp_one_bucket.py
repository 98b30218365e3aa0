"""DDP as a newcomer writes it: a small model (one gradient bucket, so one all-reduce a step), 15 iterations, rank 1
sleeping 80 ms before its forward in iterations 3, 7 and 11.

A step is one op long here, and the loop's first iteration differs from the others by the two broadcasts that
DDP's second forward makes after rebuilding its bucket: the steps are still numbered as the loop counts them (15
steps, step k the k-th iteration), so the verdict's steps are the script's 3, 7, 11. Each forward also computes
COMPUTE_S (a sleep stands for the device): the model alone takes ~1 ms a step on a fast CPU, where a scheduler's
hiccup made a second step read as warm-up."""

import time

from tagged import line

RUN = {"nproc": 2, "summaries": "off"}
STEPS = 15
LATE_RANK, LATE_STEPS, LATE_S = 1, (3, 7, 11), 0.080
COMPUTE_S = 0.010
BACKWARD_LINE = line(__file__, "backward")

EXPECT = {
    "straggler": {"rank": LATE_RANK, "steps": list(LATE_STEPS), "period": 4,
                  "cost_ms": (len(LATE_STEPS) * LATE_S * 1e3, 60), "site": f"verdict_ddp_one_bucket.py:{BACKWARD_LINE}"},
    "steps": {"count": STEPS, "warmup_max": 1},
    "problems": [],
}


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(STEPS):
        x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
        if rank == LATE_RANK and step in LATE_STEPS:
            time.sleep(LATE_S)  # a slow data loader
        opt.zero_grad()
        time.sleep(COMPUTE_S)  # the device's forward
        loss_fn(model(x), y).backward()  # <backward>
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
