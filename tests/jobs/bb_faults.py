"""A two-stage training loop (2 ranks, gloo) whose fault comes long after a black box's ring has wrapped. Usage:
bb_faults.py MODE. Each step stage 0 runs its layer and sends the activations to stage 1, stage 1 runs its own on
them, both all-reduce the gradient of the layers they share, and the step is marked (mark_step). At step
FAULT_STEP of STEPS, by MODE:

clean:   no fault.
hang:    rank 1 never reaches the all_reduce: its data loader never returns (a sleep); the watchdog records the
         stacks after 2 s and `disttrace run` stops the job (`--kill-on-hang`, exit 137).
raise:   rank 1's batch is bad and it raises (a ValueError) before the all_reduce; rank 0's all_reduce then fails
         (gloo: the connection closed) and it raises too.
desync:  rank 1 takes another branch and broadcasts where rank 0 all-reduces (an order desync); the hang that
         follows is stopped as above.
p2p:     rank 1 receives into a buffer twice the size of what rank 0 sends (gloo takes the shorter message: a
         silent P2P size mismatch); the job goes on to its end.

tests/analysis/test_black_box_real.py cuts each trace into rings (tests/ringfiles.py) and checks that the window's
verdict is the whole trace's."""

import sys
import time

from tagged import line

STEPS, FAULT_STEP, WIDTH = 150, 130, 256
RUN_ARGS = {"hang": ("--hang-timeout", "2", "--kill-on-hang"), "desync": ("--hang-timeout", "2", "--kill-on-hang")}
SLEEP_LINE, RAISE_LINE = line(__file__, "sleep"), line(__file__, "raise")
ALL_REDUCE_LINE, BROADCAST_LINE = line(__file__, "all_reduce"), line(__file__, "broadcast")
SEND_LINE, RECV_LINE = line(__file__, "send"), line(__file__, "recv")


def load_next_batch(step: int, rank: int, mode: str):
    import torch

    if step == FAULT_STEP and rank == 1:
        if mode == "hang":
            time.sleep(3600)  # <sleep>
        if mode == "raise":
            raise ValueError(f"bad batch at step {step}")  # <raise>
    return torch.randn(8, WIDTH)


def main() -> None:
    import torch
    import torch.distributed as dist
    from disttrace.tracer import mark_step

    mode = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    layer = torch.nn.Linear(WIDTH, WIDTH)
    act = torch.empty(8, WIDTH)
    for step in range(STEPS):
        x = load_next_batch(step, rank, mode) if rank == 0 else None
        if rank == 0:
            act = layer(x).detach()
            dist.send(act, 1)  # <send>
        else:
            big = mode == "p2p" and step == FAULT_STEP
            act = torch.empty(16 if big else 8, WIDTH)
            dist.recv(act, 0)  # <recv>
            load_next_batch(step, rank, mode)
            layer(act[:8]).sum().backward()
        grad = torch.ones(WIDTH) if layer.weight.grad is None else layer.weight.grad[0].contiguous()
        if mode == "desync" and rank == 1 and step == FAULT_STEP:
            dist.broadcast(grad, src=0)  # <broadcast>
        else:
            dist.all_reduce(grad)  # <all_reduce>
        mark_step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
