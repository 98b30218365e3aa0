"""torch.distributed.pipelining's schedules as its tutorial runs them, one stage (or, interleaved, two) a rank: 4
iterations of 4 micro-batches, `--schedule=gpipe|1f1b|interleaved` (ScheduleGPipe, Schedule1F1B,
ScheduleInterleaved1F1B). Sleeps in each layer's forward and backward stand for its compute. The analysis must read
each as P stages, 4 iterations of 4 micro-batches (interleaved: 2 virtual stages a rank), a step per iteration."""

import sys
import time

ITERATIONS, MICRO_BATCHES, VIRTUAL = 4, 4, 2
SCHEDULE = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--schedule=")), "1f1b")


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    class Busy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            time.sleep(0.004)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            time.sleep(0.008)
            return g

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(64, 64)

        def forward(self, x):
            return torch.relu(Busy.apply(self.lin(x)))

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    loss = lambda out, y: ((out - y) ** 2).mean()  # noqa: E731
    if SCHEDULE == "interleaved":
        stages = [PipelineStage(Layer(), rank + world * v, world * VIRTUAL, torch.device("cpu"))
                  for v in range(VIRTUAL)]
        schedule = ScheduleInterleaved1F1B(stages, n_microbatches=MICRO_BATCHES, loss_fn=loss)
    else:
        stage = PipelineStage(Layer(), rank, world, torch.device("cpu"))
        schedule = (ScheduleGPipe if SCHEDULE == "gpipe" else Schedule1F1B)(stage, n_microbatches=MICRO_BATCHES,
                                                                             loss_fn=loss)
    g = torch.Generator().manual_seed(0)
    for _ in range(ITERATIONS):
        x, y = torch.randn(16, 64, generator=g), torch.randn(16, 64, generator=g)
        if rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            schedule.step(target=y)
        else:
            schedule.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
