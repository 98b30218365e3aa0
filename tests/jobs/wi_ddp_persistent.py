"""DDP with a persistent straggler: 4 ranks, rank 3's data loader takes 60 ms longer than the others' in every step
(slow storage), 24 steps. Each step computes ~30 ms on every rank (a sleep in the model's forward stands for the
device's compute).

The others reach the gradient all-reduces first and wait for rank 3 inside DDP's reducer (in C++, at the end of
backward()): that wait is not compute. The verdict: one worker, rank 3, in every step; "rank 3 at its peers' pace"
predicts the run without the slow loader (`--no-fault`) within 15%, and so does its saving.

`--batchnorm`: the model has buffers (BatchNorm's running statistics), so each forward starts with DDP broadcasting
them from rank 0 (`broadcast_buffers`, on by default), waited for in C++. gloo relays a broadcast through a tree:
rank 1 waits in it for rank 3, then reaches the gradients' all-reduce as late as rank 3 does, though it computed on
pace. The verdict is the same: one worker, rank 3 (not rank 1, not "nothing": the broadcast's wait is not compute,
and rank 1 waited for rank 3).

24 steps, not 12: the first steady step is entered as late as the warm-up left it (DDP's bucket rebuild, in
the warm-up step, waits for the slow rank), which no change to the steady steps undoes: the what-if's mean
carries it, 1 step of the 11 replayed at 12 steps (~4 ms of a ~45 ms step), 1 of 23 here."""

import sys
import time

STEPS, WORLD = 24, 4
SLOW_RANK, SLOW_S, LOAD_S, COMPUTE_S = 3, 0.060, 0.005, 0.030
NO_FAULT = "--no-fault" in sys.argv
BATCHNORM = "--batchnorm" in sys.argv


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            norm = [nn.BatchNorm1d(256)] if BATCHNORM else []
            self.body = nn.Sequential(nn.Linear(64, 256), *norm, nn.ReLU(), nn.Linear(256, 10))

        def forward(self, x):
            time.sleep(COMPUTE_S)  # the device computing
            return self.body(x)

    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def batches():
        g = torch.Generator().manual_seed(rank)
        while True:
            time.sleep(LOAD_S + (SLOW_S if rank == SLOW_RANK and not NO_FAULT else 0.0))  # reading from storage
            yield torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)

    loader = batches()
    for _ in range(STEPS):
        x, y = next(loader)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
