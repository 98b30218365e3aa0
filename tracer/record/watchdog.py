"""The in-rank hang watchdog: when an op has been in flight longer than the hang timeout, record where every
thread of every rank is.

A thread per traced process wakes twice a second. If one of its own ops is stuck, it records the Python stacks
of all its threads (sys._current_frames: no signals needed) and raises a flag in the job's store. Every rank's
watchdog also looks for that flag, because the rank that matters most is the one with nothing in flight: the one
that never arrived, busy or stuck somewhere in its own code. Each rank records its stacks once per flag.
`disttrace run` (hangwatch.py) reads these "stacks" records to print its diagnosis.

In black-box mode (blackbox.py) the same thread, always started, also writes the aggregates' closed windows, and
takes the snapshots: its own triggers (a hang it saw, SIGUSR1 through the signal pipe it select()s on,
`disttrace snapshot`'s request file) and the other ranks' (the store's snapshot counter, looked at instead of the
hang flag every FLAG_EVERY ticks: a hang is a snapshot whose reason is "hang", then the flag is read).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
import traceback

from ..format import STACKS
from . import snapshots
from .blackbox import BlackBox, ask

FLAG = "disttrace/hang"
FLAG_EVERY = 3  # ticks of 0.5 s between looks at the store's flag (each look, of every rank, is a request to one store)
TICK_S = 0.5


def thread_stacks(skip: int | None = None) -> list[dict]:
    """The Python stack of every thread, innermost frame last."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        frames = [[f.filename, f.lineno, f.name] for f in traceback.extract_stack(frame)]
        out.append({"id": ident, "name": names.get(ident, str(ident)), "frames": frames[-40:]})
    return out


class Watchdog(threading.Thread):
    def __init__(self, tracer, timeout_s: float, store=None):
        super().__init__(name="disttrace-watchdog", daemon=True)
        self.tracer, self.timeout_ns, self.store = tracer, int(timeout_s * 1e9), store
        self.reported: set[int] = set()   # own stuck ops already reported
        self.seen_flag = b""
        self._stop = threading.Event()
        self._ticks = 0
        self.box = tracer.rec if isinstance(tracer.rec, BlackBox) else None
        self.seen_snapshot = 0
        self._signalled = False
        self._looks_for_requests = int(os.environ.get("LOCAL_RANK", -1)) <= 0  # one rank a node stats the file

    def run(self) -> None:
        while not self._stop.is_set():
            self._wait()
            if self._stop.is_set():
                break
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the watchdog must never take the job down
                pass

    def _wait(self) -> None:
        box = self.box
        pipe = box.signals if box is not None else None
        timeout = TICK_S
        if pipe is None:
            self._stop.wait(timeout)
            return
        ready, _, _ = select.select([pipe.r], [], [], timeout)
        if ready and signal.SIGUSR1 in pipe.drain():
            self._signalled = True

    def check(self) -> None:
        t = self.tracer
        if not t.rec.enabled:
            return
        if self.box is not None:
            self.box.tick()
            if self._signalled:
                self._signalled = False
                self.trigger("signal")
        if self.timeout_ns:
            self.check_hang()
        self._ticks += 1
        if self._ticks % FLAG_EVERY:
            return  # the store is shared by every rank of the job: ask it only every FLAG_EVERY ticks
        if self.box is not None:
            self.look_for_snapshots()
            return
        self.peer_stacks()

    def peer_stacks(self) -> None:
        """Another rank raised the hang flag: this rank's stacks, once per flag."""
        flag = self.read_flag()
        if flag and flag != self.seen_flag:
            self.seen_flag = flag
            self.dump({"reason": "peer", "flag": flag.decode(errors="replace")})

    def check_hang(self) -> None:
        t = self.tracer
        now = time.monotonic_ns()
        stuck = [(i, info) for i, info in t.completion.in_flight_items()
                 if now - info[3] > self.timeout_ns and i not in self.reported]
        if stuck:
            i, (op, group, seq, start, _tid) = min(stuck, key=lambda x: x[1][3])
            self.reported.update(j for j, _ in stuck)
            self.dump({"reason": "in_flight", "i": i, "op": op, "g": group.gidx, "gs": seq,
                       "for_ns": now - start})
            self.raise_flag(f"{t.rank}:{i}")
            if self.box is not None:
                self.trigger("hang")

    # -- the black box's snapshots ---------------------------------------------------------------------
    def look_for_snapshots(self) -> None:
        """`disttrace snapshot`'s request (one rank a node looks), then the snapshots other ranks asked for."""
        if self._looks_for_requests and snapshots.claim_request(self.box.out, self.tracer.rank):
            self.trigger("request")
        if self.store is None:
            return
        seq, info = snapshots.poll(self.store, self.seen_snapshot)
        if info is None:
            return
        self.seen_snapshot = seq
        if info["reason"] == "hang":  # the peer's hang: this rank's stacks first, as without the black box
            self.peer_stacks()
        self.take(info)

    def trigger(self, reason: str) -> None:
        """This rank's trigger: a snapshot of every rank (through the store), this rank's taken now."""
        info, shared = ask(self.box, self.store, reason, self.tracer.rank)
        if shared:
            self.seen_snapshot = max(self.seen_snapshot, info["seq"])
        self.take(info)

    def take(self, info: dict) -> None:
        try:
            self.box.take(info)
        finally:
            if self.store is not None:
                try:
                    snapshots.ack(self.store, int(info["seq"]))
                except Exception:  # noqa: BLE001
                    pass

    def dump(self, reason: dict) -> None:
        self.tracer.write({"k": STACKS, "t": time.monotonic_ns(), **reason,
                           "threads": thread_stacks(skip=threading.get_ident())})

    def raise_flag(self, value: str) -> None:
        if self.store is None:
            return
        try:
            self.store.set(FLAG, value)
            self.seen_flag = value.encode()
        except Exception:  # noqa: BLE001
            pass

    def read_flag(self) -> bytes:
        if self.store is None:
            return b""
        try:
            if self.store.check([FLAG]):
                return self.store.get(FLAG)
        except Exception:  # noqa: BLE001
            pass
        return b""

    def stop(self) -> None:
        self._stop.set()
        pipe = self.box.signals if self.box is not None else None
        if pipe is not None:
            from .signals import STOP

            pipe.poke(STOP)


def start_watchdog(tracer, timeout_s: float) -> Watchdog:
    store = None
    try:
        import torch.distributed as dist

        store = dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - without a store each rank still reports its own stuck ops
        pass
    w = Watchdog(tracer, timeout_s, store)
    w.start()
    tracer.watchdog = w
    return w
