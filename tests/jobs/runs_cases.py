"""Jobs that leave several runs (process-group worlds) in one trace dir (tests/data/test_runs.py).

argv[1] is the case:
- restart: under torchrun --max-restarts=1, rank 1 dies (os._exit) after 3 all_reduces in the first attempt
  only, and rank 0's fourth fails; the second attempt does 5 and ends cleanly;
- cycles: one process per rank calls init_process_group / destroy_process_group twice: 2 all_reduces in the first
  world, 4 in the second;
- spawnloop: `python runs_cases.py spawnloop` starts three 2-rank jobs one after another (torch.multiprocessing
  spawn, the same port each time), doing 1, 2 and 3 all_reduces.
"""

import os
import sys

OPS = {"restart": [3, 5], "cycles": [2, 4], "spawnloop": [1, 2, 3]}  # all_reduces per rank, per run


def all_reduces(n: int) -> None:
    import torch
    import torch.distributed as dist

    for _ in range(n):
        dist.all_reduce(torch.ones(4))


def restart() -> None:
    import torch.distributed as dist

    # torch 2.13's restarted ranks reuse the first attempt's store keys: gloo then connects to the dead ranks'
    # addresses and hangs or fails in init about one time in three (untraced too). A prefix of the attempt's own
    # keeps the attempts apart, as torchrun means to
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store, rank, world_size = next(dist.rendezvous("env://"))
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt-{attempt}", store), rank=rank,
                            world_size=world_size)
    first = attempt == "0"
    all_reduces(OPS["restart"][0] if first else OPS["restart"][1])
    if first and dist.get_rank() == 1:
        os._exit(3)  # the failed attempt: rank 1 dies without a word
    if first:
        all_reduces(1)  # rank 0's next op fails: its peer is gone (gloo: connection closed)
    dist.destroy_process_group()


def cycles() -> None:
    import torch.distributed as dist

    # a plain second init_process_group("gloo") reuses the first world's store keys and fails or hangs in gloo's
    # connect about one time in four with torch 2.13 (untraced too): each world gets keys of its own
    store, rank, world_size = next(dist.rendezvous("env://"))
    for k, n in enumerate(OPS["cycles"]):
        dist.init_process_group("gloo", store=dist.PrefixStore(f"cycle-{k}", store), rank=rank,
                                world_size=world_size)
        all_reduces(n)
        dist.destroy_process_group()


def _spawned(rank: int, n: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=2)
    all_reduces(n)
    dist.destroy_process_group()


def spawnloop() -> None:
    import torch.multiprocessing as mp

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("RUNS_PORT", "29533"))
    for n in OPS["spawnloop"]:
        mp.spawn(_spawned, args=(n,), nprocs=2)


if __name__ == "__main__":
    {"restart": restart, "cycles": cycles, "spawnloop": spawnloop}[sys.argv[1]]()
