"""Collectives that torch issues itself: DDP, FSDP2, DTensor tensor parallel, functional collectives and
pipelining, on 2 ranks with gloo and Flight Recorder on. Usage: cov_all.py FR_DUMP_DIR

Each rank dumps Flight Recorder's record (JSON) into FR_DUMP_DIR/fr-RANK.json at the end; the test compares it
with what disttrace recorded."""

import os
import sys

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "20000")

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
mesh = init_device_mesh("cpu", (world,))

# -- DDP: start-up broadcasts and shape check, then one bucketed gradient all-reduce per step
ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
for _ in range(2):
    ddp(torch.randn(4, 8)).sum().backward()

# -- FSDP2: parameter all-gathers in forward/backward, gradient reduce-scatters
from torch.distributed.fsdp import fully_shard

fsdp_model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
for layer in fsdp_model:
    fully_shard(layer, mesh=mesh)
fully_shard(fsdp_model, mesh=mesh)
fsdp_model(torch.randn(2, 8)).sum().backward()

# -- DTensor tensor parallel: Colwise then Rowwise
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

tp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
tp = parallelize_module(tp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
tp(torch.randn(3, 8)).sum().backward()

# -- functional collectives, completed asynchronously (wait_tensor)
x = funcol.all_reduce(torch.ones(4) * rank, "sum", mesh)
y = funcol.all_gather_tensor(torch.ones(2) * rank, 0, mesh)
z = funcol.reduce_scatter_tensor(torch.ones(4), "sum", 0, mesh)
# using the result waits on it (wait_tensor); gloo gives reduce_scatter no completion callback, so that wait is
# where its end is seen
assert x.tolist() == [float(sum(range(world)))] * 4 and y.numel() == 2 * world
assert (z + 0).tolist() == [float(world)] * (4 // world)

# -- pipelining: a 2-stage GPipe schedule with 4 micro-batches
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

stage_mod = nn.Linear(8, 8)
stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"))
sched = ScheduleGPipe(stage, n_microbatches=4, loss_fn=lambda out, tgt: out.sum())
if rank == 0:
    sched.step(torch.randn(8, 8))
else:
    sched.step(target=torch.zeros(8, 8))

dist.barrier()
os.makedirs(sys.argv[1], exist_ok=True)
with open(os.path.join(sys.argv[1], f"fr-{rank}.json"), "wb") as f:
    f.write(torch._C._distributed_c10d._dump_fr_trace_json(True, True))
dist.destroy_process_group()
