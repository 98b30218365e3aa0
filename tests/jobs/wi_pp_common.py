"""What the two data x pipeline jobs (wi_pp_pipelining.py, wi_pp_manual.py) share: the model's layers (sleeps stand
for a device's compute: forward and backward), the mesh (4 ranks: 2 replicas x 2 stages; ranks 0, 1 are replica
0's stages 0, 1 and ranks 2, 3 replica 1's), and the faults, chosen by `--fault=KIND`:
- `worker`: rank 3 (stage 1 of replica 1) computes each forward 20 ms longer: one slow worker;
- `stage`: stage 1 (ranks 1 and 3) computes each forward 16 ms longer on both replicas: the layer partition;
- `spread`: a rank here and there is 120 ms late before its step (a seeded pattern: different ranks in different
  steps, as sequence lengths make data-dependent imbalance): no culprit.
Without `--fault` the job runs with none: every prediction's ground truth."""

import sys
import time

ITERATIONS, MICRO_BATCHES, STAGES, REPLICAS = 20, 4, 2, 2
LAYERS, DIM, BATCH = 2, 128, 16
FORWARD_S, BACKWARD_S = 0.008, 0.016  # per layer, per micro-batch (long beside the stages' few ms of host work,
#                                       which differs between them, and which a busy machine stretches)
SLOW_WORKER, WORKER_S = 3, 0.020      # per micro-batch forward
SLOW_STAGE, STAGE_S = 1, 0.016
SPREAD_S = 0.120
FAULT = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--fault=")), "none")


def spread_late(step: int, rank: int) -> bool:
    """Whether rank is late before step under `--fault=spread`: about a quarter of (step, rank), none twice as
    often as another rank."""
    return (step * 7 + rank * 3) % 4 == 0 and step > 0


def extra_forward_s(rank: int, stage: int) -> float:
    if FAULT == "worker" and rank == SLOW_WORKER:
        return WORKER_S
    if FAULT == "stage" and stage == SLOW_STAGE:
        return STAGE_S
    return 0.0


def layers(stage: int, rank: int):
    """The stage's layers: each a Linear whose forward and backward also sleep (the device's time)."""
    import torch
    from torch import nn

    extra = extra_forward_s(rank, stage) / LAYERS

    class Busy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            time.sleep(FORWARD_S + extra)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            time.sleep(BACKWARD_S)
            return g

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(DIM, DIM)

        def forward(self, x):
            return torch.relu(Busy.apply(self.lin(x)))  # (after the Linear: its backward runs on every stage, the
            #                                            first's too, whose input needs no gradient)

    torch.manual_seed(stage)
    return nn.Sequential(*[Layer() for _ in range(LAYERS)])


def before_step(step: int, rank: int) -> None:
    if FAULT == "spread" and spread_late(step, rank):
        time.sleep(SPREAD_S)  # a long sample
