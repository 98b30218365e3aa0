"""A balanced DDP job: 20 steps, the same work on both ranks, no injected fault.

Whatever waiting there is comes from the job's own jitter (start-up, the scheduler of a shared machine): the
verdict names no straggler and finds no problem, and the steps are still found.

Each step's forward waits DEVICE_S for the device, as a user's step does: without it a step was 6 ms of CPU work,
the size of the scheduler's slice on a shared 2-core machine, and CI's machine made one rank truly late by ~6 ms in
7 of 20 steps (42 ms of waiting, a third of a step a step), which the analysis rightly names. In a step of a
user's size the same hiccups are ~1.5% of it, under what a straggler must save (attribution.MIN_SAVING, 2%)."""

RUN = {"nproc": 2, "summaries": "off"}
STEPS = 20
DEVICE_S = 0.15

EXPECT = {
    "straggler": None,
    "steps": {"count": STEPS, "warmup_max": 2},
    "problems": [],
}


def main() -> None:
    import time

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
    for _ in range(STEPS):
        x = torch.randn(32, 64, generator=g)
        opt.zero_grad()
        time.sleep(DEVICE_S)  # the device computing the forward
        ddp(x).square().mean().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
