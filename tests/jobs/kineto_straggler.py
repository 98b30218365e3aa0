"""A gloo job under torch.profiler with a periodic straggler, for tests/data/test_kineto.py.

Usage: kineto_straggler.py PROFILE_DIR. Each rank profiles its whole loop (CPU activities, shapes and Python
stacks) and writes one Chrome trace into PROFILE_DIR: rank 0 gzipped, the others plain JSON, under names that do
not say the rank (the importer reads it from distributedInfo). Run under `disttrace run`, the same job is also
recorded by disttrace, so both views of it can be compared.

Per step: a little compute, rank 1 sleeping LATE_S before the all_reduce at LATE_STEPS, an all_reduce, an
all_gather_into_tensor and a ring of isend/irecv."""

import os
import sys
import time

from tagged import line

STEPS = 12
LATE_RANK, LATE_STEPS, LATE_S = 1, (3, 7, 11), 0.050
ELEMS = 1 << 14          # float32 elements of the all_reduce
GATHER_ELEMS = 1 << 10   # of each rank's all_gather input
ALL_REDUCE_LINE = line(__file__, "all_reduce")


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.ones(ELEMS)
    w = torch.randn(128, 128)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        for step in range(STEPS):
            for _ in range(4):
                w = torch.tanh(w @ w)
            if rank == LATE_RANK and step in LATE_STEPS:
                time.sleep(LATE_S)
            dist.all_reduce(x)  # <all_reduce>
            gathered = torch.empty(GATHER_ELEMS * world)
            dist.all_gather_into_tensor(gathered, torch.full((GATHER_ELEMS,), float(rank)))
            send = dist.isend(torch.full((256,), float(rank)), (rank + 1) % world)
            buf = torch.empty(256)
            recv = dist.irecv(buf, (rank - 1) % world)
            send.wait()
            recv.wait()
            prof.step()
    os.makedirs(out, exist_ok=True)
    suffix = ".pt.trace.json.gz" if rank == 0 else ".pt.trace.json"
    prof.export_chrome_trace(os.path.join(out, f"node-{os.getpid()}{suffix}"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
