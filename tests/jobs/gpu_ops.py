"""GPU jobs for tests/record/test_gpu.py (a world of one on one GPU): python gpu_ops.py MODE SIDE_FILE.

ops:  every collective kind on NCCL (4 MiB), each timed by the job's own CUDA events around it and by the host's
      clock (written to SIDE_FILE: one JSON list of [op, ms, t0, t1] in issue order, see timed()).
timing: the same on 256 MiB, long enough on the device for its events to time the op's kernel.
gloo: the ops of `ops` on gloo with CUDA tensors.
ddp:  a few DDP steps on NCCL.
busy: all_reduces queued behind a spinning kernel, with summaries on: the call must return before the device ran it.
hang: an all_reduce stuck behind a kernel that spins for a minute (the watchdog must diagnose it).
"""

import json
import sys
import time

import torch
import torch.distributed as dist

mode, side = sys.argv[1], sys.argv[2]
torch.cuda.set_device(0)
if mode == "busy":
    torch.ones(1, device="cuda")  # the job's model is on the device before init_process_group, as usual
    # (device_id: NCCL's communicator made now, not at the first op, which then waits for the device untraced too)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
else:
    dist.init_process_group("gloo" if mode == "gloo" else "nccl")
dev = torch.device("cuda", 0)
timings = []


def timed(name, fn):
    """fn's op timed by the device (ms, CUDA events) and by the host: [name, ms, t0, t1], the op issued after t0
    and done on the device before t1 (time.monotonic_ns, the recorder's clock). A spinning kernel queued first
    keeps the device busy while the host issues the op, so that the events time what the device ran between them
    (the op's kernel, and the summaries' if on), not the host's time to launch it."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.monotonic_ns()
    torch.cuda._sleep(int(3e6))  # ~2 ms at 1.5-2 GHz
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    t1 = time.monotonic_ns()
    timings.append([name, start.elapsed_time(end), t0, t1])


if mode in ("ops", "gloo", "timing"):
    x = torch.arange(1 << (26 if mode == "timing" else 20), dtype=torch.float32, device=dev)
    out = torch.empty_like(x)
    for _ in range(3):
        timed("all_reduce", lambda: dist.all_reduce(x))
        timed("all_gather", lambda: dist.all_gather_into_tensor(out, x))
        timed("reduce_scatter", lambda: dist.reduce_scatter_tensor(out, x))
        timed("broadcast", lambda: dist.broadcast(x, 0))
        timed("all_to_all", lambda: dist.all_to_all_single(out, x))
        timed("barrier", lambda: dist.barrier())
elif mode == "ddp":
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(512, 512).to(dev), device_ids=[0])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(5):
        opt.zero_grad()
        model(torch.randn(64, 512, device=dev)).square().mean().backward()
        opt.step()
elif mode == "busy":
    x = torch.ones(1024, device=dev)
    for _ in range(3):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(0.3 * 1.5e9))  # ~0.2-0.3 s of a spinning kernel queued before the op
        t0 = time.monotonic_ns()
        dist.all_reduce(x)
        t1 = time.monotonic_ns()
        torch.cuda.synchronize()
        timings.append(["all_reduce", t1 - t0, time.monotonic_ns() - t0])  # [op, call returned, device done] ns
elif mode == "hang":
    x = torch.ones(1024, device=dev)
    torch.cuda._sleep(int(60 * 1.5e9))  # about a minute of a spinning kernel on the current stream
    dist.all_reduce(x)
    x.cpu()
torch.cuda.synchronize()
with open(side, "w") as f:
    json.dump(timings, f)
dist.destroy_process_group()
