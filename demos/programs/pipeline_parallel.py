"""Pipeline parallelism: the lecture's program (docs/TEACHING.md#pipeline-parallel), with the backward pass it
leaves as homework, run on the schedules the papers draw: GPipe, 1F1B and interleaved 1F1B, one training iteration
each.

The layers are split into stages, one per rank: rank r holds layers [r*L/N, (r+1)*L/N). The batch is cut
into micro-batches so that the stages can work at the same time on different micro-batches.

  forward   for each micro-batch: receive the activation from rank r-1, run this stage's layers, send the
            result to rank r+1 (rank 0 reads the data; the last rank computes the loss)
  backward  for each micro-batch: the last rank starts from the loss; every other rank receives the gradient of its
            output from rank r+1, runs the backward of its layers, and sends the gradient of its input to rank r-1.
            Each rank's layers accumulate their parameter gradients.

A schedule is the order in which each stage runs its forwards (F) and backwards (B):
  gpipe        all forwards, then all backwards (micro-batch 0 first, as torch.distributed.pipelining runs it):
               the lecture's loops, with blocking send/recv. Every stage keeps all M micro-batches' activations.
  1f1b         stage r runs P-1-r forwards, then one forward and one backward in turn, then the backwards left:
               the same bubble as GPipe, but stage r keeps only P-r micro-batches' activations at once.
  interleaved  each rank holds two chunks of layers (virtual stages r and r+P of 2P, passed around the ring of
               ranks twice): (P-1)/(2M+P-1) of bubble instead of (P-1)/(M+P-1). Needs 3 ranks or more (on 2 the
               activations going back to rank 0 and the gradients would share one link, and the trace could not
               tell them apart), layers that split into 2P chunks, M a multiple of P, and a run of its own
               (--schedules interleaved): its ring's extra link is how the trace shows it is interleaved.
1F1B and interleaved run each stage's list of actions in order: an action receives its input (blocking), computes,
and sends its output without waiting (isend): with blocking sends two neighbours could each wait to send to the
other, the deadlock Megatron avoids with batched send+recv; the sends are waited for at the end of the iteration.

While the pipeline fills and drains, stages sit idle - the bubble, (N-1)/(M+N-1) of the time for N stages and M
micro-batches. More micro-batches, less bubble. At this toy size a layer takes microseconds, so each stage also
sleeps `--compute-ms` per micro-batch and direction to stand for real compute (an interleaved chunk half as long):
that is what makes the schedule and the bubble visible. Each iteration ends with disttrace.tracer.mark_step() (a
training step, as a profiler's step(): nothing without tracing), so that the trace's steps are the schedules.

The check: one process running all the layers on the whole batch must get the same loss and gradients, in every
schedule.
"""

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from lecture import generate_sample_data, get_init_params, int_divide, summarize_tensor

