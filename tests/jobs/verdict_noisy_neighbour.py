"""DDP on 3 ranks with a periodic straggler beside a noisy one: rank 1 sleeps 50 ms before its forward at steps 3,
7, 11 and 15 of 16; rank 2, as if its data came from a shared disk, 4 to 12 ms at six other steps.

The others' delays spread over a few to ~35 ms of waiting caused, a jitter of two modes (as a loaded machine's
scheduler makes: test_kineto's job beside busy loops had 3-25 ms against a straggler's ~100 ms), whose median
absolute deviation alone put the outliers' line past the straggler's delays in 8 of 10 runs. The verdict: rank 1, those four
steps, every 4th, ~400 ms of waiting caused (two ranks wait 50 ms each time); rank 2's delays are not its steps."""

import time

from tagged import line

RUN = {"nproc": 3, "summaries": "off"}
STEPS = 16
LATE_RANK, LATE_STEPS, LATE_S = 1, (3, 7, 11, 15), 0.050
NOISY_RANK, NOISY_S = 2, {2: 0.004, 5: 0.007, 6: 0.010, 9: 0.012, 10: 0.011, 13: 0.009}

BACKWARD_LINE = line(__file__, "backward")

EXPECT = {
    "straggler": {"rank": LATE_RANK, "steps": list(LATE_STEPS), "period": 4,
                  "cost_ms": (len(LATE_STEPS) * LATE_S * 2e3, 100),
                  "site": f"verdict_noisy_neighbour.py:{BACKWARD_LINE}"},
    "steps": {"count": STEPS, "warmup_max": 2},
    "problems": [],
}


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        x = torch.randn(32, 64, generator=g)
        if rank == LATE_RANK and step in LATE_STEPS:
            time.sleep(LATE_S)
        if rank == NOISY_RANK and step in NOISY_S:
            time.sleep(NOISY_S[step])
        opt.zero_grad()
        ddp(x).square().mean().backward()  # <backward>
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
