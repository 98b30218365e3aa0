"""A recv that times out (gloo, 2 s): rank 1 never sends. The traceback the job prints must be the one it prints
untraced (tests/commands/test_run_cli.py): the user's line and torch's, none of disttrace's frames.

The 2 s are the recv's group's only: the world's default timeout leaves the ranks' start-up, which a busy machine
stretches past 2 s between them, alone."""

import datetime
import time


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.barrier()
    pair = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=2))
    if dist.get_rank() == 0:
        dist.recv(torch.zeros(4), src=1, group=pair)  # never sent: gloo raises after the timeout
    else:
        time.sleep(4)


if __name__ == "__main__":
    main()
