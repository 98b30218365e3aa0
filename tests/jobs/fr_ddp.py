"""A small gloo DDP job that also keeps PyTorch's Flight Recorder, for tests/data/test_flightrec.py.

Usage: fr_ddp.py DUMP_DIR. Each rank writes its Flight Recorder record to DUMP_DIR/json/fr_trace_rank_<rank>.json
(the JSON dump) and DUMP_DIR/pickle/fr_trace_rank_<rank> (the pickle dump, the format of PyTorch's automatic
dumps), so that the test can compare what Flight Recorder saw with what disttrace recorded of the same run."""

import os
import sys
import time

FR_BUFFER = 2000      # Flight Recorder entries kept per rank: more than this job issues
STEPS = 3             # DDP training steps (one bucketed gradient all_reduce each)
PLAIN_ELEMS = 1024    # float32 elements of the plain collectives below


def main() -> None:
    # Read by the C++ Flight Recorder when the process group is created: setting it here, before
    # init_process_group, is enough (checked on torch 2.13).
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", str(FR_BUFFER))
    import torch
    import torch.distributed as dist

    dump_dir = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sub = dist.new_group([0, 1])

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(STEPS):
        opt.zero_grad()
        model(torch.randn(8, 16)).sum().backward()
        opt.step()

    x = torch.ones(PLAIN_ELEMS)
    dist.all_reduce(x)
    dist.broadcast(x, src=0, group=sub)
    out = torch.zeros(PLAIN_ELEMS * world)
    dist.all_gather_into_tensor(out, x)
    dist.reduce_scatter_tensor(torch.zeros(PLAIN_ELEMS), torch.ones(PLAIN_ELEMS * world))
    dist.all_reduce(torch.ones(16, dtype=torch.float64))
    dist.barrier()
    time.sleep(0.2)  # gloo retires an entry on its worker thread just after wait() returns: let the last one land

    c10d = torch._C._distributed_c10d
    for kind, data, name in (("json", c10d._dump_fr_trace_json(True, False), f"fr_trace_rank_{rank}.json"),
                             ("pickle", c10d._dump_fr_trace(True, True, False), f"fr_trace_rank_{rank}")):
        os.makedirs(os.path.join(dump_dir, kind), exist_ok=True)
        with open(os.path.join(dump_dir, kind, name), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
