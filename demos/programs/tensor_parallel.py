"""Tensor parallelism: the lecture's program, with the backward pass it leaves as homework
(docs/TEACHING.md#tensor-parallel).

Every rank holds all the data and a column shard of every weight matrix: rank r holds columns
[r*d/N, (r+1)*d/N) of each d x d matrix. Per layer:

  forward   x (batch x d, the same on every rank) @ W_r (d x d/N) -> gelu -> y_r (batch x d/N, this rank's columns)
            all-gather y_0 ... y_{N-1} and concatenate -> the full activation (batch x d) on every rank
  backward  the all-gather's backward: each rank keeps the columns of the gradient that belong to its shard.
            (In general the backward of an all-gather is a reduce-scatter; here every rank computed the same
            loss from the same full activation, so the gradients are equal copies and a slice suffices.)
            dW_r = x^T (g_r * gelu'(z_r))       local: the gradient of this rank's shard, no communication
            dx   = sum over r of (g_r * gelu'(z_r)) W_r^T   each rank holds one term -> all-reduce (SUM)

So the forward pass all-gathers activations and the backward pass all-reduces input gradients: the pair of
collectives of Megatron-style tensor parallelism. Autograd does the local math; the collectives are explicit.

The check: a single process with the full matrices (the shards side by side) must get the same loss and the
same gradient for every shard. The program computes that reference too and asserts it.
"""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from lecture import generate_sample_data, get_init_params, int_divide, summarize_tensor

from disttrace.demos._world import cleanup, setup


def main():
    world = setup(batch_size=2, num_dim=4, num_layers=2)
    rank, world_size, a = world.rank, world.world_size, world.args
    data = generate_sample_data(a.batch_size, a.num_dim, world.device)
    batch_size = data.size(0)
    num_dim = data.size(1)
    local_num_dim = int_divide(num_dim, world_size)  # Shard `num_dim`

    # Create model (each rank gets 1/world_size of the parameters): rank r keeps columns
    # [r * local_num_dim, (r + 1) * local_num_dim) of each full matrix. (The lecture's listing initializes
    # every shard with the same seed, so all shards would be equal; slicing one seeded matrix keeps them apart.)
    columns = slice(rank * local_num_dim, (rank + 1) * local_num_dim)
    params = [nn.Parameter(get_init_params(num_dim, num_dim, world.device).detach()[:, columns].clone())
              for i in range(a.num_layers)]

    # Forward pass
    x = data
    saved = []  # per layer: (input, this rank's output shard), kept for the backward pass
    for i in range(a.num_layers):
        x_in = x.detach().requires_grad_(i > 0)  # the data itself needs no gradient
        # Compute activations (batch_size x local_num_dim)
        y = F.gelu(x_in @ params[i])  # Note: this is only on a slice of the parameters
        saved.append((x_in, y))

        # Allocate memory for activations (world_size x batch_size x local_num_dim)
        activations = [torch.empty(batch_size, local_num_dim, device=world.device) for _ in range(world_size)]

        # Send activations via all gather
        dist.all_gather(tensor_list=activations, tensor=y.detach().contiguous(), async_op=False)

        # Concatenate them to get batch_size x num_dim
        x = torch.cat(activations, dim=1)

    print(f"[tensor_parallelism] Rank {rank}: forward pass produced activations {summarize_tensor(x)}", flush=True)

    # Backward pass (the homework)
    x = x.requires_grad_()
    loss = x.square().mean()  # the same loss on every rank: every rank has the full activation
    (grad,) = torch.autograd.grad(loss, x)  # d loss / d activation, batch_size x num_dim, the same everywhere
    grads = [None] * a.num_layers
    for i in reversed(range(a.num_layers)):
        x_in, y = saved[i]
        # Backward of all-gather + cat: keep the columns of this rank's shard.
        grad_y = grad[:, rank * local_num_dim:(rank + 1) * local_num_dim]
        if i == 0:
            (grads[i],) = torch.autograd.grad(y, params[i], grad_y)
            break
        grads[i], grad_partial = torch.autograd.grad(y, (params[i], x_in), grad_y)
        # This rank's shard contributed one term of d loss / d x_in; the sum of all terms is the gradient.
        dist.all_reduce(grad_partial, op=dist.ReduceOp.SUM)
        grad = grad_partial

    for i in range(a.num_layers):
        print(f"[tensor_parallelism] Rank {rank}: layer {i} shard gradient {summarize_tensor(grads[i])}", flush=True)

    # The single-process reference: the full matrices, whose column shards the ranks hold.
    full = [get_init_params(num_dim, num_dim, world.device) for i in range(a.num_layers)]
    ref = data
    for weight in full:
        ref = F.gelu(ref @ weight)
    ref_loss = ref.square().mean()
    ref_loss.backward()
    worst = max((grads[i] - full[i].grad[:, columns]).abs().max().item() for i in range(a.num_layers))
    worst = max(worst, abs(loss.item() - ref_loss.item()))
    assert worst < 1e-5, f"tensor parallel differs from the single-process reference by {worst}"
    print(f"[tensor_parallelism] Rank {rank}: loss {loss.item():.6f} and shard gradients match the "
          f"single-process reference (max difference {worst:.1e})", flush=True)
    world.results = {"loss": loss.item(), "max_difference": worst, "local_num_dim": local_num_dim}
    cleanup(world)


if __name__ == "__main__":
    main()
