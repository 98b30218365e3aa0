"""DDP with a periodic straggler: rank 1 sleeps 50 ms before its forward at steps 4, 9, 14 and 19 of 20.

DDP's reducer issues the gradient all-reduces itself (async, two buckets here, no wait() from Python): the waits
are inside those ops, from arrival. The verdict: rank 1, those four steps, every 5th, ~200 ms of waiting caused,
late between two backward() calls."""

import time

from tagged import line

RUN = {"nproc": 2, "summaries": "off"}
STEPS = 20
LATE_RANK, LATE_STEPS, LATE_S = 1, (4, 9, 14, 19), 0.050


BACKWARD_LINE = line(__file__, "backward")  # DDP's all-reduces are issued from the backward() call

EXPECT = {
    "straggler": {"rank": LATE_RANK, "steps": list(LATE_STEPS), "period": 5,
                  "cost_ms": (len(LATE_STEPS) * LATE_S * 1e3, 60), "site": f"verdict_ddp_straggler.py:{BACKWARD_LINE}"},
    "steps": {"count": STEPS, "warmup_max": 2},
    "problems": [],
}
DAMAGE = {
    "garbled": {"args": {"rank": 1, "kind": "b"}, "expect": {"problems": [], "warnings": ["malformed"]}},
    "cut": {"args": {"rank": 1}, "expect": {"problems": [{"kind": "died", "ranks": [1]}], "warnings": ["torn"]}},
}


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)  # two gradient buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        x = torch.randn(32, 64, generator=g)
        if rank == LATE_RANK and step in LATE_STEPS:
            time.sleep(LATE_S)
        opt.zero_grad()
        ddp(x).square().mean().backward()  # <backward>
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
