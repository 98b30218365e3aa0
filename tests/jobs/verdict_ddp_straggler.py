"""DDP with a periodic straggler: rank 1 sleeps 50 ms before its forward at steps 4, 9, 14 and 19 of 20.

DDP's reducer issues the gradient all-reduces itself (async, two buckets here, no wait() from Python): the waits
are inside those ops, from arrival. The verdict: rank 1, those four steps, every 5th, ~200 ms of waiting caused,
late between two backward() calls.

With --slow-start=S, rank 0 spends S seconds before its first collective (loading, building: what imports and
set-up do), and rank 1 waits for it in DDP's first collective: the root causes of the steady steps' waiting still
put rank 1's span first, rank 0's start-up said apart (tests/analysis/causal/test_critical_path.py)."""

import sys
import time

from tagged import line

RUN = {"nproc": 2, "summaries": "off"}
STEPS = 20
LATE_RANK, LATE_STEPS, LATE_S = 1, (4, 9, 14, 19), 0.050
SLOW_START_RANK = 0
SLOW_START_S = float(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--slow-start=")), 0))


BACKWARD_LINE = line(__file__, "backward")  # DDP's all-reduces are issued from the backward() call
DDP_LINE = line(__file__, "ddp")  # DDP's first collectives are issued from its constructor

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
    if rank == SLOW_START_RANK and SLOW_START_S:
        time.sleep(SLOW_START_S)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)  # two gradient buckets # <ddp>
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
