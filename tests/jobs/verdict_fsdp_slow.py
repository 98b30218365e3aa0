"""FSDP2 with a slow rank: rank 1 sleeps 20 ms before its forward at every one of 12 steps. And once, rank 0 saves a
checkpoint (100 ms after step CHECKPOINT_STEP), which rank 1 waits for: one long hiccup of another rank must not
hide the steady straggler (it did: "No straggler", rank 1's cost under 3 times rank 0's in all).

fully_shard on a CPU gloo mesh: FSDP2 issues the parameter all-gathers (forward and backward) and the gradient
reduce-scatters itself, from its pre-forward/pre-backward hooks. Rank 1's delay shows in the first all-gather of
each forward, issued from the forward line: rank 0 arrives ~20 ms earlier and waits there. The verdict: rank 1,
every step (period 1), ~12 x 20 ms of waiting caused (warm-up steps may be left out: 40% tolerance), late before
the forward call."""

import time

from tagged import line

RUN = {"nproc": 2, "summaries": "off"}
STEPS = 12
LATE_RANK, LATE_S = 1, 0.020
CHECKPOINT_STEP, CHECKPOINT_S = 5, 0.100


FORWARD_LINE = line(__file__, "forward")  # FSDP2's first all-gather of a step is issued from the forward call

EXPECT = {
    "straggler": {"rank": LATE_RANK, "steps": None, "period": 1,
                  "cost_ms": (STEPS * LATE_S * 1e3, 0.4 * STEPS * LATE_S * 1e3),
                  "site": f"verdict_fsdp_slow.py:{FORWARD_LINE}"},
    "steps": {"count": STEPS, "warmup_max": 2},
    "problems": [],
}


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        x = torch.randn(16, 64, generator=g)
        if rank == LATE_RANK:
            time.sleep(LATE_S)
        opt.zero_grad()
        loss = model(x).square().mean()  # <forward>
        loss.backward()
        opt.step()
        if rank == 0 and step == CHECKPOINT_STEP:
            time.sleep(CHECKPOINT_S)  # rank 0 writes a checkpoint
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
