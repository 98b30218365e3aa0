"""Data parallelism: the lecture's program, with a single-process check of what it computes
(docs/TEACHING.md#data-parallel).

Every rank holds the whole model (here an MLP of `num_layers` square matrices) and its own slice of the
batch. After the backward pass the ranks average their gradients with one all-reduce per parameter - "the
only difference between standard training and DDP" - so every rank takes the same optimizer step and the
replicas stay identical.

The check: the average of the ranks' gradients is the gradient of the loss on the whole batch (each rank's
loss is a mean over an equal share), so a single process training on the whole batch must get the same
gradients and parameters. The program computes that reference too and asserts it.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from lecture import generate_sample_data, get_init_params, int_divide, summarize_tensor

from disttrace.demos._world import cleanup, setup


def mlp_loss(x: torch.Tensor, params) -> torch.Tensor:
    for param in params:
        x = x @ param
        x = F.gelu(x)
    return x.square().mean()  # Loss function is average squared magnitude


def main():
    world = setup(batch_size=8, num_dim=4, num_layers=2, num_steps=2)
    rank, world_size, a = world.rank, world.world_size, world.args
    data = generate_sample_data(a.batch_size, a.num_dim, world.device)

    # Get the slice of data for this rank (in practice, each rank should load only its own data)
    batch_size = data.size(0)
    num_dim = data.size(1)
    local_batch_size = int_divide(batch_size, world_size)
    start_index = rank * local_batch_size
    end_index = start_index + local_batch_size
    local_data = data[start_index:end_index]

    # Create MLP parameters params[0], ..., params[num_layers - 1] (each rank has all parameters)
    params = [get_init_params(num_dim, num_dim, world.device) for i in range(a.num_layers)]
    optimizer = torch.optim.AdamW(params, lr=1e-3)  # Each rank has own optimizer state

    # The single-process reference: the same model trained on the whole batch.
    ref_params = [get_init_params(num_dim, num_dim, world.device) for i in range(a.num_layers)]
    ref_optimizer = torch.optim.AdamW(ref_params, lr=1e-3)

    worst = 0.0
    for step in range(a.num_steps):
        # Forward pass
        loss = mlp_loss(local_data, params)

        # Backward pass
        loss.backward()

        # Sync gradients across workers (only difference between standard training and DDP)
        for param in params:
            dist.all_reduce(tensor=param.grad, op=dist.ReduceOp.AVG, async_op=False)

        # Check against the reference before updating: same gradients as one process on the whole batch.
        ref_optimizer.zero_grad()
        mlp_loss(data, ref_params).backward()
        for param, ref in zip(params, ref_params):
            worst = max(worst, (param.grad - ref.grad).abs().max().item())

        # Update parameters
        optimizer.step()
        optimizer.zero_grad()  # not in the lecture's listing: without it the gradients add up across steps
        ref_optimizer.step()

        print(f"[data_parallelism] Rank {rank}: step = {step}, loss = {loss.item():.6f}, "
              f"params = {[summarize_tensor(params[i]) for i in range(a.num_layers)]}", flush=True)

    for param, ref in zip(params, ref_params):
        worst = max(worst, (param - ref).abs().max().item())
    assert worst < 1e-5, f"data parallel differs from the single-process reference by {worst}"
    print(f"[data_parallelism] Rank {rank}: gradients and parameters match the single-process reference "
          f"(max difference {worst:.1e})", flush=True)
    world.results = {"max_difference": worst, "num_layers": a.num_layers, "num_steps": a.num_steps,
                     "local_batch_size": local_batch_size}
    cleanup(world)


if __name__ == "__main__":
    main()
