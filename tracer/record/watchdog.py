"""The in-rank hang watchdog: when an op has been in flight longer than the hang timeout, record where every
thread of every rank is.

A thread per traced process wakes twice a second. If one of its own ops is stuck, it records the Python stacks
of all its threads (sys._current_frames: no signals needed) and raises a flag in the job's store. Every rank's
watchdog also looks for that flag, because the rank that matters most is the one with nothing in flight: the one
that never arrived, busy or stuck somewhere in its own code. Each rank records its stacks once per flag.
`disttrace run` (hangwatch.py) reads these "stacks" records to print its diagnosis.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback

from ..format import STACKS

FLAG = "disttrace/hang"
FLAG_EVERY = 3  # ticks of 0.5 s between looks at the store's flag (each look, of every rank, is a request to one store)


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

    def run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the watchdog must never take the job down
                pass

    def check(self) -> None:
        t = self.tracer
        if not t.rec.enabled:
            return
        now = time.monotonic_ns()
        stuck = [(i, info) for i, info in list(t.in_flight.items())
                 if now - info[3] > self.timeout_ns and i not in self.reported]
        if stuck:
            i, (op, group, seq, start, _tid) = min(stuck, key=lambda x: x[1][3])
            self.reported.update(j for j, _ in stuck)
            self.dump({"reason": "in_flight", "i": i, "op": op, "g": group.gidx, "gs": seq,
                       "for_ns": now - start})
            self.raise_flag(f"{t.rank}:{i}")
            return
        self._ticks += 1
        if self._ticks % FLAG_EVERY:
            return  # the store is shared by every rank of the job: ask it only every FLAG_EVERY ticks
        flag = self.read_flag()
        if flag and flag != self.seen_flag:
            self.seen_flag = flag
            self.dump({"reason": "peer", "flag": flag.decode(errors="replace")})

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
