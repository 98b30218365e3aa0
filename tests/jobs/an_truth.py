"""Ground truth for the analysis tests (4 ranks, gloo): known sleeps before collectives and known P2P bytes.

Each phase starts right after a barrier, so a rank that sleeps S seconds arrives S late. The numbers below are
imported by tests/analysis/test_analysis_real.py, which asserts the measured waits and bytes against them."""

import time

import torch
import torch.distributed as dist

BARRIER_SLEEP = [0.0, 0.30, 0.10, 0.20]   # before barrier: rank r waits max - BARRIER_SLEEP[r] (Wait at Barrier)
ALLREDUCE_SLEEP = [0.25, 0.0, 0.05, 0.0]  # before a 1 MiB all_reduce (Wait at N×N)
ALLREDUCE_BYTES = 1 << 20
SUB_GROUP, SUB_SLEEP = [1, 2], 0.10       # all_reduce on a sub-group: rank 2 late, rank 1 waits
BCAST_ROOT, BCAST_SLEEP = 1, 0.20         # the root of a broadcast is late: the others wait (Late Broadcast)
REDUCE_ROOT, REDUCE_LATE, REDUCE_SLEEP = 0, 3, 0.15  # a sender of a reduce is late: the root waits (Early Reduce)
ASYNC_LATE, ASYNC_SLEEP = 0, 0.20         # async all_reduce: rank 0 issues it late...
ASYNC_WORK = {1: 0.10}                    # ...rank 1 computes 0.1 s before wait(): its op waited 0.2 s all the same
LINKS = [(0, 1, 3, 1 << 20), (1, 2, 2, 256 << 10), (2, 3, 1, 4 << 20), (3, 0, 5, 64 << 10),
         (0, 3, 1, 64 << 10)]             # src, dst, messages, bytes each; one after the other
LATE_SENDER_S = 0.12                      # rank 0 sleeps before its first send to rank 1: rank 1 waits in recv
LATE_RECEIVER_S = 0.10                    # rank 3 sleeps before receiving from rank 0: gloo's send blocks until
                                          # the recv is posted, so rank 0 waits in send


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    sub = dist.new_group(SUB_GROUP)

    dist.barrier()
    time.sleep(BARRIER_SLEEP[rank])
    dist.barrier()

    time.sleep(ALLREDUCE_SLEEP[rank])
    x = torch.ones(ALLREDUCE_BYTES // 4)
    dist.all_reduce(x)
    assert x[0].item() == dist.get_world_size()

    dist.barrier()
    if rank in SUB_GROUP:
        if rank == SUB_GROUP[-1]:
            time.sleep(SUB_SLEEP)
        dist.all_reduce(torch.ones(1024), group=sub)

    dist.barrier()
    if rank == BCAST_ROOT:
        time.sleep(BCAST_SLEEP)
    dist.broadcast(torch.full((4096,), float(rank)), src=BCAST_ROOT)

    dist.barrier()
    if rank == REDUCE_LATE:
        time.sleep(REDUCE_SLEEP)
    dist.reduce(torch.ones(4096), dst=REDUCE_ROOT)

    dist.barrier()
    if rank == ASYNC_LATE:
        time.sleep(ASYNC_SLEEP)
    work = dist.all_reduce(torch.ones(4096), async_op=True)
    time.sleep(ASYNC_WORK.get(rank, 0.0))
    work.wait()

    dist.barrier()
    for k, (src, dst, n, nbytes) in enumerate(LINKS):
        for m in range(n):
            if rank == src:
                if k == 0 and m == 0:
                    time.sleep(LATE_SENDER_S)
                dist.send(torch.full((nbytes // 4,), float(m)), dst)
            elif rank == dst:
                if k == len(LINKS) - 1 and m == 0:
                    time.sleep(LATE_RECEIVER_S)
                buf = torch.empty(nbytes // 4)
                dist.recv(buf, src)
                assert buf[0].item() == m
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