from disttrace.demos._world import cleanup, setup
from disttrace.tracer import mark_step

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def main():
    world = setup(batch_size=8, num_dim=4, num_layers=4, num_micro_batches=4, compute_ms=20, schedules="gpipe,1f1b")
    rank, world_size, a = world.rank, world.world_size, world.args
    schedules = [s.strip() for s in a.schedules.split(",") if s.strip()]
    for s in schedules:
        if s not in SCHEDULES:
            raise SystemExit(f"--schedules: {s!r} is not one of {', '.join(SCHEDULES)}")
    if "interleaved" in schedules and (len(schedules) > 1 or world_size < 3 or a.num_layers % (2 * world_size)
                                       or a.num_micro_batches % world_size):
        raise SystemExit("interleaved 1F1B runs alone (--schedules interleaved), on 3 ranks or more, with layers that "
                         f"split into 2 x {world_size} chunks and micro-batches a multiple of {world_size}: e.g. "
                         "--nproc 4 --program-args='--schedules interleaved --num-layers 8'")
    if a.num_micro_batches < 1 or a.batch_size % a.num_micro_batches:
        raise SystemExit(f"--num-micro-batches {a.num_micro_batches} does not split --batch-size {a.batch_size} into "
                         "equal micro-batches: give a divisor of it, or a batch to match, e.g. "
                         "--program-args='--num-micro-batches 8 --batch-size 16'")
    if a.num_layers % world_size:
        raise SystemExit(f"{a.num_layers} layers do not split evenly into {world_size} stages: give --num-layers a "
                         f"multiple of {world_size}, e.g. --program-args='--num-layers {2 * world_size}'")
    data = generate_sample_data(a.batch_size, a.num_dim, world.device)
    batch_size = data.size(0)
    num_dim = data.size(1)
    compute = a.compute_ms / 1000

    # The single-process reference: every layer in one process, the whole batch at once.
    ref_params = [get_init_params(num_dim, num_dim, world.device) for i in range(a.num_layers)]
    x = data
    for param in ref_params:
        x = F.gelu(x @ param)
    ref_loss = x.square().mean()
    ref_loss.backward()

    # Warm-up, not part of the lecture: the first backward pass in a process loads parts of torch lazily (about
    # a second on a small CPU), which would show in the timeline as a huge stall. Pay it before the schedules.
    warm = torch.zeros(1, num_dim, device=world.device, requires_grad=True)
    F.gelu(warm @ get_init_params(num_dim, num_dim, world.device)).backward(torch.ones(1, num_dim, device=world.device))

    results = {"micro_batches": a.num_micro_batches, "stages": world_size, "schedules": {}}
    for schedule in schedules:
        v = 2 if schedule == "interleaved" else 1
        # rank r holds virtual stages r, r + P, ...: layers [j*L/(vP), (j+1)*L/(vP)) of stage j
        per_stage = int_divide(a.num_layers, world_size * v)
        stages = {j: [get_init_params(num_dim, num_dim, world.device) for _ in range(per_stage)]
                  for j in range(rank, world_size * v, world_size)}
        step = Step(world, stages, data, v, compute / v)
        if schedule == "gpipe":
            step.gpipe()
        else:
            step.run(one_f_one_b(world_size, a.num_micro_batches, rank, v))
        mark_step()  # the end of this iteration (a training step)
        worst = 0.0
        for j, params in stages.items():
            mine = ref_params[j * per_stage:(j + 1) * per_stage]
            worst = max([worst] + [(p.grad - r.grad).abs().max().item() for p, r in zip(params, mine)])
        last = world_size * v - 1 in stages
        if last:
            worst = max(worst, abs(step.loss.item() - ref_loss.item()))
            print(f"[pipeline_parallelism] {schedule}, rank {rank}: loss {step.loss.item():.6f} (reference "
                  f"{ref_loss.item():.6f})", flush=True)
        assert worst < 1e-5, f"pipeline parallel ({schedule}) differs from the single-process reference by {worst}"
        layers = ", ".join(f"{j * per_stage}..{(j + 1) * per_stage - 1}" for j in stages)
        held = f"{step.peak} micro-batch's" if step.peak == 1 else f"{step.peak} micro-batches'"
        print(f"[pipeline_parallelism] {schedule}, rank {rank}: gradients of layers {layers} match the single-process "
              f"reference (max difference {worst:.1e}); at most {held} activations held at once", flush=True)
        results["schedules"][schedule] = {"max_difference": worst, "in_flight": step.peak,
                                          "loss": step.loss.item() if last else None}
    world.results = {**results, "max_difference": max(r["max_difference"] for r in results["schedules"].values())}
    cleanup(world)


