"""A GPipe pipeline with one heavier stage: 2 stages (stage = rank), 3 iterations of 4 micro-batches each; stage 1
computes twice as long as stage 0 (sleeps stand for compute: forward 10 ms and backward 20 ms a micro-batch on
stage 0, 20 and 40 ms on stage 1).

Each iteration sends the activations forward (stage 0 -> 1) micro-batch by micro-batch, then, once all forwards
are done, the gradients backward (1 -> 0); blocking send/recv, no collective inside the loop (a barrier before
and after it). Stage 0's waiting for stage 1 is the schedule's (bubble) and the heavier stage's doing, not a
straggler's. The verdict: stages [0, 1], 4 micro-batches per iteration over 3 iterations, the textbook GPipe
bubble (P-1)/(M+P-1) = 1/5, stage 1 named as the slow stage, no straggler, 3 steps."""

import time

RUN = {"nproc": 2, "summaries": "off"}
ITERATIONS, MICRO_BATCHES, STAGES = 3, 4, 2
FORWARD_S = (0.010, 0.020)   # per stage, per micro-batch: stage 1 twice stage 0
BACKWARD_S = (0.020, 0.040)
ACT_NUMEL = 4096             # a 16 KiB activation (and gradient) per micro-batch

EXPECT = {
    "pipeline": {"stages": list(range(STAGES)), "micro_batches": MICRO_BATCHES, "iterations": ITERATIONS,
                 "expected_fraction": (STAGES - 1) / (MICRO_BATCHES + STAGES - 1), "slow_stage": 1},
    "straggler": None,
    "steps": {"count": ITERATIONS, "warmup_max": 1},
    "problems": [],
}


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    stage = dist.get_rank()
    first, last = stage == 0, stage == STAGES - 1
    act, grad = torch.zeros(ACT_NUMEL), torch.zeros(ACT_NUMEL)
    dist.barrier()
    for it in range(ITERATIONS):
        for m in range(MICRO_BATCHES):  # forward: all micro-batches through the stages
            if not first:
                dist.recv(act, stage - 1)
            time.sleep(FORWARD_S[stage])
            if not last:
                act.fill_(it * MICRO_BATCHES + m)
                dist.send(act, stage + 1)
        for m in reversed(range(MICRO_BATCHES)):  # backward, once every forward is done (GPipe)
            if not last:
                dist.recv(grad, stage + 1)
            time.sleep(BACKWARD_S[stage])
            if not first:
                grad.fill_(-(it * MICRO_BATCHES + m))
                dist.send(grad, stage - 1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
