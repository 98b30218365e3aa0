"""Two nodes of one rank each (tests start one torchrun per node, one of them under faketime): known waits.

Rank 1 sleeps BARRIER_SLEEP before a barrier (rank 0 waits that long); rank 0 sleeps LATE_SENDER_S before sending
SEND_BYTES to rank 1 (rank 1 waits that long in recv); then an all_reduce of the same size."""

import time

import torch
import torch.distributed as dist

BARRIER_SLEEP = 0.25
LATE_SENDER_S = 0.15
SEND_BYTES = 1 << 20


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    if rank == 1:
        time.sleep(BARRIER_SLEEP)
    dist.barrier()
    x = torch.ones(SEND_BYTES // 4)
    if rank == 0:
        time.sleep(LATE_SENDER_S)
        dist.send(x, 1)
    else:
        dist.recv(x, 0)
    dist.all_reduce(x)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
