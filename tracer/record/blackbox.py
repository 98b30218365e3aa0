"""The black box (`disttrace run --black-box`, `trace(black_box=True)`): the recorder a production job leaves on.

A rank keeps its rank file for the records that are few (meta, group, clock, left, stacks, aggkey, exception) and
writes its op records and step markers into a ring of fixed size (ring.py), not a growing file; the aggregates of
the whole run (aggregates.py) are computed from the ring by the watchdog thread; snapshots (snapshots.py) copy the
ring and the rank file when something happens. docs/FORMAT.md, "The black box"; docs/ARCHITECTURE.md says why.

BlackBox has the Recorder's interface (write, write_raw, close, enabled, fail, disable), so the tracer's hot path is
the same: write_raw is the ring's own method (no call of ours in between).
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from dataclasses import dataclass

from ..format import (AGG_SUFFIX, AGGKEY, CLOCK, EXCEPTION, GROUP, KEEP_SNAPSHOTS_DEFAULT, LEFT, META,
                      RANK_FILE_SUFFIX, RING_DEFAULT_OPS, RING_SUFFIX, STACKS, WINDOW_DEFAULT)
from . import snapshots
from .aggregates import Aggregates
from .recorder import Recorder, warn_once
from .ring import Ring, ring_size

HEAD_KINDS = frozenset((META, GROUP, CLOCK, LEFT, STACKS, AGGKEY, EXCEPTION))  # the rank file's; the rest: the ring
RING_MAX_OPS = 10_000_000
ENV = {"ring": "DISTTRACE_RING", "keep": "DISTTRACE_KEEP_SNAPSHOTS", "window": "DISTTRACE_WINDOW"}


@dataclass(frozen=True)
class Config:
    ring: int = RING_DEFAULT_OPS  # ops the ring holds at least
    keep: int = KEEP_SNAPSHOTS_DEFAULT  # snapshots kept
    by: str = "steps"  # windows: "steps" (every `every` steps; `every` seconds before the first marker) | "seconds"
    every: int = WINDOW_DEFAULT

    @classmethod
    def make(cls, ring=None, keep=None, window=None) -> "Config":
        """From the options' values (None: the default); ValueError with a one-line message if one is wrong.
        window: W (steps, or W seconds in a job that marks none) or "Ws" (seconds only)."""
        by, every = "steps", WINDOW_DEFAULT
        if window is not None:
            text = str(window).strip()
            by = "seconds" if text.endswith("s") else "steps"
            every = _positive(text.removesuffix("s"), "--window", "a number of steps, or of seconds as 30s", text)
        ring = RING_DEFAULT_OPS if ring is None else _positive(ring, "--ring", "a number of ops")
        if ring > RING_MAX_OPS:
            raise ValueError(f"--ring {ring}: at most {RING_MAX_OPS:,} ops")
        keep = KEEP_SNAPSHOTS_DEFAULT if keep is None else _positive(keep, "--keep-snapshots", "a number")
        return cls(ring, keep, by, every)

    def env(self) -> dict:
        return {ENV["ring"]: str(self.ring), ENV["keep"]: str(self.keep),
                ENV["window"]: f"{self.every}{'s' if self.by == 'seconds' else ''}"}

    @classmethod
    def from_env(cls, environ=os.environ) -> "Config | None":
        """The config `disttrace run --black-box` passed (None: not in black-box mode)."""
        if environ.get("DISTTRACE_BLACK_BOX") != "1":
            return None
        return cls.make(environ.get(ENV["ring"]), environ.get(ENV["keep"]), environ.get(ENV["window"]))

    def meta(self, ring_bytes: int) -> dict:
        window = {"by": self.by, "every": self.every}
        if self.by == "steps":
            window["seconds"] = self.every  # before the first step marker (or in a job that marks none)
        return {"ring_bytes": ring_bytes, "ring_ops": self.ring, "window": window, "keep_snapshots": self.keep}


def _positive(value, option: str, what: str, shown=None) -> int:
    shown = value if shown is None else shown
    try:
        n = int(str(value))
    except ValueError:
        raise ValueError(f"{option} {shown}: expected {what}") from None
    if n < 1:
        raise ValueError(f"{option} {shown}: expected {what}, at least 1")
    return n


class BlackBox:
    """A black-box rank's recorder: the rank file at `path`, the ring and the aggregates beside it."""

    def __init__(self, path: str, config: Config):
        self.config = config
        self.out = os.path.dirname(path)
        self.head = Recorder(path)
        stem = path[: -len(RANK_FILE_SUFFIX)]
        self.ring = Ring(stem + RING_SUFFIX, ring_size(config.ring), on_disable=self.disable)
        self.write_raw = self.ring.write_raw  # the hot path: straight into the ring
        self.agg = Aggregates(stem + AGG_SUFFIX, self.ring, self.head.write, config.by, config.every,
                              float(config.every))
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
        if type(obj) is dict and obj.get("k") in HEAD_KINDS:
            self.head.write(obj)
        else:
            self.ring.write(obj)

    def meta(self) -> dict:
        return self.config.meta(self.ring.size)

    # -- the watchdog thread's duties ----------------------------------------------------------------
    def tick(self) -> None:
        with self._agg_lock:
            if self.ring.enabled:
                self.agg.tick()

    def busy(self) -> bool:
        """Whether the last tick read more than a quarter of the ring: the next should come sooner (else the
        writer laps the aggregator and the window's counts become a lower bound)."""
        return self.agg.consumed * 4 > self.ring.size

    def take(self, info: dict) -> str | None:
        """Copy this rank's rank file and ring into snapshot info["seq"] (once per number)."""
        with self._snap_lock:
            if int(info["seq"]) <= self.taken or not self.enabled:
                return None
            self.taken = int(info["seq"])
            files = {self.head.path: self.head.copy(), self.ring.path: self.ring.copy()}
            return snapshots.write_snapshot(self.out, info, files, self.config.keep)

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
        self.ring.enabled = False
        self.head.enabled = False
        if was:
            warn_once(self.out, f"disttrace: black box disabled: {reason}; the job goes on unrecorded from here "
                                f"(what was recorded so far is kept)")


def ask(box: BlackBox, store, reason: str, rank: int) -> tuple[dict, bool]:
    """This rank's trigger: the snapshot's info, and whether the store carried it to every rank (else only this
    rank's is taken, numbered after the trace dir's last)."""
    if store is not None:
        try:
            return snapshots.request(store, reason, rank)[1], True
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
            snapshots.ack(store, info["seq"])
            snapshots.wait_acks(store, info["seq"], tracer.world_size)
        except Exception:  # noqa: BLE001
            pass


def local_seq(box: BlackBox) -> int:
    """A snapshot's number where the store cannot be asked: after the trace dir's last."""
    try:
        taken = snapshots.snapshots(snapshots.snapshot_root(box.out))
    except OSError:
        taken = []
    return max([box.taken] + [s for s, _ in taken]) + 1
