"""The same Python-API ops twice: first as a user calls them (fastpath.py records them in ProcessGroup's
methods, skipping the dispatcher kernel), then under a pass-through TorchDispatchMode, which sends them the
kernel's way (hooks.py). tests/record/test_record_paths.py checks that both ways record the same fields and that
the values are right either way; then one all_reduce under the profiler, which must see the c10d op as it does
untraced, and one under FakeTensorMode, which must record nothing. 2 ranks, gloo."""

import sys

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from disttrace.tracer.record import capture, fastpath

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 2
other = 1 - rank
# Which way each op came, told by who called Tracer.begin_fields: fastpath.py's wrapper or hooks.py's kernel
# (or by fastpath.py's lean path, which does not call it: counted by its call of callsite.walk).
# begin_fields looks for the call site from its caller's caller outwards, so this wrapper, a frame of a user's
# file, is never taken for the site.
paths = {"kernel": 0, "python": 0}
_begin_fields = capture.Tracer.begin_fields


def counting_begin_fields(self, *args):
    f = sys._getframe(1)
    while f is not None and not f.f_code.co_filename.endswith(("fastpath.py", "hooks.py")):
        f = f.f_back
    paths["python" if f is not None and f.f_code.co_filename.endswith("fastpath.py") else "kernel"] += 1
    return _begin_fields(self, *args)


capture.Tracer.begin_fields = counting_begin_fields
# fastpath.py's lean path (summaries off) writes its begin without begin_fields: counted where it looks for the
# call site (an op it leaves to the general path would be counted twice)
_walk = fastpath.walk


def counting_walk(depth):
    paths["python"] += 1
    return _walk(depth + 1)


fastpath.walk = counting_walk


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def ops():
    got = []
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)                                           # [3, 3, 3, 3]
    got.append(t.tolist())
    b = torch.full((2,), float(rank))
    dist.broadcast(b, src=1)                                     # [1, 1]
    got.append(b.tolist())
    r = torch.full((3,), float(rank + 1))
    dist.reduce(r, dst=0)                                        # rank 0: [3, 3, 3]
    got.append(r.tolist() if rank == 0 else None)
    ag = [torch.empty(2) for _ in range(world)]
    dist.all_gather(ag, torch.full((2,), float(rank)))           # [[0, 0], [1, 1]]
    got.append([x.tolist() for x in ag])
    agt = torch.empty(2 * world)
    dist.all_gather_into_tensor(agt, torch.full((2,), float(rank + 5)))
    got.append(agt.tolist())                                     # [5, 5, 6, 6]
    rs = torch.empty(2)
    dist.reduce_scatter_tensor(rs, torch.arange(4, dtype=torch.float32))
    got.append(rs.tolist())                                      # rank 0: [0, 2]; rank 1: [4, 6]
    a2a = torch.empty(2)
    dist.all_to_all_single(a2a, torch.tensor([10.0 * rank, 10.0 * rank + 1]))
    got.append(a2a.tolist())                                     # rank 0: [0, 10]; rank 1: [1, 11]
    gl = [torch.empty(1) for _ in range(world)] if rank == 0 else None
    dist.gather(torch.tensor([float(rank + 7)]), gl, dst=0)      # rank 0: [[7], [8]]
    got.append([x.tolist() for x in gl] if rank == 0 else None)
    sc = torch.empty(1)
    dist.scatter(sc, [torch.tensor([4.0]), torch.tensor([9.0])] if rank == 1 else None, src=1)
    got.append(sc.tolist())                                      # rank 0: [4]; rank 1: [9]
    p = torch.full((3,), float(rank))
    if rank == 0:
        dist.send(p, dst=1)
        dist.recv(p, src=1)
    else:
        q = torch.empty(3)
        dist.recv(q, src=0)
        dist.send(p, dst=0)
        p = q
    got.append(p.tolist())                                       # rank 0: [1, 1, 1]; rank 1: [0, 0, 0]
    buf = torch.empty(2)
    reqs = [dist.isend(torch.full((2,), float(rank + 20)), other), dist.irecv(buf, other)]
    for req in reqs:
        req.wait()
    got.append(buf.tolist())                                     # the other's rank + 20
    return got


first = ops()
python_only = dict(paths)
with PassThrough():
    second = ops()
assert first == second, (first, second)
expected_a2a = [[0.0, 10.0], [1.0, 11.0]][rank]
assert first[0] == [3.0] * 4 and first[1] == [1.0, 1.0] and first[4] == [5.0, 5.0, 6.0, 6.0], first
assert first[5] == [[0.0, 2.0], [4.0, 6.0]][rank] and first[6] == expected_a2a, first
assert first[-1] == [other + 20.0] * 2, first
print(f"PATHS {rank} first={python_only} second={ {k: paths[k] - python_only[k] for k in paths} }", flush=True)
# Under the profiler the fast path steps aside: the dispatcher records c10d::allreduce_ for the profile, as it does
# in an untraced job
before = dict(paths)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    dist.all_reduce(torch.ones(2))
profiled = "c10d::allreduce_" in {e.name for e in prof.events()}
# one write per line: the two ranks share the job's stdout
sys.stdout.write(f"PROFILED {rank} kernel={paths['kernel'] - before['kernel']} "
                 f"python={paths['python'] - before['python']} c10d_op_in_profile={profiled}\n")
sys.stdout.flush()
# Fake tensors communicate nothing: the kernel sees the op (FakeTensorMode sends it there) and records nothing
with FakeTensorMode():
    dist.all_reduce(torch.ones(2))
sys.stdout.flush()
dist.destroy_process_group()
