"""A small DDP training run; saves rank 0's final weights to the file given as argv[1] (bit-identical check), and
each rank's thread counts around destroy_process_group and whether a let-go tensor was freed to
argv[1].threadsRANK (the job's resources, same check)."""

import gc
import json
import os
import sys
import time
import weakref

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.Adam(ddp.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(rank)
for step in range(5):
    x = torch.randn(8, 16, generator=g)
    opt.zero_grad()
    ddp(x).square().mean().backward()
    opt.step()
    t = torch.tensor([float(step)])
    dist.all_reduce(t)
if rank == 0:
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, sys.argv[1])


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


# A tensor of an async op the job waited on through its future (not Work.wait) and then let go of is freed: a
# tracer that kept the Work kept the tensor
x = torch.ones(1 << 16)
work = dist.all_reduce(x, async_op=True)
work.get_future().wait()
x_ref = weakref.ref(x)
del x, work
# (with summaries on, the tracer reads the output when the op's completion callback runs on gloo's thread, which
# may come a moment after the future's wait() returns here: freed within a second, then)
deadline = time.monotonic() + 1.0
while True:
    gc.collect()
    if x_ref() is None or time.monotonic() > deadline:
        break
    time.sleep(0.01)
tensor_freed = x_ref() is None

# gloo's worker threads end when the job destroys a group: a tracer that kept the group alive kept them too
sub = dist.new_group([0, 1])
dist.all_reduce(torch.ones(2), group=sub)
counts = [threads()]
dist.destroy_process_group(sub)
del sub
gc.collect()
counts.append(threads())
del ddp, opt  # DDP's reducer holds the default group
gc.collect()
dist.destroy_process_group()
gc.collect()
counts.append(threads())
with open(f"{sys.argv[1]}.threads{rank}", "w") as f:
    json.dump({"threads": counts, "tensor_freed": tensor_freed}, f)
