"""A P2P deadlock, as a halo exchange meets it: each step rank 0 sends its halo, then receives rank 1's, and rank 1
receives first, then sends; at step 2 a flag that rank 1 reads from its data (an odd batch) takes it into rank 0's
branch: both ranks then sit in a blocking `send` (gloo's waits for its recv), each waiting for a recv the other
never posts. After 2 s the watchdog records the stacks, `disttrace run` prints its diagnosis and stops the job
(`--kill-on-hang`, exit 137).

The verdict: a hang, not two unmatched sends: both ranks stuck in their send, said to be a deadlock, with where each
is, in step 2."""

from tagged import line

RUN = {"nproc": 2, "summaries": "off", "run_args": ("--hang-timeout", "2", "--kill-on-hang"), "rc": 137}
STEPS, STUCK_STEP = 4, 2
SEND_LINE = line(__file__, "send")

EXPECT = {
    "problems": [
        {"kind": "hang", "ranks": [0, 1], "step": STUCK_STEP,
         "where": {0: f"verdict_p2p_deadlock.py:{SEND_LINE}", 1: f"verdict_p2p_deadlock.py:{SEND_LINE}"},
         "message": ["deadlock", "rank 0 is stuck in send", "rank 1 is stuck in send"]},
    ],
}


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, other = dist.get_rank(), 1 - dist.get_rank()
    halo, got = torch.ones(1024), torch.empty(1024)
    for step in range(STEPS):
        odd_batch = step == STUCK_STEP
        if rank == 0 or odd_batch:
            dist.send(halo, other)  # <send>
            dist.recv(got, other)
        else:
            dist.recv(got, other)
            dist.send(halo, other)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
