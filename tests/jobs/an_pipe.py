"""A GPipe forward with sleep-based stages (P = world size stages, M micro-batches of STAGE_S each), then a hang:
the last rank skips the final all_reduce, so the others time out in it (the job fails, as it should).

Ground truth: the bubble fraction is (P-1)/(M+P-1); the hang's missing rank is the last one, whose last event is
the barrier after the pipeline; the hung all_reduce is the first collective of its group."""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

MICRO_BATCHES = 8
STAGE_S = 0.08
ACT_NUMEL = 16 * 1024
TIMEOUT_S = 3


def main() -> None:
    dist.init_process_group("gloo")  # the default timeout: start-up on a loaded machine can take seconds
    stage, stages = dist.get_rank(), dist.get_world_size()
    # the collective that will hang runs on a group of its own with a short timeout, so the job ends soon
    hang_group = dist.new_group(list(range(stages)), timeout=timedelta(seconds=TIMEOUT_S))
    act = torch.zeros(ACT_NUMEL)
    dist.barrier()
    for m in range(MICRO_BATCHES):
        if stage > 0:
            dist.recv(act, stage - 1)
        time.sleep(STAGE_S)  # this stage's compute
        if stage < stages - 1:
            act.fill_(m)
            dist.send(act, stage + 1)
    dist.barrier()
    if stage == stages - 1:
        time.sleep(TIMEOUT_S + 3)  # skips the all_reduce: the others wait for it until their timeout
        return
    dist.all_reduce(torch.ones(256), group=hang_group)


if __name__ == "__main__":
    main()
