"""The job the diff's ground truth is made of (issue 42): the same small data-parallel job run twice, with one
thing changed between the two runs (`--change=...`), or nothing.

4 ranks, 40 steps (a shared machine's load moves over seconds: a longer run meets more of it, and two runs' paces
come closer). Each step: the loader (10 ms), a forward that computes ~40 ms (a sleep stands for the device), a small
all_reduce in a two-rank group (a tensor-parallel shard's sync: groups of pairs, {0, 1} and {2, 3}), the backward,
whose gradients (~21 KiB) DDP's reducer all-reduces in buckets of BUCKET_MB (two buckets), and the optimizer's step.
The work on the CPU is kept small: on a shared 2-core machine its pace moves between two runs by ~10 ms a step,
which the changes that must be explained (slow, extra) stand well above. The changes:
- `slow`: rank 3 computes SLOW_S longer between the group's all_reduce and the backward (one span, one rank);
- `bucket`: DDP's buckets hold BIG_BUCKET_MB (every gradient in one all_reduce, instead of two);
- `extra`: a metrics all_reduce of EXTRA_ELEMS floats over every rank after the optimizer's step (a new op and site);
- `groups`: the two-rank groups strided, {0, 2} and {1, 3} (another layout, the same ops);
- `none` (the default): nothing.
"""

import sys
import time

STEPS, WORLD = 40, 4
LOAD_S, COMPUTE_S = 0.010, 0.040
SLOW_RANK, SLOW_S = 3, 0.080
BUCKET_MB, BIG_BUCKET_MB = 0.004, 25
EXTRA_ELEMS = 4 << 20  # 16 MiB of float32
CHANGES = ("none", "slow", "bucket", "extra", "groups")


def change() -> str:
    for a in sys.argv[1:]:
        if a.startswith("--change="):
            c = a.split("=", 1)[1]
            if c not in CHANGES:
                raise SystemExit(f"--change: one of {', '.join(CHANGES)}")
            return c
    return "none"


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    what = change()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    layout = [[0, 2], [1, 3]] if what == "groups" else [[0, 1], [2, 3]]
    groups = [dist.new_group(ranks) for ranks in layout]  # (every rank makes every group, in one order)
    mine = next(g for g, ranks in zip(groups, layout) if rank in ranks)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 8))

        def forward(self, x):
            time.sleep(COMPUTE_S)  # the device computing
            return self.body(x)

    bucket = BIG_BUCKET_MB if what == "bucket" else BUCKET_MB
    model = nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=bucket)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    shard = torch.ones(256)
    metrics = torch.zeros(EXTRA_ELEMS)
    for _ in range(STEPS):
        time.sleep(LOAD_S)  # reading from storage
        x, y = torch.randn(32, 32, generator=g), torch.randint(0, 8, (32,), generator=g)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        dist.all_reduce(shard, group=mine)  # <group>
        if what == "slow" and rank == SLOW_RANK:
            time.sleep(SLOW_S)  # a slower kernel on this rank
        loss.backward()  # <backward>
        opt.step()
        if what == "extra":
            dist.all_reduce(metrics)  # <extra>
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
