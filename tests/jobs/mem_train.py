"""Memory's ground truth (`disttrace run --memory`): a 4-layer MLP trained with Adam on 2 ranks, its parameters
splitting evenly (every tensor's first dimension and ZeRO's whole-parameter partition), under the scheme argv[1]
names:
- ddp: DistributedDataParallel. From step LEAK_STEP on, rank LEAK_RANK keeps each step's input in a list (a leak:
  LEAK_BYTES a step); rank EXTRA_RANK holds an extra buffer of EXTRA_BYTES all along (an imbalance);
- zero: DDP with torch.distributed.optim.ZeroRedundancyOptimizer around Adam (ZeRO-1);
- fsdp2: fully_shard on each layer and the model (ZeRO-3);
- acts: DDP on a batch of ACTS_BATCH: the activations (each layer's 4 MB output, kept for the backward) dominate
  the 4 MB of parameters, gradients and Adam state: the step's peak is where the forward ends and the backward
  begins (FORWARD_LINE, BACKWARD_LINE: this file's lines).
Each step all-reduces the loss for logging, as training loops do. `--api DIR` (after the scheme): the job records
itself, `with trace(out=DIR, memory=True)`, instead of being run under `disttrace run --memory`."""

import sys

WIDTH, LAYERS, BATCH = 256, 4, 64
PSI = LAYERS * (WIDTH * WIDTH + WIDTH)   # the model's parameter values
STEPS = {"ddp": 30, "zero": 8, "fsdp2": 8, "acts": 6}
ACTS_BATCH = 4096
LEAK_STEP, LEAK_RANK, LEAK_BYTES = 20, 1, 2 << 20
EXTRA_RANK, EXTRA_BYTES = 0, 8 << 20


def main() -> None:
    scheme = sys.argv[1]
    if sys.argv[2:3] == ["--api"]:
        from disttrace.tracer import trace

        with trace(out=sys.argv[3], memory=True):
            train(scheme)
    else:
        train(scheme)


def train(scheme: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)))
    if scheme == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        net = model
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        net = torch.nn.parallel.DistributedDataParallel(model)
        if scheme == "zero":
            from torch.distributed.optim import ZeroRedundancyOptimizer

            opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
        else:
            opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    extra = torch.ones(EXTRA_BYTES // 4) if scheme == "ddp" and rank == EXTRA_RANK else None  # noqa: F841
    kept = []
    g = torch.Generator().manual_seed(rank)
    for step in range(STEPS[scheme]):
        if scheme == "ddp" and rank == LEAK_RANK and step >= LEAK_STEP:
            kept.append(torch.randn(LEAK_BYTES // 4, generator=g))  # "for later": never freed
        x = torch.randn(ACTS_BATCH if scheme == "acts" else BATCH, WIDTH, generator=g)
        opt.zero_grad()
        loss = net(x).square().mean()  # FORWARD_LINE
        loss.backward()  # BACKWARD_LINE
        opt.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged)
    dist.destroy_process_group()


_LINES = open(__file__).read().splitlines()
FORWARD_LINE = next(i for i, x in enumerate(_LINES, 1) if x.endswith("# FORWARD_LINE"))
BACKWARD_LINE = next(i for i, x in enumerate(_LINES, 1) if x.endswith("# BACKWARD_LINE"))

if __name__ == "__main__":
    main()
