"""ZeRO stage 3 as PyTorch's FSDP2 does it: parameters, gradients and optimizer states all sharded across the
data-parallel ranks (docs/TEACHING.md#fsdp2).

ZeRO-1 (`disttrace demo zero1`) shards only the optimizer states; ZeRO-3 shards everything, so that a rank holds

    (2 + 2 + K) Ψ / N   bytes for Ψ parameters (the chapter's notation; K = 12 for mixed-precision Adam).

Here the model stays in fp32 (on gloo and the CPU, no mixed precision): a parameter shard is 4 bytes a value, its
gradient 4, Adam's momentum and variance 4 + 4, so the formula reads (4 + 4 + 8)Ψ/N: the same 16 bytes a parameter
as the chapter's 2 + 2 + 12, all of it divided by N.

`fully_shard` on each layer (a unit) and on the model: each rank keeps the rows 1/N of every weight. One step:
  1. forward: each unit's parameters are all-gathered just before it runs (a transient copy of the whole unit),
     and freed again after it (reshard_after_forward)
  2. backward: each unit is all-gathered again, its gradients computed, then reduce-scattered: rank r keeps the
     averaged gradient of its shard only
  3. Adam updates the shards: its state exists for the shard only
The whole model is never held at once: at most a unit or two beside the shards, the transient peak the recorder
sees as communication buffers (`disttrace run --memory`, which `disttrace demo fsdp2` turns on).

The check, after the steps: a single process training an unsharded copy on the whole batch with plain Adam gets
the same parameters; each rank compares its shards with the reference's rows.
"""

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from disttrace.demos._world import cleanup, nbytes, print_held, setup

K = 8  # bytes of Adam state per fp32 parameter: momentum (4) + variance (4); the fp32 shard is the master copy


def make_model(num_dim: int, num_layers: int) -> nn.Sequential:
    """The same model on every rank: num_layers Linear layers (no bias: Ψ = num_layers x num_dim²), GELU after
    each."""
    torch.manual_seed(0)
    layers = []
    for _ in range(num_layers):
        layers += [nn.Linear(num_dim, num_dim, bias=False), nn.GELU()]
    return nn.Sequential(*layers)


def train(model, optimizer, x, num_steps: int, say=None) -> None:
    for step in range(num_steps):
        optimizer.zero_grad()
        loss = model(x).square().mean()   # 1 (FSDP2's all-gathers run inside)
        loss.backward()                   # 2 (its all-gathers and reduce-scatters too)
        optimizer.step()                  # 3
        if say:
            say(step, loss)


def main():
    world = setup(num_dim=64, num_layers=4, batch_size=16, num_steps=3)
    rank, n, a = world.rank, world.world_size, world.args
    if a.num_dim % n:
        raise SystemExit(f"{a.num_dim} rows do not split into {n} equal shards")
    mesh = init_device_mesh(world.device.type, (n,))
    model = make_model(a.num_dim, a.num_layers).to(world.device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)   # a unit: gathered, used and freed as one
    fully_shard(model, mesh=mesh)
    psi = a.num_layers * a.num_dim ** 2
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    generator = torch.Generator().manual_seed(1)
    data = torch.randn(a.batch_size, a.num_dim, generator=generator).to(world.device)
    train(model, optimizer, data.chunk(n)[rank], a.num_steps,
          lambda step, loss: print(f"rank {rank}: step {step} loss {loss.item():.6f}", flush=True))

    # What this rank holds, measured on its shards (a DTensor's local part).
    shards = [p.to_local() for p in model.parameters()]
    state = [optimizer.state[p] for p in model.parameters()]
    held = {
        "parameters (fp32 shards)": nbytes(*shards),
        "gradients (fp32 shards)": nbytes(*[p.grad.to_local() for p in model.parameters()]),
        "optimizer states (momentum + variance of the shards)":
            nbytes(*[s["exp_avg"].to_local() for s in state], *[s["exp_avg_sq"].to_local() for s in state]),
    }
    measured = sum(held.values())
    formula = (4 + 4 + K) * psi / n
    unsharded = (4 + 4 + K) * psi

    # The check (after the steps, so that they hold only FSDP2's memory): the unsharded model on the whole batch.
    ref = make_model(a.num_dim, a.num_layers).to(world.device)
    train(ref, torch.optim.Adam(ref.parameters(), lr=1e-3), data, a.num_steps)
    worst = max((shard - full.detach().chunk(n)[rank]).abs().max().item()
                for shard, full in zip(shards, ref.parameters()))
    assert worst < 1e-5, f"FSDP2 differs from the unsharded model by {worst}"

    print_held(rank, held)
    print(f"rank {rank}: measured {measured:,d} bytes; (4 + 4 + 8)Ψ/N = 16 x {psi:,d} / {n} = {formula:,.0f}; "
          f"unsharded 16Ψ = {unsharded:,d}", flush=True)
    print(f"rank {rank}: matches the unsharded model (max difference {worst:.1e})", flush=True)
    world.results = {"psi": psi, "n": n, "held": held, "measured": measured, "formula": formula,
                     "unsharded": unsharded, "max_difference": worst, "unit_bytes": 4 * a.num_dim ** 2}
    cleanup(world)


if __name__ == "__main__":
    main()
