"""Every op family of torch.distributed's Python API once, with known values and sizes (4 ranks, gloo).

The test (tests/record/test_record_ops.py) knows what each rank must record, in this order."""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4
f = torch.float32

t = torch.full((8,), float(rank + 1))                     # 32 bytes
dist.broadcast(t, src=1)                                   # 0: root 1 -> all hold 2.0
dist.reduce(t, dst=2)                                      # 1: root 2 gets 8.0
x = torch.arange(3, dtype=f) + 3 * rank                    # [1,2,3]-style rows: 12 bytes
dist.all_reduce(x)                                         # 2: [18, 22, 26]
gl = [torch.empty(2) for _ in range(world)] if rank == 3 else None
dist.gather(torch.full((2,), float(rank)), gl, dst=3)      # 3
ag = [torch.empty(2) for _ in range(world)]
dist.all_gather(ag, torch.full((2,), float(rank)))         # 4
agt = torch.empty(world * 2)
dist.all_gather_into_tensor(agt, torch.full((2,), float(rank)))  # 5
sc = torch.empty(2)
dist.scatter(sc, [torch.full((2,), float(i)) for i in range(world)] if rank == 0 else None, src=0)  # 6
rs = torch.empty(2)
dist.reduce_scatter_tensor(rs, torch.arange(world * 2, dtype=f))  # 7: 32 bytes in
a2a = torch.empty(world)
dist.all_to_all_single(a2a, torch.full((world,), float(rank)))     # 8
if rank == 3:
    time.sleep(0.3)                                        # the straggler at the barrier
dist.barrier()                                             # 9
dist.monitored_barrier()                                   # 10
# P2P: a ring 0 -> 1 -> 2 -> 3 -> 0 with send/recv, then isend/irecv, then batch_isend_irecv
buf = torch.empty(16)                                      # 64 bytes
nxt, prv = (rank + 1) % world, (rank - 1) % world
if rank % 2 == 0:
    dist.send(torch.full((16,), float(rank)), dst=nxt)     # 11
    dist.recv(buf, src=prv)                                # 12
else:
    dist.recv(buf, src=prv)
    dist.send(torch.full((16,), float(rank)), dst=nxt)
reqs = [dist.isend(torch.ones(4), dst=nxt), dist.irecv(torch.empty(4), src=prv)]   # 13, 14
for r in reqs:
    r.wait()
ops = [dist.P2POp(dist.isend, torch.ones(2), nxt), dist.P2POp(dist.irecv, torch.empty(2), prv)]
for r in dist.batch_isend_irecv(ops):                       # 15, 16
    r.wait()
# async collective with a known delay before wait()
w = dist.all_reduce(torch.ones(4), async_op=True)          # 17
time.sleep(0.1)
w.wait()
# object collectives (each is several ops inside)
objs = [None] * world
dist.all_gather_object(objs, {"rank": rank})               # 18, 19 (sizes, then payload)
# subgroups: new_group of even ranks, and a DeviceMesh
evens = dist.new_group([0, 2])
odds = dist.new_group([1, 3])
mine = evens if rank % 2 == 0 else odds
g = torch.full((5,), float(rank))                          # 20 bytes
dist.all_reduce(g, group=mine)                             # 20: evens 0+2=2, odds 1+3=4
dist.broadcast(g, src=2 if rank % 2 == 0 else 3, group=mine)  # 21
from torch.distributed.device_mesh import init_device_mesh

mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
m = torch.ones(3)
dist.all_reduce(m, group=mesh.get_group("tp"))             # 22: tp groups [0,1] and [2,3]
dist.destroy_process_group()
print(f"rank {rank} ok", flush=True)
