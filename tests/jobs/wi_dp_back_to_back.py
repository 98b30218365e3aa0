"""Data parallelism by hand, two synchronous collectives back to back in every step: 4 ranks (gloo), 12 steps. Each
rank loads a batch, computes its gradients (a sleep in the forward stands for the device's ~30 ms), all-reduces
them (one flat buffer), then at once all-reduces its loss for the log. Rank 0's data loader takes 40 ms longer than
the others' in every step (slow storage): ranks 1-3 wait for it in the gradients' all-reduce, then go straight on
into the loss's.

tests/analysis/causal/test_attribution_truth.py reads the trace with the loss all-reduce's recorded start moved 20 µs
before the gradients' all-reduce's recorded end on ranks 1-3 (as the clock reads of a reduce-scatter's end and the
next all-reduce's start interleaved in a 16-rank job, issue 53; one process's reads never do here). The verdict:
one worker, rank 0; "rank 0 at its peers' pace" predicts the run without the slow loader (`--no-fault`)."""

import sys
import time

STEPS, WORLD = 12, 4
SLOW_RANK, SLOW_S, LOAD_S, COMPUTE_S = 0, 0.040, 0.005, 0.030
NO_FAULT = "--no-fault" in sys.argv


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))

        def forward(self, x):
            time.sleep(COMPUTE_S)  # the device computing
            return self.body(x)

    model = Net()
    for p in model.parameters():  # every replica starts from rank 0's weights
        dist.broadcast(p.data, 0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def batches():
        g = torch.Generator().manual_seed(rank)
        while True:
            time.sleep(LOAD_S + (SLOW_S if rank == SLOW_RANK and not NO_FAULT else 0.0))  # reading from storage
            yield torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)

    loader = batches()
    for step in range(STEPS):
        x, y = next(loader)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)  # the gradients, averaged over the replicas
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g) / world)
        logged = loss.detach().clone()
        dist.all_reduce(logged)  # the loss, for the log
        opt.step()
        if rank == 0 and step % 4 == 0:
            print(f"step {step}: loss {logged.item() / world:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
