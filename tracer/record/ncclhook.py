"""The device's duration of NCCL collectives, from PyTorch's own completion hook:
ProcessGroup._register_on_completion_hook.

ProcessGroupNCCL's watchdog finds each Work's CUDA end event done and hands the Work to the group's hook thread
("pt_nccl_runhook"), which calls the hook with a WorkInfo: op_type, seq (the Work's sequence number: the group's
collective counter for collectives, its separate P2P counter for send/recv), time_started, time_finished and
active_duration (the NCCL kernel's start -> end CUDA events). Only active_duration is taken: time_finished is
when the watchdog looked (every ~100 ms), not when the op ended, so every CUDA op ends when background.py's CUDA
watcher sees it done, and the end record waits for the hook's duration (DeviceEnds). What that costs and what it
misses is in docs/ARCHITECTURE.md ("How a CUDA op ends"): registering requires collective timing (a start event
per op), the hook needs the GIL, only one hook per group can be registered (a job's own is then called by
disttrace's, so that registering it still succeeds), and P2P and coalesced Works carry a seq that the begin record
cannot be matched to: those ops, and every op of a group without the hook, end without a device duration (also
with DISTTRACE_NCCL_HOOK=0).

The hook runs on a C++ thread: an exception escaping it makes ProcessGroupNCCL abort its communicators. Its body
is one try/except around a few dict operations and the recorder's end path.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

from . import current

ENV = "DISTTRACE_NCCL_HOOK"  # "0": never register the hook, every CUDA op takes the watcher
EARLY_LIMIT = 256  # completions kept for a Work whose op was not yet handed to us (the hook ran first)

_OpType = getattr(torch._C._distributed_c10d, "OpType", None)
# the hook's op_type -> the op name of the begin record (the ops whose Work carries the collective seq)
_OPS: dict = {}
_P2P: frozenset = frozenset()
if _OpType is not None:
    for _names, _op in ((("BROADCAST",), "broadcast"), (("ALLREDUCE", "ALLREDUCE_COALESCED"), "all_reduce"),
                        (("REDUCE",), "reduce"),
                        (("ALLGATHER", "_ALLGATHER_BASE", "ALLGATHER_COALESCED"), "all_gather"),
                        (("GATHER",), "gather"), (("SCATTER",), "scatter"),
                        (("REDUCE_SCATTER", "_REDUCE_SCATTER_BASE", "REDUCE_SCATTER_TENSOR_COALESCED"),
                         "reduce_scatter"),
                        (("ALLTOALL", "ALLTOALL_BASE"), "all_to_all"), (("BARRIER",), "barrier")):
        for _name in _names:
            if hasattr(_OpType, _name):
                _OPS[getattr(_OpType, _name)] = _op
    _P2P = frozenset(getattr(_OpType, n) for n in ("SEND", "RECV", "RECVANYSOURCE") if hasattr(_OpType, n))

_ATTACHED: set = set()  # id() of the ProcessGroups whose hook is ours (one per group, for the process's life)
_JOB_HOOKS: dict = {}   # id(pg) -> the job's own completion hooks on those groups, called after ours
_REGISTER = None        # ProcessGroup._register_on_completion_hook as PyTorch defines it (once we replaced it)


class DeviceEnds:
    """One group's CUDA collectives waiting for the hook's device duration: seq -> Event.

    The hook does not say when an op ended: ProcessGroupNCCL's watchdog finds Works done every 100 ms or so and
    its time_finished is that moment (a short all_reduce's then reads as ending long after it did). So the end
    time is the CUDA watcher's (background.py: Work.is_completed() polled every half millisecond), and the hook
    adds the NCCL kernel's duration: the end record is written once both are known (Completion.device_done);
    an op the hook never reports is ended by flush() when its group goes or tracing ends. Touched by the
    issuing threads (claim), the watcher and the hook thread, all holding the GIL; the lock makes each one's
    check-and-set one step."""

    def __init__(self):
        self.table: dict = {}
        self.early: dict = {}   # seq -> (op, device ns): the hook reported it before the op was claimed
        self.last = -1          # the highest seq claimed
        self.lock = threading.Lock()

    def claim(self, ev) -> None:
        """ev (a CUDA op just issued) will get its device duration from the hook, if its seq can be matched:
        not a P2P op (its Work counts another seq), not an op without a seq or with one already seen (an op
        inside a coalescing block)."""
        seq = ev.seq
        op = ev.info[0] if ev.info else None
        if type(seq) is not int or op in ("send", "recv") or op is None:
            return
        with self.lock:
            if seq <= self.last or seq in self.table:
                return
            self.last = seq
            early = self.early.pop(seq, None)
            if early is None:
                self.table[seq] = ev
                ev.hooked = self
                return
        if _same_op(early[0], op):
            ev.dev = early[1]

    def awaits(self, ev, t: int) -> bool:
        """The watcher found ev done on the device at t: True if the hook's duration is still to come (the end
        is written when it comes, at t), False if ev can be ended now."""
        with self.lock:
            if ev.hooked is not self:
                return False
            ev.done_t = t
            return True

    def done(self, completion, info) -> None:
        """The hook's call for one completed Work (on the hook thread)."""
        kind = info.op_type
        if kind in _P2P:
            return  # its seq counts P2P ops: nothing recorded at begin matches it
        seq = info.seq
        op = _OPS.get(kind)
        dev = _ns(getattr(info, "active_duration", None))
        with self.lock:
            hit = self.table.pop(seq, None) if op is not None else None
            if op is not None and hit is None and seq > self.last:
                if len(self.early) >= EARLY_LIMIT:
                    self.early.pop(next(iter(self.early)))
                self.early[seq] = (op, dev)
            # NCCL runs a group's ops in order: every op claimed with a lower seq is done too, and its duration
            # will not come (a coalesced Work's seq may be a P2P one)
            stale = [s for s in self.table if s < seq or (op is None and s == seq)] if self.table else ()
            ends = [(self.table.pop(s), None) for s in stale]
            if hit is not None:
                ends.append((hit, dev if _same_op(op, hit.info[0]) else None))
            ready = self._let_go(ends)
        _end(completion, ready)

    def flush(self, completion) -> None:
        """No more durations will come (the group goes, tracing ends): end the ops done on the device without
        one; the watcher ends the others."""
        with self.lock:
            ready = self._let_go([(ev, None) for ev in self.table.values()])
            self.table = {}
        _end(completion, ready)

    @staticmethod
    def _let_go(ends) -> list:
        """(Event, device ns or None) pairs the hook will not report again (under the lock): those the watcher
        saw done are returned, to be ended now; the others keep their duration for the watcher to end them."""
        ready = []
        for ev, dev in ends:
            ev.hooked = None
            if ev.done_t is None:
                ev.dev = dev
            else:
                ready.append((ev, dev))
        return ready

    def settle(self, timeout_s: float = 0.3) -> None:
        """Give the hook a moment (its watchdog looks every 100 ms) to report the ops still waiting for it."""
        deadline = time.monotonic() + timeout_s
        while self.table and time.monotonic() < deadline:
            time.sleep(0.005)


