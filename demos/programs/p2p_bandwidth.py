"""Puzzler 1 of the puzzlers (docs/TEACHING.md#p2p-bandwidth), on whatever links this machine has: copy the same
data from rank 0 to each other rank.

The post copies 10 tensors of 10**7 fp32 values (400 MB) from GPU 0 to GPUs 1, 2 and 4 and sees 4.5 ms,
53.2 ms and 8.8 ms: the same bytes, very different times, because each pair of GPUs is joined by a
different link (NVLink, PCIe through the CPU, ...). Bandwidth is a property of the path, not of the GPU.

Here rank 0 sends `--count` tensors of `--size` fp32 values to each other rank in turn (one link at a time,
so that each measurement is alone on the wire), and `disttrace` computes the GB/s of each link from the
recorded sends and receives. Scale: on gloo/CPU the default is 10**6 values per tensor (4 MB, 40 MB per
link), a tenth of the post's, so that the demo runs in seconds; on NCCL the default is the post's 10**7.
On one machine with gloo every "link" is the loopback interface, so expect similar numbers on every link:
differences come from the hardware paths, which is the puzzler's point.
"""

import time

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup


def main():
    world = setup(size=0, count=10)
    rank, n = world.rank, world.world_size
    size = world.args.size or (10**7 if world.backend == "nccl" else 10**6)
    count = world.args.count
    seconds = {}
    if rank == 0:
        data = [torch.rand(size, device=world.device) for _ in range(count)]
        for dst in range(1, n):
            start = time.perf_counter()
            for tensor in data:
                dist.send(tensor, dst=dst)
            dist.recv(torch.zeros(1, device=world.device), src=dst)  # the receiver's "got everything"
            seconds[dst] = time.perf_counter() - start
            gb = count * size * 4 / 1e9
            print(f"rank 0 -> rank {dst}: {gb * 1e3:.0f} MB in {seconds[dst] * 1e3:.1f} ms = "
                  f"{gb / seconds[dst]:.2f} GB/s", flush=True)
    else:
        buffer = torch.empty(size, device=world.device)
        for _ in range(count):
            dist.recv(buffer, src=0)
        dist.send(torch.ones(1, device=world.device), dst=0)
    world.results = {"size": size, "count": count, "seconds": seconds}
    cleanup(world)


if __name__ == "__main__":
    main()
