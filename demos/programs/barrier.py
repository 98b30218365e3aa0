"""barrier: nobody leaves until everybody has arrived (the notes' "Barrier": docs/TEACHING.md#barrier).

Rank r works for r x 200 ms before it reaches the barrier, so the ranks arrive one after the other; they all
leave together, when the last one arrives. The trace shows each rank's wait: the time it spent in the
barrier waiting for the latest rank.
"""

import time

import torch.distributed as dist

from disttrace.demos._world import cleanup, setup


def main():
    world = setup(delay_ms=200)
    time.sleep(world.rank * world.args.delay_ms / 1000)   # "work" that takes longer on higher ranks
    arrived = time.time()

    dist.barrier()

    print(f"rank {world.rank} waited {1000 * (time.time() - arrived):.0f} ms in the barrier", flush=True)
    cleanup(world)


if __name__ == "__main__":
    main()
