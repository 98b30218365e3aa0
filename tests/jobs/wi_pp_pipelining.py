"""Data x pipeline parallel with torch.distributed.pipelining, as its tutorial writes it: a 2 x 2 DeviceMesh ("dp",
"pp"), each replica's two stages run Schedule1F1B over 4 micro-batches an iteration (`--schedule=gpipe`:
ScheduleGPipe), then each stage's gradients are all-reduced over its data-parallel group and the optimizer steps.
20 iterations; the faults are wi_pp_common.py's."""

import sys

from wi_pp_common import BATCH, DIM, ITERATIONS, MICRO_BATCHES, STAGES, before_step, layers

SCHEDULE = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--schedule=")), "1f1b")


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2, STAGES), mesh_dim_names=("dp", "pp"))
    stage_index = mesh["pp"].get_local_rank()
    model = layers(stage_index, rank)
    stage = PipelineStage(model, stage_index, STAGES, torch.device("cpu"), group=mesh["pp"].get_group())
    schedule = (Schedule1F1B if SCHEDULE == "1f1b" else ScheduleGPipe)(
        stage, n_microbatches=MICRO_BATCHES, loss_fn=lambda out, y: ((out - y) ** 2).mean())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    dp = mesh["dp"].get_group()
    g = torch.Generator().manual_seed(mesh["dp"].get_local_rank())
    for step in range(ITERATIONS):
        before_step(step, rank)
        x, y = torch.randn(BATCH, DIM, generator=g), torch.randn(BATCH, DIM, generator=g)
        opt.zero_grad()
        if stage_index == 0:
            schedule.step(x)
        else:
            schedule.step(target=y)
        for p in model.parameters():
            dist.all_reduce(p.grad, group=dp)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
