"""A periodic slowdown between two runs (issue 53): a 2-rank DDP job (gloo, a small MLP, 20 steps) written as a user
writes it, run as it is (A) and with `--slow` (B): then rank 1 sleeps SLOW_S before its forward in every 5th step
(a data loader that stalls now and then, a periodic checkpoint on one rank).

The ground truth: B's mean step is longer by about SLOW_S / PERIOD (10 ms a step), its median barely moves (4 steps
in 5 are as fast as A's); `disttrace diff A B` must call B slower, and its first explanation must be rank 1's compute
span ending at the backward() line (DDP's all-reduces are issued from backward(): the sleep lies between the previous
step's last bucket and this step's first), explaining about SLOW_S / PERIOD a step."""

import sys
import time

RUN = {"nproc": 2, "summaries": "off"}
STEPS, PERIOD = 20, 5
SLOW_RANK, SLOW_S = 1, 0.050


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    slow = "--slow" in sys.argv[1:]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
        if slow and rank == SLOW_RANK and step % PERIOD == PERIOD - 1:
            time.sleep(SLOW_S)  # <slow>
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()  # <backward>
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
