"""The black box (`disttrace run --black-box`, `trace(black_box=True)`): the recorder a production job leaves on.

A rank keeps its rank file for the records that are few (meta, group, clock, left, stacks, aggkey, exception) and
writes its op records and step markers into a ring of fixed size (ring.py), not a growing file; the aggregates of
the whole run (aggregates.py) are kept as integers by the recorder at each op's end and written by the watchdog
thread; snapshots (snapshots.py) copy the
ring and the rank file when something happens. docs/FORMAT.md, "The black box"; docs/ARCHITECTURE.md says why.

BlackBox has the Recorder's interface (write, write_raw, close, enabled, fail, disable), so the tracer's hot path is
the same: write_raw is the ring's own method (no call of ours in between).
"""

from __future__ import annotations

import os
import threading
import time
import traceback

from ..blackbox_files import Config, snapshot_root, snapshots, write_snapshot
from ..format import (AGG_SUFFIX, AGGKEY, CLOCK, COPIED, EXCEPTION, GROUP, LEFT, META, RANK_FILE_SUFFIX, RING_SUFFIX,
                      STACKS, STEP)
from . import snapshots as protocol
from .aggregates import Aggregates
from .recorder import Recorder, warn_once
from .ring import Ring, ring_size

HEAD_KINDS = frozenset((META, GROUP, CLOCK, LEFT, STACKS, AGGKEY, EXCEPTION))  # the rank file's; the rest: the ring
class BlackBox:
    """A black-box rank's recorder: the rank file at `path`, the ring and the aggregates beside it."""

    def __init__(self, path: str, config: Config):
        self.config = config
        self.out = os.path.dirname(path)
        self.head = Recorder(path)
        stem = path[: -len(RANK_FILE_SUFFIX)]
        self.ring = Ring(stem + RING_SUFFIX, ring_size(config.ring), on_disable=self.disable)
        # the hot path: straight into the ring (raw: the Recorder's name for the hot path's call; the ring's
        # write_raw never raises, so it needs no fallback)
        self.write_raw = self.raw = self.ring.write_raw  # (set once: the compiled part keeps the writer it names)
        self.agg = Aggregates(stem + AGG_SUFFIX, self.head.write, config.by, config.every, float(config.every))
        self._agg_lock = threading.Lock()
        self._snap_lock = threading.Lock()
        self.taken = 0  # the last snapshot's number this rank took
        self.signals = None  # signals.SignalPipe, where SIGUSR1 could be set up (hooks.py)

    @property
    def enabled(self) -> bool:
        return self.ring.enabled and self.head.enabled

    @property
    def path(self) -> str:
        return self.head.path

    def write(self, obj) -> None:
        kind = obj.get("k") if type(obj) is dict else None
        if kind in HEAD_KINDS:
            self.head.write(obj)
            return
        self.ring.write(obj)
        if kind == STEP and self.ring.enabled:
            try:
                self.agg.step(int(obj["n"]), int(obj["t"]))
            except Exception as e:  # noqa: BLE001
                self.fail(e)

    def meta(self) -> dict:
        return self.config.meta(self.ring.size)

    # -- the watchdog thread's duties ----------------------------------------------------------------
    def tick(self) -> None:
        with self._agg_lock:
            if self.ring.enabled:
                self.agg.tick()

    def take(self, info: dict) -> str | None:
        """Copy this rank's rank file and ring into snapshot info["seq"] (once per number)."""
        with self._snap_lock:
            if int(info["seq"]) <= self.taken or not self.enabled:
                return None
            self.taken = int(info["seq"])
            ring = self.ring.copy()
            # when it was copied, on this rank's clock: the window of a snapshot of a job that ran on ends there
            # (a rank blocked or asleep recorded nothing for a while before)
            head = self.head.copy() + b'{"k":"%s","t":%d}\n' % (COPIED.encode(), time.monotonic_ns())
            files = {self.head.path: head, self.ring.path: ring}
            return write_snapshot(self.out, info, files, self.config.keep)

    def exception(self, exc: BaseException) -> dict:
        """The uncaught exception that ends this rank: its record (strings and line numbers only)."""
        frames = [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(exc.__traceback__)][-40:]
        rec = {"k": EXCEPTION, "t": time.monotonic_ns(), "wall_ns": time.time_ns(), "type": type(exc).__name__,
               "msg": str(exc)[:1000], "tb": frames}
        self.head.write(rec)
        return rec

    # -- lifecycle -------------------------------------------------------------------------------------
    def close(self) -> None:
        with self._agg_lock:
            try:
                self.agg.finish()
            except Exception:  # noqa: BLE001
                pass
            self.ring.close()
        self.head.close()
        if self.signals is not None:
            self.signals.uninstall()

    def fail(self, e: BaseException) -> None:
        self.disable(f"internal error: {type(e).__name__}: {e}")

    def disable(self, reason: str) -> None:
        was = self.ring.enabled or self.head.enabled
        self.ring.stop()
        self.head.enabled = False
        if was:
            warn_once(self.out, f"disttrace: black box disabled: {reason}; the job goes on unrecorded from here "
                                f"(what was recorded so far is kept)")


def ask(box: BlackBox, store, reason: str, rank: int) -> tuple[dict, bool]:
    """This rank's trigger: the snapshot's info, and whether the store carried it to every rank (else only this
    rank's is taken, numbered after the trace dir's last)."""
    if store is not None:
        try:
            return protocol.request(store, reason, rank)[1], True
        except Exception:  # noqa: BLE001
            pass
    return {"seq": local_seq(box), "reason": reason, "by_rank": rank, "wall_ns": time.time_ns()}, False


def exception_trigger(tracer, exc: BaseException) -> None:
    """An uncaught exception ends this rank (tracebacks.py's hook): record it, ask every rank for a snapshot and
    take this one's; wait a moment for the others' (torchrun stops them soon after this rank exits)."""
    box = tracer.rec
    if not isinstance(box, BlackBox) or not box.enabled:
        return
    box.exception(exc)
    store = getattr(tracer.watchdog, "store", None)
    info, shared = ask(box, store, "exception", tracer.rank)
    box.take(info)
    if shared:
        try:
            protocol.ack(store, info["seq"])
            protocol.wait_acks(store, info["seq"], tracer.world_size)
        except Exception:  # noqa: BLE001
            pass


def local_seq(box: BlackBox) -> int:
    """A snapshot's number where the store cannot be asked: after the trace dir's last."""
    try:
        taken = snapshots(snapshot_root(box.out))
    except OSError:
        taken = []
    return max([box.taken] + [s for s, _ in taken]) + 1
