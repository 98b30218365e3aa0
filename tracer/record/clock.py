"""Clock alignment: each rank's offset to rank 0's monotonic clock, NTP style, over the job's own store.

Four timestamps per round (t1 rank r sends, t2 rank 0 receives, t3 rank 0 answers, t4 rank r receives):
offset = ((t2 - t1) + (t3 - t4)) / 2, delay = (t4 - t1) - (t3 - t2). The round with the smallest delay wins;
its delay / 2 bounds the error. The exchange goes through the rendezvous store (TCPStore) under keys of our
own, never through the job's process groups, so it adds no collective and changes no sequence number.

`Sync` does it off the job's path, in a thread of each rank over a connection of its own (`store.clone()`):
nobody waits for it. Rank 0 answers the queries in the order they come (a store queue), so no rank waits for
others' turns (the sequential exchange kept rank N-1 waiting for N-2 ranks' rounds: seconds at a thousand ranks).
Each rank measures right after init_process_group ("start") and again now and then while the job runs ("end",
the latest one wins): the difference is the drift. destroy_process_group waits for nothing but, briefly, a
measurement under way. Where the store has no clone() or queue (torch < 2.6), `exchange` runs in line, as
it did: once after init_process_group and once before destroy_process_group.

A rank that reads the same monotonic clock as rank 0 (the same kernel: its boot id, and the same time namespace)
measures nothing: its offset is 0, exactly. Measured instead, a loaded node's round trips made offsets and drifts
of milliseconds out of nothing (a drift measured under a delay of tens of ms), which moved one rank's events past
its peers' on a single machine and took the analysis' waits and steps with them. (`DISTTRACE_CLOCK_MEASURE=1`
measures anyway.)
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

from ..format import CLOCK

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
        best = _better(best, t1, t2, now())
    if best is None:
        return None
    return _result(best)


def _better(best, t1: int, t2: int, t4: int):
    """(offset, delay) of the round t1, t2, t4 if its delay is the smallest so far, else best. t3 == t2 (rank 0
    answers at once): the delay is the whole round trip."""
    delay = t4 - t1
    if best is None or delay < best[1]:
        return (2 * t2 - t1 - t4) // 2, delay
    return best


def _result(best) -> tuple[int, int]:
    """The best round's (offset_ns, uncertainty_ns): its delay / 2 bounds the error."""
    return best[0], max(best[1] // 2, 1)


def offset_record(phase: str, offset_ns: int, uncertainty_ns: int, window: int | None = None) -> dict:
    """A "clock" record: this rank's offset to rank 0's clock, measured now (`window`: Sync's measurement)."""
    rec = {"k": CLOCK, "phase": phase, "offset_ns": offset_ns, "uncertainty_ns": uncertainty_ns,
           "mono_ns": time.monotonic_ns()}
    if window is not None:
        rec["window"] = window
    return rec


def error_record(phase: str, e: BaseException) -> dict:
    """A "clock" record for an exchange that failed."""
    return {"k": CLOCK, "phase": phase, "error": f"{type(e).__name__}: {e}"[:300]}


QUEUE = f"{PREFIX}/queue"
REMEASURE_S = (1.0, 10.0, 60.0, 300.0)  # after the start, when every rank measures again; then every last one
WINDOW_S = 10.0                     # the longest one measurement may take (a rank gone without a word)
POLL_S = 0.0002                     # both sides look at the store this often during a measurement (its precision)
ENV_EVERY = "DISTTRACE_CLOCK_EVERY"  # another schedule, as "1,10,60" (seconds): for tests of short jobs
ENV_MEASURE = "DISTTRACE_CLOCK_MEASURE"  # set: measure even a clock that rank 0 shares
CLOCK_ID = f"{PREFIX}/id"  # rank 0's clock_id(), for the others to compare with theirs


def clock_id() -> str | None:
    """What names this process's monotonic clock: the kernel's boot id (containers on one kernel share it) and the
    time namespace's offsets (a namespace can shift CLOCK_MONOTONIC); None where there is nothing to read (not
    Linux) or where ENV_MEASURE asks for a measurement."""
    if os.environ.get(ENV_MEASURE):
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return None
    try:
        with open("/proc/self/timens_offsets") as f:  # (no file: a kernel without time namespaces)
            offsets = " ".join(f.read().split())
    except OSError:
        offsets = ""
    return f"{boot} {offsets}" if boot else None


def _schedule() -> list[float]:
    try:
        every = [float(x) for x in os.environ.get(ENV_EVERY, "").split(",") if x.strip()]
    except ValueError:
        every = []
    return [x for x in every if x > 0] or list(REMEASURE_S)


class Sync(threading.Thread):
    """The exchange in the background; `write(record)` gets the clock records. stop() at destroy_process_group.

    Every rank measures at the same moments after its start (which init_process_group's rendezvous lines up); rank
    0 serves each window's queries and sleeps in between. Both sides poll the store without blocking (POLL_S apart,
    only during a window): a thread of ours left blocked in a store call when the interpreter exits can abort the
    process, every store timeout prints a c10d warning, and a measurement can be dropped the moment the job ends."""

    def __init__(self, store, rank: int, world_size: int, write, rounds: int = ROUNDS):
        super().__init__(name="disttrace-clock", daemon=True)
        self.store = store.clone()  # a connection of our own: the job's store calls never queue behind ours
        self.rank, self.world_size, self.write, self.rounds = rank, world_size, write, rounds
        self.idle = threading.Event()  # set between windows: stopping then waits for nothing
        self._stop = threading.Event()

    @staticmethod
    def possible(store) -> bool:
        return hasattr(store, "clone") and hasattr(store, "queue_pop")

    def stop(self, grace_s: float = 1.0) -> None:
        """End after the window under way, if any (waiting for it up to grace_s). Rank 0 is told that this rank
        asks no more, so that it never waits for a rank that left."""
        self._stop.set()
        if self.rank != 0:
            try:
                self.store.queue_push(QUEUE, f"{self.rank}/gone/0")
            except Exception:  # noqa: BLE001
                pass
        self.idle.wait(grace_s)

    def run(self) -> None:
        try:
            if self.rank == 0:
                live = set(range(1, self.world_size))
                self.store.set(CLOCK_ID, clock_id() or "")

                def step(window: int, phase: str) -> None:
                    self.write(offset_record(phase, 0, 0, window))  # rank 0: the reference
                    self._serve(window, live)
                self._measure_all(step)
            elif self._shares_rank0_clock():
                self.write(offset_record("start", 0, 0, 0))  # exact: nothing to measure, nor any drift
                self.store.queue_push(QUEUE, f"{self.rank}/gone/0")  # rank 0 waits for no rounds of ours
            else:
                self._measure_all(self._measure)
        except Exception:  # noqa: BLE001 - a rank gone, a store gone at the job's end: no alignment, no harm
            pass
        self.store = None  # the connection ends with the job's process group
        self.write = None  # and the tracer it wrote to is let go (a later world has its own)
        self.idle.set()
        # The thread itself lives on, idle, to the interpreter's exit (as the watchdog's does): ending at
        # destroy_process_group, it would be one more thread that the destroy ends than untraced.
        threading.Event().wait()

    def _shares_rank0_clock(self) -> bool:
        """Whether this rank reads rank 0's clock (the same clock_id), once rank 0 has said which it reads."""
        mine = clock_id()
        if mine is None:
            return False
        deadline = time.monotonic() + WINDOW_S
        while not self.store.check([CLOCK_ID]):
            if self._stop.is_set() or time.monotonic() > deadline:
                return False
            time.sleep(POLL_S * 10)
        return self.store.get(CLOCK_ID).decode() == mine

    def _measure_all(self, step) -> None:
        """step(window, phase) at the start, then on the schedule until stop()."""
        step(0, "start")
        waits = _schedule()
        begun = time.monotonic()
        due = 0.0
        window = 0
        while True:
            due += waits.pop(0) if len(waits) > 1 else waits[0]
            window += 1
            self.idle.set()
            if self._stop.wait(max(0.0, begun + due - time.monotonic())):
                break
            self.idle.clear()
            step(window, "end")

    def _serve(self, window: int, live: set[int]) -> None:
        """Rank 0: answer one window's queries, each with its clock as it comes, until every rank still in the job
        has had its rounds (a rank that left says so), the window's time is up, or the job ends."""
        store, now = self.store, time.monotonic_ns
        left = dict.fromkeys(live, self.rounds)
        deadline = time.monotonic() + WINDOW_S
        while any(left[r] for r in live) and not self._stop.is_set() and time.monotonic() < deadline:
            try:
                who = store.queue_pop(QUEUE, False).decode()
            except Exception:  # noqa: BLE001 - nothing asked yet (QueueEmptyError): look again in a moment
                time.sleep(POLL_S)
                continue
            t2 = now()
            r, w, _ = who.split("/")
            r = int(r)
            if w == "gone":
                live.discard(r)
            elif int(w) == window and r in left:
                store.set(f"{PREFIX}/a/{who}", str(t2))
                left[r] -= 1

    def _measure(self, window: int, phase: str) -> None:
        store, now = self.store, time.monotonic_ns
        best = None
        deadline = time.monotonic() + WINDOW_S
        for k in range(self.rounds):
            who = f"{self.rank}/{window}/{k}"
            answer = f"{PREFIX}/a/{who}"
            t1 = now()
            store.queue_push(QUEUE, who)
            while not store.check([answer]):
                if self._stop.is_set() or time.monotonic() > deadline:
                    return
                time.sleep(POLL_S)
            t4 = now()
            t2 = int(store.get(answer))
            store.delete_key(answer)
            best = _better(best, t1, t2, t4)
        self.write(offset_record(phase, *_result(best), window))
