"""Clock alignment: each rank's offset to rank 0's monotonic clock, NTP style, over the job's own store.

Four timestamps per round (t1 rank r sends, t2 rank 0 receives, t3 rank 0 answers, t4 rank r receives):
offset = ((t2 - t1) + (t3 - t4)) / 2, delay = (t4 - t1) - (t3 - t2). The round with the smallest delay wins;
its delay / 2 bounds the error. The exchange goes through the rendezvous store (TCPStore) under keys of our
own, never through the job's process groups, so it adds no collective and changes no sequence number.
Run once after init_process_group and once before destroy_process_group (the difference is the drift).
"""

from __future__ import annotations

import time
from datetime import timedelta

ROUNDS = 12
PREFIX = "disttrace/clock"


def exchange(store, rank: int, world_size: int, phase: str, rounds: int = ROUNDS,
             timeout_s: float = 30.0) -> tuple[int, int] | None:
    """Run the exchange; returns (offset_ns, uncertainty_ns) to add to this rank's clock (0, 0 on rank 0),
    or None when it could not be done (a rank gone, no store)."""
    now = time.monotonic_ns
    if rank == 0:
        wait = timedelta(seconds=timeout_s)
        for r in range(1, world_size):
            for k in range(rounds):
                q = f"{PREFIX}/{phase}/{r}/{k}/q"
                try:
                    store.wait([q], wait)
                except Exception:  # noqa: BLE001 - that rank is gone or not tracing: serve the others
                    break
                t2 = now()
                store.set(f"{PREFIX}/{phase}/{r}/{k}/a", str(t2))
        return 0, 0
    best = None
    wait = timedelta(seconds=timeout_s + world_size * rounds * 0.01)
    for k in range(rounds):
        t1 = now()
        store.set(f"{PREFIX}/{phase}/{rank}/{k}/q", "1")
        a = f"{PREFIX}/{phase}/{rank}/{k}/a"
        store.wait([a], wait)
        t2 = int(store.get(a))
        t4 = now()
        # t3 == t2 (rank 0 answers at once); delay is the whole round trip
        delay = t4 - t1
        offset = (2 * t2 - t1 - t4) // 2
        if best is None or delay < best[1]:
            best = (offset, delay)
    if best is None:
        return None
    return best[0], max(best[1] // 2, 1)
