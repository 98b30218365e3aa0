"""Two bugs that break a job (2 ranks): rank 0 isends a message that rank 1 never receives (unmatched; gloo's send
would block until a recv is posted, so it is an isend never waited on), then rank 1 all_reduces a tensor twice as
large as rank 0's (gloo aborts the processes: the trace must still show it). A timeout ends it otherwise."""

from datetime import timedelta

import torch
import torch.distributed as dist

NUMEL = 1024
UNMATCHED_BYTES = 1024
UNMATCHED_TAG = 7


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    if rank == 0:
        pending = dist.isend(torch.ones(UNMATCHED_BYTES // 4), 1, tag=UNMATCHED_TAG)  # noqa: F841 - never waited
    dist.barrier()
    dist.all_reduce(torch.ones(NUMEL * (2 if rank == 1 else 1)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
