"""Manual data parallel with a periodic straggler: rank 0 sleeps 30 ms before its forward at steps 2, 5 and 8 of 10.

The parameters are broadcast from rank 0 once before the loop; each step then all-reduces every gradient
synchronously (dist.all_reduce(p.grad), one per parameter, issued from the same line) and the loss. Rank 0's
delay shows in the first gradient all-reduce of those steps: rank 1 arrives ~30 ms earlier and waits there. The
late rank is 0, not 1, so that a verdict biased towards a rank fails here or in verdict_ddp_straggler. The
verdict: rank 0, steps 2, 5 and 8, every 3rd, ~90 ms of waiting caused, late before the gradient all-reduce."""

import time

from tagged import line

RUN = {"nproc": 2, "summaries": "off"}
STEPS = 10
LATE_RANK, LATE_STEPS, LATE_S = 0, (2, 5, 8), 0.030


GRAD_LINE = line(__file__, "grad_all_reduce")  # where the late rank arrives: its first gradient all-reduce of the step

EXPECT = {
    "straggler": {"rank": LATE_RANK, "steps": list(LATE_STEPS), "period": 3,
                  "cost_ms": (len(LATE_STEPS) * LATE_S * 1e3, 0.4 * len(LATE_STEPS) * LATE_S * 1e3),
                  "site": f"verdict_manual_dp.py:{GRAD_LINE}"},
    "steps": {"count": STEPS, "warmup_max": 2},
    "problems": [],
}


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)  # different initial weights: the broadcast below is what makes them equal
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        x = torch.randn(16, 32, generator=g)
        if rank == LATE_RANK and step in LATE_STEPS:
            time.sleep(LATE_S)
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)  # <grad_all_reduce>
            p.grad /= world
        opt.step()
        loss = loss.detach()
        dist.all_reduce(loss)  # the logged mean loss
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