def _end(completion, ready) -> None:
    for ev, dev in ready:  # (outside the lock: the recorder's end path)
        completion.complete(ev, None, ev.done_t, dev=dev)


def _same_op(reported, recorded) -> bool:
    # NCCL runs a barrier as an all_reduce of one element
    return reported == recorded or (recorded == "barrier" and reported == "all_reduce")


def _ns(td) -> int | None:
    if isinstance(td, timedelta):
        return (td.days * 86400 + td.seconds) * 1_000_000_000 + td.microseconds * 1000
    return None


def _make_hook(pg_id: int):
    def hook(info) -> None:
        # called by C++ on the group's hook thread: nothing of ours may escape
        try:
            t = current.tracer
            g = t.groups.get(pg_id) if t is not None else None
            ends = g.hook if g is not None else None
            if ends is not None:
                ends.done(t.completion, info)
        except BaseException:  # noqa: BLE001
            pass
        for job_hook in _JOB_HOOKS.get(pg_id, ()):  # the job's, as PyTorch would have called them (errors too)
            job_hook(info)
    return hook


def _register_for_job(pg, hook):
    """ProcessGroup._register_on_completion_hook while disttrace's hook holds some groups: PyTorch allows one hook
    per group, so on those the job's is called by ours, after it, and registering it succeeds as untraced."""
    if id(pg) in _ATTACHED:
        _JOB_HOOKS.setdefault(id(pg), []).append(hook)
        return None
    return _REGISTER(pg, hook)


def _share_registration(cls) -> None:
    """Make the job's own registrations go through _register_for_job (once per process)."""
    global _REGISTER
    if _REGISTER is None:
        _REGISTER = cls._register_on_completion_hook
        cls._register_on_completion_hook = _register_for_job


def _timing_on() -> bool:
    for name in ("TORCH_NCCL_ENABLE_TIMING", "NCCL_ENABLE_TIMING"):
        if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "y", "on"):
            return True
    return False


def attach(pg) -> DeviceEnds | None:
    """A DeviceEnds for the group if its CUDA ops can end through the completion hook (registered now, or by a
    tracer before this one), else None. Called once per group, before its first traced op is issued."""
    if os.environ.get(ENV, "1").strip() == "0" or not _OPS:
        return None
    try:
        nccl = getattr(dist, "ProcessGroupNCCL", None)
        if nccl is None or not hasattr(pg, "_register_on_completion_hook"):
            return None
        backend = pg._get_backend(torch.device("cuda"))
        if not isinstance(backend, nccl):
            return None
        if getattr(pg, "_has_hooks", lambda: False)():
            return DeviceEnds() if id(pg) in _ATTACHED else None  # the job's own hook: one per group
        # getDuration() raises for a Work made without timing, and the hook thread then aborts the group: turn
        # timing on only where no Work of this group can predate it
        if not _timing_on():
            if pg._get_sequence_number_for_group() != 0:
                return None
            enable = getattr(backend, "_enable_collectives_timing", None) or pg._enable_collectives_timing
            enable()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "OnCompletion hook will be deprecated in favor of Flight Recorder"
            pg._register_on_completion_hook(_make_hook(id(pg)))
        _ATTACHED.add(id(pg))
        _share_registration(type(pg))
        return DeviceEnds()
    except Exception:  # noqa: BLE001 - the watcher then
        return None


def drain(groups, timeout_s: float = 2.0) -> None:
    """Before the interpreter exits without destroy_process_group: let the hooked groups' hook threads finish
    the Works they hold while Python is alive (a hook run during finalization cannot take the GIL). Waits at
    most timeout_s, on a daemon thread (ProcessGroupNCCL's wait has no timeout)."""
    pgs = [g.pg for g in groups if getattr(g, "hook", None) is not None and g.pg is not None]
    if not pgs:
        return

    def run() -> None:
        for pg in pgs:
            try:
                pg._wait_for_pending_works()
            except Exception:  # noqa: BLE001
                pass
    th = threading.Thread(target=run, name="disttrace-nccl-drain", daemon=True)
    th.start()
    th.join(timeout_s)
