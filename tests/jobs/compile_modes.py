"""Compiled code, traced and untraced: what the compiler did must be the same (tests/record/test_compile.py).

Runs, on 2 ranks of gloo with torch.compile's aot_eager backend (AOT autograd: a compiled backward, without the
cost of generating kernels), or with COMPILE_DEVICE=cuda on NCCL, a GPU per rank, with inductor (the kernels it
generates call the collectives; tests/record/test_gpu.py), each of:
- ddp: torch.compile around DDP of an MLP, 4 steps, with a compiled optimizer step;
- fsdp: FSDP2 (fully_shard) of an MLP under torch.compile, 3 steps;
- fullgraph: a fullgraph=True step that calls dist.all_reduce (Dynamo turns it into a functional collective);
- funcol: a compiled functional collective (funcol.all_reduce) and its wait.
and writes what Dynamo counted (graph breaks with their reasons, frames, graphs, recompiles, AOT compilations) to
argv[1].RANK as JSON, with the results' checksums (a traced job computes the same numbers).
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._dynamo.utils import counters
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

DEVICE = os.environ.get("COMPILE_DEVICE", "cpu")
BACKEND = "inductor" if DEVICE == "cuda" else "aot_eager"


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(DEVICE)


def train(model, steps: int, rank: int) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = torch.compile(opt.step, backend=BACKEND)
    g = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(8, 16, generator=g).to(DEVICE)).square().mean().backward()
        step()
    return float(sum(p.detach().float().sum() for p in model.parameters()))


def main() -> None:
    if DEVICE == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo")
    rank = dist.get_rank()
    results = {}
    results["ddp"] = train(torch.compile(torch.nn.parallel.DistributedDataParallel(mlp()), backend=BACKEND), 4, rank)
    mesh = init_device_mesh(DEVICE, (dist.get_world_size(),))
    model = mlp()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    results["fsdp"] = train(torch.compile(model, backend=BACKEND), 3, rank)

    @torch.compile(fullgraph=True, backend=BACKEND)
    def fullgraph_step(t):
        t = t * 2
        dist.all_reduce(t)
        return t + 1

    @torch.compile(backend=BACKEND)
    def funcol_step(t):
        return funcol.all_reduce(t * 3, "sum", dist.group.WORLD) + 1

    inputs = [torch.full((4,), float(rank + k), device=DEVICE) for k in range(3)]
    results["fullgraph"] = sum(float(fullgraph_step(t.clone()).sum()) for t in inputs)
    results["funcol"] = sum(float(funcol_step(t.clone()).sum()) for t in inputs)
    seen = {k: dict(v) for k, v in counters.items()}
    out = {
        "graph_breaks": sorted(seen.get("graph_break", {}).items()),
        "frames": seen.get("frames", {}),
        "stats": seen.get("stats", {}),
        "recompiles": sum(seen.get("recompiles", {}).values()),
        "aot_autograd": seen.get("aot_autograd", {}),
        "results": results,
    }
    with open(f"{sys.argv[1]}.{rank}", "w") as f:
        json.dump(out, f, sort_keys=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
