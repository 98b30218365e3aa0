"""`disttrace run --memory`: the bytes a rank holds, by kind, sampled at each collective and at the peaks between.

A TorchDispatchMode (the idea of torch.distributed._tools.mem_tracker, kept lean: no per-module state, so nothing
to reset between iterations) sees every op's outputs. Each new storage is counted once, under a kind, and uncounted
when it is freed (a weak reference's callback); on CPU there are no allocator statistics, so this is the only way
to see the bytes. Kinds (format.MEM_KINDS):
- activations: made in the forward (anything outside backward and the optimizer's step),
- temporaries: made in backward or inside an optimizer's step,
- comm: a collective's tensors (DDP's buckets, FSDP2's all-gather and reduce-scatter buffers), upgraded at the c10d op,
- params, grads, optimizer: what the job's modules and optimizers hold (memory_model.py finds them as the job makes
  them); a storage is re-kinded only upward (params > grads > optimizer > comm > the rest), so that a gradient that
  is a view into DDP's bucket (gradient_as_bucket_view) is a gradient, and a parameter broadcast at start a parameter.
Storages made before tracing started are counted when first seen as a parameter, gradient or optimizer state.

Samples ("m" records, docs/FORMAT.md "Memory"): at every c10d op before it runs (with the process's RSS and, on
CUDA, the caching allocator's counters, read, never reset), the running peak since the sample before (its op and
the user's line), around each optimizer step, and at the end. The job's own statistics and settings are never
touched. Never raises into the job: a failure stops the memory recording with one warning.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode, _pop_mode, _push_mode

from ..format import (MEM_AT_END, MEM_AT_OP, MEM_AT_PEAK, MEM_KINDS, MEM_META, MEM_SAMPLE, MEM_SUFFIX,
                      MEM_VERSION, RANK_FILE_SUFFIX)
from . import callsite, memory_model
from .memory_model import local
from .recorder import Recorder

PARAMS, GRADS, OPTIMIZER, ACTIVATIONS, TEMPORARIES, COMM = range(len(MEM_KINDS))
# which kind a storage may be re-kinded to: only to one of higher priority
_PRIORITY = {PARAMS: 5, GRADS: 4, OPTIMIZER: 3, COMM: 2, ACTIVATIONS: 1, TEMPORARIES: 1}
_Tensor = torch.Tensor
_graph_task = torch._C._current_graph_task_id  # -1 outside autograd's backward


class _Ref(weakref.ref):
    """A counted storage: its bytes and kind; its callback uncounts it."""

    __slots__ = ("nbytes", "kind", "key")


def op_name(func) -> str:
    """An op as the report names it: "aten.mm", "c10d.allreduce_" (its overload left out where it is the default)."""
    name = str(func)
    return name[:-8] if name.endswith(".default") else name


class Tracker(TorchDispatchMode):
    """The running bytes by kind of one rank, written as samples into rank-….mem."""

    def __init__(self, rec: Recorder):
        super().__init__()
        self.rec = rec
        self.totals = [0] * len(MEM_KINDS)
        self.total = 0
        self.live: dict[int, _Ref] = {}   # id(storage) -> its _Ref
        self.params: list[weakref.ref] = []  # the job's parameters (and buffers), as memory_model.py finds them
        self._param_ids: set[int] = set()
        self.in_opt = 0                   # optimizer steps running (ZeRO's step runs its local optimizer's inside)
        self.peak = 0                     # the running peak since the last sample, and where it was
        self.peak_at: tuple | None = None
        self.cuda = False
        self._statm = os.open("/proc/self/statm", os.O_RDONLY) if os.path.exists("/proc/self/statm") else -1
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._dtensor = None
        self.broken = False               # a failure of ours: the mode passes every op on untouched
        # The counters (totals, total, live, peak) change under _lock only: count() runs on the autograd engine's
        # device threads too (the mode is in the thread-local state they inherit), and its look-up and insert of a
        # storage is a check-then-act that two threads can interleave (a storage counted twice, one _Ref orphaned:
        # bytes never uncounted). A free (a weak reference's callback) runs on whatever thread drops the storage,
        # at any moment, a GC pass inside our own locked section included: it only queues (deque.append is atomic),
        # and _settle() uncounts the queue under the lock before the counters are read.
        self._lock = threading.RLock()
        self._frees: collections.deque = collections.deque()

    # -- counting --------------------------------------------------------------------------------------
    def count(self, t, kind: int) -> None:
        """Count t's storage under `kind`, or re-kind it upward if it is counted already (from any thread)."""
        with self._lock:
            self._count(t, kind)

    def _count(self, t, kind: int) -> None:
        """count(), the lock held."""
        t = local(t)
        if t is None or t.device.type == "meta":
            return
        st = t.untyped_storage()
        key = id(st)
        ref = self.live.get(key)
        if ref is not None and ref() is st:
            if ref.kind != kind and _PRIORITY[kind] > _PRIORITY[ref.kind]:
                self.totals[ref.kind] -= ref.nbytes
                self.totals[kind] += ref.nbytes
                ref.kind = kind
            return
        ref = _Ref(st, self._freed)
        ref.nbytes, ref.kind, ref.key = st.nbytes(), kind, key
        self.live[key] = ref
        self.totals[kind] += ref.nbytes
        self.total += ref.nbytes

    def _freed(self, ref: _Ref) -> None:
        """A counted storage is freed (any thread, any moment): queued, never blocking; _settle uncounts it."""
        self._frees.append(ref)

    def _settle(self) -> None:
        """Uncount the storages freed since the last call (the lock held). Where a storage made since has a freed
        one's id, live holds the new one's _Ref: it stays."""
        frees = self._frees
        while frees:
            ref = frees.popleft()
            if self.live.get(ref.key) is ref:
                del self.live[ref.key]
            self.totals[ref.kind] -= ref.nbytes
            self.total -= ref.nbytes

    def resized(self, st) -> None:
        """A storage's size changed in place (FSDP2 frees and re-allocates its unsharded parameters so)."""
        with self._lock:
            self._settle()
            ref = self.live.get(id(st))
            if ref is not None and ref() is st:
                n = st.nbytes()
                self.totals[ref.kind] += n - ref.nbytes
                self.total += n - ref.nbytes
                ref.nbytes = n
                self._maybe_peak("resize_")

    def add_param(self, p) -> None:
        """A parameter (or buffer) of the job's: counted as such at every sample from now on."""
        with self._lock:
            if id(p) not in self._param_ids:
                self._param_ids.add(id(p))
                self.params.append(weakref.ref(p))
            self._count(p, PARAMS)

    def _rekind_params(self) -> None:
        """Parameters and their gradients as they are now (a gradient appears in backward, goes at zero_grad)."""
        alive = []
        for w in self.params:
            p = w()
            if p is None:
                continue
            alive.append(w)
            self._count(p, PARAMS)
            g = p.grad
            if g is not None:
                self._count(g, GRADS)
        if len(alive) != len(self.params):
            self.params = alive
            self._param_ids = {id(w()) for w in alive}

    # -- the dispatch mode -----------------------------------------------------------------------------
    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """torch.compile compiles as untraced: a non-infra mode on the stack made Dynamo skip every frame (the job
        ran eager, silently). With this, the mode is off while Dynamo, AOT autograd and the backend trace (their
        fake tensors are never counted) and on while the compiled code runs: its calls into aten are seen (a buffer
        a backend's generated code allocated and filled without one would not be: docs/ARCHITECTURE.md)."""
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self._dtensor is None:
            self._dtensor = sys.modules.get("torch.distributed.tensor") and getattr(
                sys.modules["torch.distributed.tensor"], "DTensor", None)
        if self._dtensor is not None and self._dtensor in types:
            return NotImplemented  # DTensor runs its local ops, which come here as plain tensors
        if self.broken:
            return func(*args, **(kwargs or {}))
        namespace = func.namespace
        if namespace == "c10d":
            self._guard(self._at_collective, func, args)
        res = func(*args, **(kwargs or {}))
        self._guard(self._outputs, func, namespace, res)
        return res

    def _guard(self, fn, *args) -> None:
        """fn(*args); a failure stops the counting (stop() takes the mode out), never reaching the job."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            self.broken = True
            _warn(self.rec.path, e)

    def _outputs(self, func, namespace: str, res) -> None:
        kind = TEMPORARIES if self.in_opt or _graph_task() != -1 else ACTIVATIONS
        with self._lock:
            self._settle()
            before = self.total
            if type(res) is _Tensor:
                self._count(res, kind)
            elif isinstance(res, (tuple, list)):
                self._count_all(res, COMM if namespace == "_c10d_functional" else kind)
            self._settle()
            if self.total > self.peak and self.total > before:
                self._maybe_peak(func)

    def _maybe_peak(self, func) -> None:
        """(the lock held: the peak's kinds are the counters of the same moment)"""
        if self.total > self.peak:
            self.peak = self.total
            self.peak_at = (time.monotonic_ns(), op_name(func), callsite.walk(2)[0], list(self.totals))

    def _count_all(self, xs, kind: int, depth: int = 0) -> None:
        """Count the tensors in xs and in its lists, two levels down (a c10d op's list of lists of outputs)."""
        for x in xs:
            if isinstance(x, _Tensor):
                self._count(x, kind)
            elif depth < 2 and isinstance(x, (list, tuple)):
                self._count_all(x, kind, depth + 1)

    def _at_collective(self, func, args) -> None:
        with self._lock:
            self._count_all(args, COMM)
            self.sample(MEM_AT_OP, op_name(func))

    # -- samples ---------------------------------------------------------------------------------------
    def sample(self, at: str, op: str | None = None) -> None:
        """Write the peak since the last sample (where it was above what is held now), then this sample."""
        with self._lock:
            self._sample(at, op)

    def _sample(self, at: str, op: str | None) -> None:
        self._settle()
        self._rekind_params()
        self._settle()
        now = time.monotonic_ns()
        if self.peak_at is not None and self.peak > self.total:
            t, pop, site, totals = self.peak_at
            self.rec.write({"k": MEM_SAMPLE, "t": t, "at": MEM_AT_PEAK, "op": pop, "site": site, "b": totals})
        rec = {"k": MEM_SAMPLE, "t": now, "at": at, "op": op, "b": list(self.totals), "rss": self._rss()}
        if self.cuda:
            rec["dev"] = _cuda_counters()
        self.rec.write(rec)
        self.peak, self.peak_at = self.total, None

    def _rss(self) -> int | None:
        if self._statm < 0:
            return None
        try:
            return int(os.pread(self._statm, 128, 0).split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self._statm >= 0:
            os.close(self._statm)
            self._statm = -1


def _cuda_counters() -> dict | None:
    """The caching allocator's counters (read only: the job's peak statistics are never reset) and the device's use:
    allocated, reserved, the allocator's peak so far, and the device's used and total bytes (what the allocator does
    not hold is outside it: other processes, the CUDA context, NCCL's buffers)."""
    try:
        free, total = torch.cuda.mem_get_info()
        return {"alloc": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
                "max_alloc": torch.cuda.max_memory_allocated(), "used": total - free, "total": total}
    except Exception:  # noqa: BLE001 - a device that cannot say: the sample has the tracker's bytes only
        return None


# -- the lifecycle: hooks.py starts and stops it with the tracer --------------------------------------------------
_tracker: Tracker | None = None
_orig_resize = None


def start(tracer, memory_step: int | None = None) -> None:
    """Start recording memory beside `tracer`'s rank file (rank-….mem), on this thread (the one that initialized
    the process group: the training loop's). Never raises."""
    global _tracker, _orig_resize
    if _tracker is not None:
        return
    try:
        path = tracer.path[: -len(RANK_FILE_SUFFIX)] + MEM_SUFFIX
        rec = Recorder(path)
        tracker = Tracker(rec)
        tracker.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        rec.write({"k": MEM_META, "v": MEM_VERSION, "rank": tracer.rank, "world_size": tracer.world_size,
                   "kinds": list(MEM_KINDS), "step": memory_step, "t": time.monotonic_ns(),
                   "device": "cuda" if tracker.cuda else "cpu"})
        _orig_resize = torch.UntypedStorage.resize_

        def resize_(st, size):
            result = _orig_resize(st, size)
            t = _tracker
            if t is not None and not t.broken:
                t._guard(t.resized, st)
            return result

        torch.UntypedStorage.resize_ = resize_
        memory_model.install(tracker)
        _tracker = tracker
        _push_mode(tracker)
        tracker.sample(MEM_AT_OP, "start")
    except Exception as e:  # noqa: BLE001 - never break the job
        _warn(tracer.path, e)
        stop()


def stop() -> None:
    """The last sample, then everything taken out again. Never raises."""
    global _tracker, _orig_resize
    tracker, _tracker = _tracker, None
    if tracker is None:
        return
    try:
        memory_model.uninstall()
        if _get_current_dispatch_mode() is tracker:
            _pop_mode()
        if _orig_resize is not None:
            torch.UntypedStorage.resize_ = _orig_resize
            _orig_resize = None
        tracker.sample(MEM_AT_END, "end")
    except Exception:  # noqa: BLE001
        pass
    finally:
        tracker.rec.close()
        tracker.close()


def current() -> Tracker | None:
    return _tracker


def _warn(path: str, e: BaseException) -> None:
    from .recorder import warn_once

    warn_once(os.path.dirname(path), f"disttrace: memory recording stopped: {type(e).__name__}: {e}; the job and "
                                     f"its trace go on")


__all__ = ["Tracker", "start", "stop", "current", "PARAMS", "GRADS", "OPTIMIZER", "ACTIVATIONS", "TEMPORARIES", "COMM"]
