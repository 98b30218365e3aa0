"""Pipeline parallelism: the lecture's program (seed 001), with the backward pass it leaves as homework.

The layers are split into stages, one per rank: rank r holds layers [r*L/N, (r+1)*L/N). The batch is cut
into micro-batches so that the stages can work at the same time on different micro-batches.

  forward   for each micro-batch: receive the activation from rank r-1, run this stage's layers, send the
            result to rank r+1 (rank 0 reads the data; the last rank computes the loss)
  backward  for each micro-batch, in reverse: the last rank starts from the loss; every other rank receives the
            gradient of its output from rank r+1, runs the backward of its layers, and sends the gradient of
            its input to rank r-1. Each rank's layers accumulate their parameter gradients.

This is the GPipe schedule: all forwards, then all backwards. While the pipeline fills and drains, stages sit
idle - the bubble, (N-1)/(M+N-1) of the time for N stages and M micro-batches. More micro-batches, less bubble.
At this toy size a layer takes microseconds, so each stage also sleeps `--compute-ms` per micro-batch and
direction to stand for real compute: that is what makes the schedule and the bubble visible in the timeline.

The check: one process running all the layers on the whole batch must get the same loss and gradients.
"""

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from lecture import generate_sample_data, get_init_params, int_divide, summarize_tensor

from disttrace.demos._world import cleanup, setup


def main():
    world = setup(batch_size=8, num_dim=4, num_layers=4, num_micro_batches=4, compute_ms=20)
    rank, world_size, a = world.rank, world.world_size, world.args
    data = generate_sample_data(a.batch_size, a.num_dim, world.device)
    batch_size = data.size(0)
    num_dim = data.size(1)
    compute = a.compute_ms / 1000
    first, last = rank == 0, rank == world_size - 1

    # Split up layers
    local_num_layers = int_divide(a.num_layers, world_size)

    # Each rank gets a subset of layers
    local_params = [get_init_params(num_dim, num_dim, world.device) for i in range(local_num_layers)]

    # Warm-up, not part of the lecture: the first backward pass in a process loads parts of torch lazily (about
    # a second on a small CPU), which would show in the timeline as a huge stall. Pay it before the schedule.
    warm = torch.zeros(1, num_dim, device=world.device, requires_grad=True)
    F.gelu(warm @ local_params[0]).backward(torch.ones(1, num_dim, device=world.device))
    for param in local_params:
        param.grad = None

    # Forward pass

    # Break up into micro batches to minimize the bubble
    micro_batch_size = int_divide(batch_size, a.num_micro_batches)
    if first:
        # The data
        micro_batches = data.chunk(chunks=a.num_micro_batches, dim=0)
    else:
        # Allocate memory for activations
        micro_batches = [torch.empty(micro_batch_size, num_dim, device=world.device)
                         for _ in range(a.num_micro_batches)]

    saved = []  # per micro-batch: (input, output) of this stage, kept for the backward pass
    for x in micro_batches:
        # Get activations from previous rank
        if rank - 1 >= 0:
            dist.recv(tensor=x, src=rank - 1)
        x_in = x.detach().requires_grad_(not first)
        # Compute layers assigned to this rank
        x = x_in
        for param in local_params:
            x = x @ param
            x = F.gelu(x)
        time.sleep(compute)
        saved.append((x_in, x))

        # Send to the next rank
        if rank + 1 < world_size:
            print(f"[pipeline_parallelism] Rank {rank}: sending {summarize_tensor(x)} to rank {rank + 1}", flush=True)
            dist.send(tensor=x.detach(), dst=rank + 1)

    # Backward pass (the homework): gradients flow from the last stage back to the first, micro-batch by micro-batch.
    loss = torch.zeros((), device=world.device)
    for x_in, out in reversed(saved):
        if last:
            # This micro-batch's share of the whole batch's loss, mean(x^2) over batch_size x num_dim values
            micro_loss = out.square().sum() / (batch_size * num_dim)
            micro_loss.backward()
            loss += micro_loss.detach()
        else:
            grad_out = torch.empty_like(out)
            dist.recv(tensor=grad_out, src=rank + 1)   # d loss / d (this stage's output)
            out.backward(grad_out)
        time.sleep(compute)
        if not first:
            dist.send(tensor=x_in.grad, dst=rank - 1)  # d loss / d (this stage's input) = the previous stage's output

    # The single-process reference: every layer in one process, the whole batch at once.
    ref_params = [get_init_params(num_dim, num_dim, world.device) for i in range(a.num_layers)]
    x = data
    for param in ref_params:
        x = F.gelu(x @ param)
    ref_loss = x.square().mean()
    ref_loss.backward()
    mine = ref_params[rank * local_num_layers:(rank + 1) * local_num_layers]
    worst = max((p.grad - r.grad).abs().max().item() for p, r in zip(local_params, mine))
    if last:
        worst = max(worst, abs(loss.item() - ref_loss.item()))
        print(f"[pipeline_parallelism] Rank {rank}: loss {loss.item():.6f} (reference {ref_loss.item():.6f})",
              flush=True)
    assert worst < 1e-5, f"pipeline parallel differs from the single-process reference by {worst}"
    print(f"[pipeline_parallelism] Rank {rank}: gradients of layers {rank * local_num_layers}.."
          f"{(rank + 1) * local_num_layers - 1} match the single-process reference (max difference {worst:.1e})",
          flush=True)
    world.results = {"max_difference": worst, "micro_batches": a.num_micro_batches, "stages": world_size,
                     "loss": loss.item() if last else None}
    cleanup(world)


if __name__ == "__main__":
    main()
