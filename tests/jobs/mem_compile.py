"""torch.compile under `disttrace run --memory` (2 ranks, gloo): DDP of an MLP whose layers split evenly, compiled
with torch.compile's default backend (inductor, C++ kernels on the CPU; COMPILE_BACKEND overrides it), Adam, STEPS
steps, each all-reducing the loss for logging. Writes to argv[1].RANK, as JSON: the losses and the parameters'
checksum (a job traced with --memory must compute the same numbers, bit for bit, as untraced) and the frames Dynamo
compiled (traced, the job must compile as untraced, not fall back to eager).

Memory's ground truth: fp32 Adam, 4 + 4 + 8 bytes a parameter value (PSI of them), DDP replicated."""

import json
import os
import sys

WIDTH, LAYERS, BATCH, STEPS = 128, 3, 32, 5
PSI = LAYERS * (WIDTH * WIDTH + WIDTH)


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch._dynamo.utils import counters

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU())
                                  for _ in range(LAYERS)))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    net = torch.compile(ddp, backend=os.environ.get("COMPILE_BACKEND", "inductor"))
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(BATCH, WIDTH, generator=g)
        opt.zero_grad()
        loss = net(x).square().mean()
        loss.backward()
        opt.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        losses.append(logged.item())
    checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
    with open(f"{sys.argv[1]}.{rank}", "w") as f:
        json.dump({"losses": losses, "checksum": checksum, "frames_ok": counters["frames"]["ok"]}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
