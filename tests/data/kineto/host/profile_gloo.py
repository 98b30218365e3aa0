"""Write the host side of real profiler traces: 2 gloo ranks, torch.profiler (CPU, shapes) around collectives."""
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile


def work(rank, world, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29533"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    peer = 1 - rank
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        x = torch.ones(1024)
        dist.all_reduce(x)
        out_ag = torch.empty(2 * 256, dtype=torch.bfloat16)
        dist.all_gather_into_tensor(out_ag, torch.ones(256, dtype=torch.bfloat16))
        a2a_in, a2a_out = torch.arange(64, dtype=torch.int64), torch.empty(64, dtype=torch.int64)
        dist.all_to_all_single(a2a_out, a2a_in)
        ops = [dist.P2POp(dist.isend, torch.ones(128), peer), dist.P2POp(dist.irecv, torch.empty(128), peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        ts = [torch.ones(100), torch.ones(300)]
        with dist._coalescing_manager(async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t)
        cm.wait()
        dist.barrier()
        dist.broadcast(torch.ones(32), src=0)
    prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    mp.spawn(work, args=(2, out), nprocs=2)
