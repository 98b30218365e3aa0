"""Ground truth for tests/commands/test_export.py (2 ranks, gloo): known blocking point-to-point messages (the first one sent
late), isend/irecv pairs in flight together while an async all_reduce runs (overlapping ops: a second p2p track),
then a broadcast, an all_gather and a barrier."""

import time

import torch
import torch.distributed as dist

MESSAGES = [(0, 1, 4096), (0, 1, 256), (1, 0, 1 << 16), (0, 1, 32)]  # (src, dst, bytes) of blocking send/recv
ASYNC_MESSAGES = 2                                                    # isend/irecv pairs 1 -> 0 of 1 KiB
# rank 0 sends its first message late; long beside a 2-core machine's scheduling noise, which moves rank 1's
# arrival at its recv (CI: a 50 ms lateness measured as 27 ms with the other worker's jobs running)
LATE_SEND_S = 0.3


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    for k, (src, dst, nbytes) in enumerate(MESSAGES):
        buf = torch.full((nbytes // 4,), float(k))
        if rank == src:
            if k == 0:
                time.sleep(LATE_SEND_S)
            dist.send(buf, dst)
        elif rank == dst:
            dist.recv(buf, src)
            assert buf[0].item() == k
    work = dist.all_reduce(torch.ones(1 << 14), async_op=True)
    reqs = []
    for _ in range(ASYNC_MESSAGES):
        t = torch.ones(256)
        reqs.append(dist.isend(t, 0) if rank == 1 else dist.irecv(t, 1))
    for r in reqs:
        r.wait()
    work.wait()
    dist.broadcast(torch.arange(100.0), src=1)
    dist.all_gather_into_tensor(torch.zeros(8), torch.ones(4))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
