"""A data-parallel training loop, as a user writes one, whose rank --rank becomes a straggler at step --at: from
then on its data loading takes --slow-ms longer each step (a slower disk, a noisy neighbour), so that its peers
wait for it in every all-reduce. `mark_step()` ends each iteration unless --no-steps. For the black box's whole
run (tests/analysis/waits/test_whole_run_real.py): `disttrace run --black-box --window N` names the rank and the
step it began at from the aggregates."""

import argparse
import time

import torch
import torch.distributed as dist

from disttrace.tracer import mark_step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--at", type=int, default=30)
    p.add_argument("--slow-ms", type=float, default=40.0)
    p.add_argument("--compute-ms", type=float, default=10.0)
    p.add_argument("--no-steps", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        time.sleep(args.compute_ms / 1000)  # loading the batch
        if rank == args.rank and step >= args.at:
            time.sleep(args.slow_ms / 1000)
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        for param in model.parameters():
            dist.all_reduce(param.grad)
            param.grad /= world
        opt.step()
        if not args.no_steps:
            mark_step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
