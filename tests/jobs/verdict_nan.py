"""A NaN on one rank: manual data parallel (a linear model, each gradient all-reduced synchronously, then
averaged), 6 steps; at step 3 one value of rank 1's input batch is NaN. Its loss and gradients turn NaN, so rank
1's first gradient all-reduce of that step (all_reduce #6: two parameters a step) carries NaN in its input, and
every op after it carries NaN on both ranks. Recorded with `--summaries stats` (NaN/Inf counts, checksums).

The verdict: one `nonfinite` problem naming rank 1's input to all_reduce #6 and its site. No divergence: the
all-reduce hands both ranks the same NaN bits, so their outputs' checksums stay equal."""

from tagged import line


RUN = {"nproc": 2, "summaries": "stats"}
STEPS, NAN_STEP, NAN_RANK = 6, 3, 1
PARAMS = 2  # the linear layer's weight and bias: one all_reduce each per step


SITE = f"verdict_nan.py:{line(__file__, 'grad_all_reduce')}"

EXPECT = {
    "problems": [
        {"kind": "nonfinite", "ranks": [NAN_RANK],
         "message": [f"rank {NAN_RANK}'s input to all_reduce #{NAN_STEP * PARAMS}", SITE, "NaN"]},
    ],
}


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        x = torch.randn(8, 16, generator=g)
        if rank == NAN_RANK and step == NAN_STEP:
            x[0, 0] = float("nan")
        opt.zero_grad()
        model(x).square().mean().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)  # <grad_all_reduce>
            p.grad /= world
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
