"""A ring exchange (context parallelism's pattern, ring attention): every step, world-1 rounds of
batch_isend_irecv around a ring of 4 ranks (send to the next, receive from the one before), then the loss
all_reduce. Rank 2 sleeps 60 ms before the exchange at steps 2, 5 and 8 of 10 (4 ranks on a 2-core machine jitter
by tens of ms when it is loaded: 40 ms was found and named in quiet runs, but not every late step under a CPU hog).

The delay travels round the ring: rank 3 waits for rank 2's message, rank 1's send waits for rank 2 to receive,
and rank 0 waits for rank 1 or 3 while they wait for rank 2. Counted by whom each rank waited for directly, ranks
1 and 3 shared the blame, and the verdict named no rank in 2 runs of 6: the waits are carried back along such
chains to rank 2 (stragglers.propagated). The verdict: rank 2, those three steps, every 3rd, late at the
exchange, making the three others wait ~60 ms each in each of them."""

import time

from tagged import line

RUN = {"nproc": 4, "summaries": "off"}
STEPS = 10
LATE_RANK, LATE_STEPS, LATE_S = 2, (2, 5, 8), 0.060

EXCHANGE_LINE = line(__file__, "exchange")

EXPECT = {
    "straggler": {"rank": LATE_RANK, "steps": list(LATE_STEPS), "period": 3,
                  # the three others wait for it in each late step
                  "cost_ms": (3 * len(LATE_STEPS) * LATE_S * 1e3, 0.3 * 3 * len(LATE_STEPS) * LATE_S * 1e3),
                  "site": f"verdict_ring.py:{EXCHANGE_LINE}"},
    "steps": {"count": STEPS, "warmup_max": 2},
    "problems": [],
}


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    kv = torch.randn(64, 64)
    for step in range(STEPS):
        x = torch.randn(128, 128)
        for _ in range(5):  # the step's own compute
            x = torch.tanh(x @ x * 0.01)
        if rank == LATE_RANK and step in LATE_STEPS:
            time.sleep(LATE_S)
        buf = kv.clone()
        for _ in range(world - 1):
            recv = torch.empty_like(buf)
            ops = [dist.P2POp(dist.isend, buf, nxt), dist.P2POp(dist.irecv, recv, prv)]
            reqs = dist.batch_isend_irecv(ops)  # <exchange>
            for r in reqs:
                r.wait()
            buf = recv
        loss = x.sum().reshape(1)
        dist.all_reduce(loss)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
