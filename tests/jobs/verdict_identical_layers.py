"""A step over identical layers: each of 40 steps averages 49 gradients of one size (256 floats) and then the loss
for logging (1,024 floats), all through one helper, so that every op of the step has the same call site and only
the loss differs (in its size); rank 1 sleeps 200 ms at each step's start from step 25 on
(far above a loaded machine's hiccups: CI's made rank 1 truly late 23 ms in one ordinary step, a true but extra step
that the test holds to a quarter of the injected delay).

The step is the unit of 50 ops that holds the loss once: a period of one all-reduce (the 256-float one, repeated
49 times in a row) does not reproduce the loss in every unit, so it is not the step (it was, of 99 layers: 5,940
one-op steps, and "no straggler: ranks are late by turns"). The verdict: rank 1, steps 25..39, ~200 ms a step."""

import time

RUN = {"nproc": 2, "summaries": "off"}
STEPS, LAYERS = 40, 49
LATE_RANK, LATE_FROM, LATE_S = 1, 25, 0.200
LATE_STEPS = list(range(LATE_FROM, STEPS))

EXPECT = {
    # the waiting it caused beyond its ordinary step (a step of 50 ops holds a few ms it causes by turns, 4-8 ms
    # here, more on a slower machine): its sleep at each late step's first op, and a little more in the ops after
    # it (a rank woken from a sleep runs its next all-reduces slower)
    "straggler": {"rank": LATE_RANK, "steps": LATE_STEPS, "cost": "beyond_ordinary",
                  "cost_ms": (1.05 * len(LATE_STEPS) * LATE_S * 1e3, 0.3 * len(LATE_STEPS) * LATE_S * 1e3)},
    "steps": {"count": STEPS, "warmup_max": 2},
    "problems": [],
}


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    def average(t):  # what every layer's gradient and the logged loss go through
        dist.all_reduce(t)
        t /= world

    g = torch.Generator().manual_seed(rank)
    grads = [torch.zeros(256) for _ in range(LAYERS)]
    for step in range(STEPS):
        if rank == LATE_RANK and step >= LATE_FROM:
            time.sleep(LATE_S)
        for grad in grads:
            grad.normal_(generator=g)
            average(grad)
        loss = torch.rand(1024, generator=g)  # the per-sample losses, logged as their mean
        average(loss)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
