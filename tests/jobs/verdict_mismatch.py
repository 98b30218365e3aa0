"""A size mismatch: at step 3 of 6 rank 1 all-reduces 2048 floats where rank 0 all-reduces 1024 (a bug in how
one rank sizes its buffer). On gloo the smaller side, rank 0, receives more bytes than it expects and aborts
(SIGABRT: "op.preamble.length <= op.nbytes. 2048 vs 1024"); rank 1's read then fails ("Connection reset by peer")
and it raises a RuntimeError; torchrun stops the job (exit code 1 here).

The verdict: the mismatch itself (all_reduce #3: 4 KiB against 8 KiB), the error on rank 1, which raised, and the
death of rank 0, which aborted inside the op and never finished it; no hang."""

from tagged import line


RUN = {"nproc": 2, "summaries": "off", "rc": 1}
STEPS, BAD_STEP = 6, 3
NUMEL, BAD_RANK = 1024, 1


SITE = f"verdict_mismatch.py:{line(__file__, 'all_reduce')}"
OP = f"all_reduce #{BAD_STEP}"  # one all_reduce per step

EXPECT = {
    "problems": [
        {"kind": "mismatch", "ranks": [0, 1], "message": [OP, "rank 0 bytes 4.0 KiB; rank 1 bytes 8.0 KiB", SITE]},
        {"kind": "error", "ranks": [BAD_RANK], "message": [OP, SITE, "Connection"]},
        {"kind": "died", "ranks": [1 - BAD_RANK], "message": ["trace ends here", f"inside {OP}", SITE]},
    ],
}


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(STEPS):
        n = NUMEL * (2 if rank == BAD_RANK and step == BAD_STEP else 1)
        t = torch.ones(n)
        dist.all_reduce(t)  # <all_reduce>
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
