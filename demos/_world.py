"""The few lines every demo program starts and ends with: join the process group, pick the device.

torchrun starts one process per rank and tells each its RANK, LOCAL_RANK and WORLD_SIZE through the
environment; `init_process_group` reads them. On gloo every rank computes on the CPU; on NCCL rank r uses
GPU `cuda:LOCAL_RANK` (one GPU per process, the usual layout).

Options every demo program accepts: `--backend gloo|nccl`, `--size N` (where a size matters) and
`--results DIR` (where `disttrace demo` collects the numbers a program measured, one JSON file per rank).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

# torch 2.13 renamed reduce_scatter_tensor/all_gather_into_tensor (to *_single); the demos' sources
# (docs/TEACHING.md) use the old names, which still work: keep them, without a warning per call.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")


@dataclass
class World:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    args: argparse.Namespace
    results: dict = field(default_factory=dict)  # what this rank measured, saved by cleanup()


def setup(**options) -> World:
    """Parse the demo's options, join the default process group and return this rank's World.

    `options` are extra command-line options with their defaults, e.g. `setup(size=6)` adds `--size`;
    `timeout_s`, if given, is also the process group's timeout (how long a collective waits for late ranks)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    parser.add_argument("--results", default=None)
    for name, default in options.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=type(default), default=default)
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.backend == "nccl":
        device = torch.device(f"cuda:{local_rank}")
        torch.cuda.set_device(device)  # before init, so NCCL binds this rank to its own GPU
    else:
        device = torch.device("cpu")
    timeout_s = getattr(args, "timeout_s", None)
    kwargs = {"timeout": datetime.timedelta(seconds=timeout_s)} if timeout_s else {}
    if args.backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(backend=args.backend, **kwargs)
    return World(dist.get_rank(), dist.get_world_size(), local_rank, device, args.backend, args)


def cleanup(world: World, destroy: bool = True) -> None:
    """Save what this rank measured (if `disttrace demo` asked for it) and leave the process group."""
    if world.args.results and world.results:
        out = Path(world.args.results)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank{world.rank}.json").write_text(json.dumps(world.results, indent=1))
    if destroy:
        dist.destroy_process_group()


def nbytes(*tensors) -> int:
    """The bytes of the tensors' values, counted on the tensors themselves (the memory demos' own count)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def print_held(rank: int, held: dict[str, int]) -> None:
    """What a memory demo's rank holds, a line per kind."""
    for what, b in held.items():
        print(f"rank {rank}: {what:55s} {b:9,d} bytes", flush=True)


def show(t: torch.Tensor) -> str:
    """A small tensor as a plain list, integers without the trailing '.0': [12, 15, 18]."""
    values = t.detach().cpu().tolist()
    return str(_tidy(values))


def _tidy(v):
    if isinstance(v, list):
        return [_tidy(x) for x in v]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return round(v, 4) if isinstance(v, float) else v
