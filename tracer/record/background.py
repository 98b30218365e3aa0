"""The recorder's two daemon threads, one of each per process, started on first use: the resolver writes CUDA
summaries once the device has them, the CUDA watcher ends CUDA ops when the device has run them. Neither ever
blocks the training thread or synchronizes the device from it."""

from __future__ import annotations

import threading
import time

from ..format import SUMMARY


class _Resolver(threading.Thread):
    """Resolves CUDA summaries off the training thread and writes them as "s" records."""

    def __init__(self):
        super().__init__(name="disttrace-summaries", daemon=True)
        self.items: list = []
        self.cv = threading.Condition()

    def add(self, write, ev_id, which, pending) -> None:
        """write(record): the tracer's recorder; pending: a summaries.Pending of event ev_id's `which` side."""
        with self.cv:
            self.items.append((write, ev_id, which, pending))
            self.cv.notify()

    def run(self) -> None:
        while True:
            with self.cv:
                while not self.items:
                    self.cv.wait()
                write, ev_id, which, pending = self.items.pop(0)
            try:
                write({"k": SUMMARY, "i": ev_id, "which": which, "s": pending.resolve()})
            except Exception:  # noqa: BLE001
                pass

    def drain(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self.items and time.monotonic() < deadline:
            time.sleep(0.01)


class _CudaWatcher(threading.Thread):
    """Ends CUDA ops when their Work reports completion (non-blocking event queries, never a device sync)."""

    def __init__(self):
        super().__init__(name="disttrace-cuda-watch", daemon=True)
        self.items: list = []
        self.passing: list = []  # the items this pass took out of `items`, until it puts back the unfinished
        self.dropped: list = []  # (completion, which) let go of during this pass: not put back
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.idle = False  # waiting on `wake` for an op (set and cleared under the lock)

    def add(self, completion, ev, work) -> None:
        """completion: the tracer's completion.Completion, which ends ev when work is completed. The watcher is
        woken only from its wait for ops: one that is passing or sleeping between passes sees the op at its next
        pass (a wake-up at each op cost the job's thread about as much as the op itself: docs/PERFORMANCE.md, "On an
        H200")."""
        with self.lock:
            self.items.append((completion, ev, work))
            idle, self.idle = self.idle, False
        if idle:
            self.wake.set()

    def run(self) -> None:
        while True:
            with self.lock:
                self.idle = idle = not self.items
            if idle:
                self.wake.wait()
                self.wake.clear()
            if self._pass():
                time.sleep(0.0005 if len(self.items) < 64 else 0.002)

    def _pass(self) -> bool:
        """One look at every op watched; True if some are still running. (A method of its own so that nothing
        of the pass, a Work above all, stays referenced from the thread's frame while it sleeps.)"""
        with self.lock:
            items, self.items = self.items, []
            self.passing = items
        keep = []
        now = time.monotonic_ns()
        for completion, ev, work in items:
            try:
                if ev.ended:
                    continue
                if work.is_completed() or (ev.stream_end is not None and ev.stream_end.is_completed()):
                    completion.device_done(ev, now)  # a failure surfaces at wait() or in the watchdog
                else:
                    keep.append((completion, ev, work))
            except Exception as e:  # noqa: BLE001 - e.g. the process group is gone: stop watching it
                completion.complete(ev, e, now)
        with self.lock:
            if self.dropped:  # let go of while this pass held them
                keep = [item for item in keep if not any(_picked(item, c, which) for c, which in self.dropped)]
                self.dropped = []
            self.items[:0] = keep
            self.passing = []
        return bool(keep)

    def let_go(self, completion, which, timeout_s: float = 0.2) -> None:
        """Stop following the ops of `completion` that `which(ev)` picks (their group goes, tracing ends): those
        done within timeout_s end as the watcher ends them; those still running stay unfinished in the trace,
        and their Works are let go of (a gloo Work kept past destroy_process_group can abort the process at
        exit)."""
        def mine(items) -> bool:
            return any(_picked(item, completion, which) for item in items)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if not (mine(self.items) or mine(self.passing)):
                    break
            time.sleep(0.001)
        with self.lock:
            self.items = [item for item in self.items if not _picked(item, completion, which)]
            if mine(self.passing):  # the watcher holds them in its pass: it must not put them back
                self.dropped.append((completion, which))


def _picked(item: tuple, completion, which) -> bool:
    """Whether a watched (completion, event, work) is one of `completion`'s that `which(event)` picks."""
    return item[0] is completion and which(item[1])


_THREADS: dict = {}  # the one background thread of each kind, started on first use


def _background(kind):
    thread = _THREADS.get(kind)
    if thread is None:
        thread = _THREADS[kind] = kind()
        thread.start()
    return thread


def resolver() -> _Resolver:
    return _background(_Resolver)


def cuda_watcher() -> _CudaWatcher:
    return _background(_CudaWatcher)


def let_go_of_cuda_ops(completion, which) -> None:
    """The CUDA watcher's let_go, if the watcher runs."""
    w = _THREADS.get(_CudaWatcher)
    if w is not None:
        w.let_go(completion, which)


def drain_summaries() -> None:
    """Wait a moment for the CUDA summaries still being resolved (a trace closes), if the resolver runs."""
    r = _THREADS.get(_Resolver)
    if r is not None:
        r.drain()
