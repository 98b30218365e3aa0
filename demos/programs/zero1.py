"""ZeRO stage 1: shard the optimizer states across the data-parallel ranks (the chapter's "ZeRO-Stage-One":
docs/TEACHING.md#zero1).

Mixed-precision training with Adam keeps, per parameter (the chapter's table):
  parameters in bf16 (2 bytes) + gradients in bf16 (2 bytes)
  + optimizer states in fp32: a master copy of the parameters, momentum and variance (K = 12 bytes)
= 16 bytes per parameter on every data-parallel rank. ZeRO-1 keeps the first two everywhere but gives each of
the N_d ranks only 1/N_d of the optimizer states, so that a rank holds

    (2 + 2) Ψ + K Ψ / N_d   bytes for Ψ parameters.

One training step, per rank:
  1. forward and backward on this rank's slice of the batch -> bf16 gradients of all Ψ parameters
  2. reduce-scatter the flat gradients: rank r receives the summed gradients of its shard, Ψ/N_d of them
  3. Adam updates rank r's fp32 master shard (its momentum and variance are the only ones it holds)
  4. all-gather the updated shards (cast to bf16): every rank has every updated parameter again

The model is a plain nn.Module (bf16 nn.Linear layers) and each rank's optimizer a plain torch.optim.Adam over its
fp32 master shard, so that `disttrace run --memory` (which `disttrace demo zero1` turns on) sees them as it sees a
user's job: the modules' parameters and their gradients, and the optimizer's fp32 master copy with its momentum and
variance as optimizer state. The program also measures the bytes it holds on the tensors themselves, beside the
formula, and checks the result against plain data parallelism (every rank running Adam on everything, after the
steps, from the gradients each step's all-reduce summed).
"""

import torch
import torch.distributed as dist
from torch import nn

from disttrace.demos._world import cleanup, nbytes, print_held, setup

K = 12  # bytes of Adam state per parameter: fp32 master copy (4) + momentum (4) + variance (4)


def make_model(num_dim: int, num_layers: int, device) -> nn.Sequential:
    """The same bf16 model on every rank: num_layers Linear layers (no bias: Ψ = num_layers x num_dim²), GELU after
    each."""
    generator = torch.Generator().manual_seed(0)  # the same initial model on every rank
    layers = []
    for _ in range(num_layers):
        linear = nn.Linear(num_dim, num_dim, bias=False)
        with torch.no_grad():  # x @ w with w ~ N(0, 1/num_dim): Linear computes x @ weight.T
            linear.weight.copy_((torch.randn(num_dim, num_dim, generator=generator) / num_dim ** 0.5).T)
        layers += [linear, nn.GELU()]
    return nn.Sequential(*layers).to(device, torch.bfloat16)


def forward_backward(model, x):
    loss = model(x).float().square().mean()
    loss.backward()
    return loss


def flat(params) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def main():
    world = setup(num_dim=64, num_layers=4, batch_size=16, num_steps=3)
    rank, n, a = world.rank, world.world_size, world.args
    model = make_model(a.num_dim, a.num_layers, world.device)
    params = list(model.parameters())
    psi = sum(p.numel() for p in params)
    if psi % n:
        raise SystemExit(f"{psi} parameters do not split into {n} equal shards")
    shard = psi // n
    mine = slice(rank * shard, (rank + 1) * shard)

    # This rank's optimizer state: an fp32 master copy of its shard, and Adam's momentum and variance for it.
    master = flat(params)[mine].float().clone().requires_grad_()
    optimizer = torch.optim.Adam([master], lr=1e-3)

    generator = torch.Generator().manual_seed(1)
    data = torch.randn(a.batch_size, a.num_dim, generator=generator).to(world.device, torch.bfloat16)
    local = data.chunk(n)[rank]

    summed = []  # the check's: every step's gradients summed over the ranks (plain data parallelism's)
    for step in range(a.num_steps):
        model.zero_grad()
        loss = forward_backward(model, local)                                         # 1
        flat_grads = flat(p.grad for p in params)
        grad_shard = torch.empty(shard, dtype=torch.bfloat16, device=world.device)
        dist.reduce_scatter_tensor(grad_shard, flat_grads, op=dist.ReduceOp.SUM)     # 2
        master.grad = grad_shard.float() / n   # the average over ranks, like DDP
        optimizer.step()                                                               # 3
        master.grad = None
        gathered = torch.empty(psi, dtype=torch.bfloat16, device=world.device)
        dist.all_gather_into_tensor(gathered, master.detach().to(torch.bfloat16))     # 4
        with torch.no_grad():
            for p, new in zip(params, gathered.split([p.numel() for p in params])):
                p.copy_(new.view_as(p))
        summed.append(sum_grads(flat_grads))
        print(f"rank {rank}: step {step} loss {loss.item():.6f}", flush=True)

    # What this rank holds, measured on the tensors themselves.
    state = optimizer.state[master]
    held = {
        "parameters (bf16)": nbytes(*params),
        "gradients (bf16)": nbytes(*[p.grad for p in params]),
        "optimizer states (fp32 master + momentum + variance)": nbytes(master, state["exp_avg"], state["exp_avg_sq"]),
    }
    measured = sum(held.values())
    formula = (2 + 2) * psi + K * psi / n
    unsharded = (2 + 2 + K) * psi

    # The check (after the steps, so that the steps hold only ZeRO-1's memory): plain data parallelism, Adam on
    # all Ψ fp32 parameters from the same start, stepped with the average of every rank's gradients.
    ref_master = flat(make_model(a.num_dim, a.num_layers, world.device).parameters()).float().requires_grad_()
    ref_optimizer = torch.optim.Adam([ref_master], lr=1e-3)
    for total in summed:
        ref_master.grad = (total / n).float()
        ref_optimizer.step()
    worst = (master.detach() - ref_master.detach()[mine]).abs().max().item()
    assert worst < 1e-4, f"ZeRO-1 differs from plain data parallelism by {worst}"

    print_held(rank, held)
    print(f"rank {rank}: measured {measured:,d} bytes; (2+2)Ψ + KΨ/N_d = (4 + 12/{n}) x {psi:,d} = {formula:,.0f}; "
          f"without ZeRO 16Ψ = {unsharded:,d}", flush=True)
    print(f"rank {rank}: matches plain data parallelism (max difference {worst:.1e})", flush=True)
    world.results = {"psi": psi, "n": n, "held": held, "measured": measured, "formula": formula,
                     "unsharded": unsharded, "max_difference": worst, "shard": shard}
    cleanup(world)


def sum_grads(flat_grads):
    """The sum of every rank's flat gradients, for the reference (an all-reduce: not part of ZeRO-1)."""
    total = flat_grads.clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total


if __name__ == "__main__":
    main()