def one_f_one_b(p: int, m: int, rank: int, v: int) -> list:
    """Rank `rank`'s actions in order, ("F" or "B", virtual stage, micro-batch), as Megatron runs 1F1B (v = 1) and
    interleaved 1F1B (v chunks): its k-th forward is chunk (k // p) % v of micro-batch (k // (p v)) p + k % p, its
    k-th backward chunk v-1 - (k // p) % v of the same; first the warm-up forwards, then one forward and one
    backward in turn, then the backwards left."""
    total = m * v

    def f(k):
        return "F", rank + p * ((k // p) % v), (k // (p * v)) * p + k % p

    def b(k):
        return "B", rank + p * (v - 1 - (k // p) % v), (k // (p * v)) * p + k % p

    warmup = min(total, p - rank - 1 if v == 1 else (p - rank - 1) * 2 + (v - 1) * p)
    order = [f(k) for k in range(warmup)]
    for k in range(total - warmup):
        order += [f(warmup + k), b(k)]
    order += [b(k) for k in range(total - warmup, total)]
    return order


class Step:
    """One training iteration of this rank's stages: their forwards and backwards, the messages between them."""

    def __init__(self, world, stages: dict, data, v: int, compute: float):
        self.world, self.stages, self.v, self.compute = world, stages, v, compute
        self.rank, self.p = world.rank, world.world_size
        self.last_stage = self.p * v - 1
        a = world.args
        self.micro_batches = data.chunk(chunks=a.num_micro_batches, dim=0)
        self.micro_batch_size = int_divide(data.size(0), a.num_micro_batches)
        self.batch_size, self.num_dim = data.size(0), data.size(1)
        self.saved = {}  # (stage, micro-batch) -> (input, output) of this stage, kept for the backward pass
        self.peak = 0    # the most micro-batches' activations held at once
        self.loss = torch.zeros((), device=world.device)
        self.sends = []  # isend works, waited for at the end

    def owner(self, stage: int) -> int:
        return stage % self.p

    def forward(self, stage: int, mb: int, x=None) -> torch.Tensor:
        if stage == 0:
            x = self.micro_batches[mb]
        elif x is None:
            # Get activations from previous rank
            x = torch.empty(self.micro_batch_size, self.num_dim, device=self.world.device)
            dist.recv(tensor=x, src=self.owner(stage - 1))
        x_in = x.detach().requires_grad_(stage > 0)
        # Compute layers assigned to this stage
        x = x_in
        for param in self.stages[stage]:
            x = x @ param
            x = F.gelu(x)
        time.sleep(self.compute)
        self.saved[(stage, mb)] = (x_in, x)
        self.peak = max(self.peak, len(self.saved))
        return x

    def backward(self, stage: int, mb: int, grad_out=None) -> torch.Tensor | None:
        x_in, out = self.saved.pop((stage, mb))
        if stage == self.last_stage:
            # This micro-batch's share of the whole batch's loss, mean(x^2) over batch_size x num_dim values
            micro_loss = out.square().sum() / (self.batch_size * self.num_dim)
            micro_loss.backward()
            self.loss += micro_loss.detach()
        else:
            if grad_out is None:
                grad_out = torch.empty_like(out)
                dist.recv(tensor=grad_out, src=self.owner(stage + 1))   # d loss / d (this stage's output)
            out.backward(grad_out)
        time.sleep(self.compute)
        return x_in.grad if stage > 0 else None  # d loss / d (this stage's input) = the previous stage's output

    def gpipe(self) -> None:
        """The lecture's loops: every forward, then every backward, with blocking send/recv."""
        (stage,) = self.stages
        n = len(self.micro_batches)
        for mb in range(n):
            x = self.forward(stage, mb)
            # Send to the next rank
            if stage < self.last_stage:
                print(f"[pipeline_parallelism] Rank {self.rank}: sending {summarize_tensor(x)} to rank "
                      f"{self.rank + 1}", flush=True)
                dist.send(tensor=x.detach(), dst=self.rank + 1)
        # Backward pass (the homework): gradients flow from the last stage back to the first, micro-batch by
        # micro-batch
        for mb in range(n):
            grad_in = self.backward(stage, mb)
            if grad_in is not None:
                dist.send(tensor=grad_in, dst=self.rank - 1)

    def run(self, order: list) -> None:
        """This rank's actions in order: each receives its input, computes, and sends its output without waiting."""
        for kind, stage, mb in order:
            if kind == "F":
                out = self.forward(stage, mb)
                if stage < self.last_stage:
                    self.sends.append(dist.isend(out.detach(), self.owner(stage + 1)))
            else:
                grad_in = self.backward(stage, mb)
                if grad_in is not None:
                    self.sends.append(dist.isend(grad_in, self.owner(stage - 1)))
        for work in self.sends:
            work.wait()


if __name__ == "__main__":
    main()
