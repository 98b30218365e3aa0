"""A slow pipeline stage: a GPipe-like forward over 3 stages (stage = rank), 6 iterations of 4 micro-batches;
each stage computes 25 ms a micro-batch (a sleep: the host busy), except the middle stage, stage 1, which computes
twice as long (50 ms) before it sends its activation on. Each iteration ends with an all_reduce of the loss over
the three stages. Stage 1 sets the pipeline's pace: its span (recv -> the send at the `slow` line) holds most of
each step's critical path. With --no-fault stage 1 computes 25 ms like the others: the what-if "the spans ending
at the `slow` line 50% faster" on the faulty run must predict it (tests/analysis/causal/test_critical_path.py).

The micro-batches are long (25 ms) because a balanced pipeline hands its activations off at the same instant on
every stage, which a loaded 2-core machine serves a few ms late; the faulty run's trace cannot show that cost, and
against 25 ms it stays within the prediction's tolerance."""

import sys
import time

from tagged import line

ITERATIONS, MICRO_BATCHES, STAGES = 6, 4, 3
SLOW_STAGE, COMPUTE_S = 1, 0.025
NUMEL = 4096
NO_FAULT = "--no-fault" in sys.argv


SLOW_LINE = line(__file__, "slow")


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    stage = dist.get_rank()
    assert dist.get_world_size() == STAGES and SLOW_STAGE == 1
    act, loss = torch.zeros(NUMEL), torch.zeros(1)
    for it in range(ITERATIONS):
        for m in range(MICRO_BATCHES):
            if stage == 0:  # the first stage: its micro-batch in, the activation out
                time.sleep(COMPUTE_S)
                act.fill_(it * MICRO_BATCHES + m)
                dist.send(act, 1)  # <send0>
            elif stage == 1:  # the middle stage, the slow one
                dist.recv(act, 0)  # <recv1>
                time.sleep(COMPUTE_S if NO_FAULT else 2 * COMPUTE_S)
                dist.send(act, 2)  # <slow>
            else:  # the last stage: the activation in, the loss out
                dist.recv(act, 1)  # <recv2>
                time.sleep(COMPUTE_S)
                loss += act[0]
        dist.all_reduce(loss)  # <all_reduce>
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
