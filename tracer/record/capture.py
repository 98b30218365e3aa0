"""The per-process tracer: turns each c10d operation into begin / wait / end records.

Called from the dispatcher kernels of hooks.py. The hot path (`begin`, `complete`) does the least it can:
read a few tensor attributes, walk the stack once (callsite.py), build one small dict, append it through the
recorder. Decoding happens in the reader, later.

Record kinds written here (see docs/FORMAT.md): "meta", "group", "clock", "b" (begin: everything known at issue),
"w" (the user's wait() on an async op), "e" (end: completion or error), "s" (a CUDA summary resolved later).

When does an op end? gloo runs collectives on its own threads and returns a Work at once:
- a synchronous Python API call (all_reduce(async_op=False), send, recv, ...) waits on that Work right away on
  the same thread: the end is when that wait() returns (hooks.py wraps Work.wait);
- anything else (async_op=True, isend/irecv, DDP's reducer, functional collectives, every CUDA op) ends when
  the Work's future completes (a callback; it never blocks), and the user's wait() is recorded apart;
- gloo's send/recv Works have no future: their end is the return of wait().
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import threading
import time
import weakref
from threading import get_ident
from time import monotonic_ns

import orjson
import torch
import torch.distributed as dist

from ..format import FORMAT_VERSION, RANK_FILE_SUFFIX, rank_file_stem
from . import callsite, summaries
from .recorder import Recorder

_Tensor = torch.Tensor

PENDING_LIMIT = 4096  # finished async ops kept for a wait() that may still come
SYNC_P2P_APIS = frozenset({"send", "recv"})


class Spec:
    """Where an op's arguments are, by position in its c10d schema."""

    __slots__ = ("name", "op", "inp", "out", "pg", "root", "peer", "tag", "async_arg", "inplace")

    def __init__(self, name, op, pg, inp=None, out=None, root=None, peer=None, tag=None, async_arg=None,
                 inplace=False):
        self.name, self.op, self.pg, self.inp, self.out = name, op, pg, inp, out
        self.root, self.peer, self.tag, self.async_arg, self.inplace = root, peer, tag, async_arg, inplace


# c10d::<name> -> how to read it. Positions follow the schemas of torch.ops.c10d (checked at install).
SPECS = {s.name: s for s in (
    Spec("allreduce_", "all_reduce", pg=1, inp=0, async_arg=4, inplace=True),
    Spec("allreduce_coalesced_", "all_reduce", pg=1, inp=0, async_arg=3, inplace=True),
    Spec("broadcast_", "broadcast", pg=1, inp=0, root=2, async_arg=4, inplace=True),
    Spec("reduce_", "reduce", pg=1, inp=0, root=3, async_arg=5, inplace=True),
    Spec("allgather_", "all_gather", pg=2, inp=1, out=0, async_arg=3),
    Spec("_allgather_base_", "all_gather", pg=2, inp=1, out=0, async_arg=3),
    Spec("allgather_coalesced_", "all_gather", pg=2, inp=1, out=0, async_arg=3),
    Spec("allgather_into_tensor_coalesced_", "all_gather", pg=2, inp=1, out=0, async_arg=3),
    Spec("reduce_scatter_", "reduce_scatter", pg=2, inp=1, out=0, async_arg=4),
    Spec("_reduce_scatter_base_", "reduce_scatter", pg=2, inp=1, out=0, async_arg=4),
    Spec("reduce_scatter_tensor_coalesced_", "reduce_scatter", pg=2, inp=1, out=0, async_arg=4),
    Spec("alltoall_", "all_to_all", pg=2, inp=1, out=0, async_arg=3),
    Spec("alltoall_base_", "all_to_all", pg=2, inp=1, out=0, async_arg=5),
    Spec("barrier", "barrier", pg=1, async_arg=3),
    Spec("monitored_barrier_", "barrier", pg=1),
    Spec("gather_", "gather", pg=2, inp=1, out=0, root=3, async_arg=4),
    Spec("scatter_", "scatter", pg=2, inp=1, out=0, root=3, async_arg=4),
    Spec("send", "send", pg=1, inp=0, peer=2, tag=3),
    Spec("recv_", "recv", pg=1, out=0, peer=2, tag=3),
    Spec("recv_any_source_", "recv", pg=1, out=0, tag=2),
)}

# The default api name of an op issued without a torch.distributed Python call on the stack
_C10D_TO_API = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce_coalesced", "broadcast_": "broadcast",
    "reduce_": "reduce", "allgather_": "all_gather", "_allgather_base_": "all_gather_into_tensor",
    "allgather_coalesced_": "all_gather_coalesced", "allgather_into_tensor_coalesced_":
    "all_gather_into_tensor_coalesced", "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_":
    "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor_coalesced",
    "alltoall_": "all_to_all", "alltoall_base_": "all_to_all_single", "barrier": "barrier",
    "monitored_barrier_": "monitored_barrier", "gather_": "gather", "scatter_": "scatter", "send": "isend",
    "recv_": "irecv", "recv_any_source_": "irecv",
}


class Group:
    __slots__ = ("gidx", "name", "ranks", "next_seq", "pg", "gloo")

    def __init__(self, gidx, name, ranks, pg, gloo):
        self.gidx, self.name, self.ranks, self.pg = gidx, name, ranks, pg
        self.next_seq = 0
        self.gloo = gloo  # the CPU backend whose methods fastpath.py calls for this group's CPU ops, or None


def _gloo_backend(pg):
    """The group's CPU backend if it is exactly ProcessGroupGloo (a subclass may override the methods that
    fastpath.py calls), else None."""
    try:
        backend = pg._get_backend(torch.device("cpu"))
    except Exception:  # noqa: BLE001 - no CPU backend, or an older torch
        return None
    gloo = getattr(dist, "ProcessGroupGloo", None)
    return backend if gloo is not None and type(backend) is gloo else None


class _ThreadSlot(threading.local):
    sync = None  # the synchronous op this thread issued last and waits on next (Work.wait ends it)


class Event:
    """An op in flight. `sync`: ends at the next wait() on this thread; `waited`: the user called wait().

    Defaults live on the class: an op sets only what differs (one Event per op is made on the hot path)."""

    tensors = None      # what to summarize at the end (summaries on)
    ended = False
    cuda = False
    work = None         # the kernel path's own Python Work while the op is in flight (see Tracer.track)
    work_ref = None     # a weak reference to the Work: the job's own from the start, ours once the op finished
    peer_any = False    # a recv from any source: the end record says which
    seq = None          # the backend's sequence number for the op
    out_ptr = 0         # output data_ptr, for functional collectives' wait_tensor
    watched = False     # something will tell us when it completes (a future callback, the CUDA watcher)
    info = None         # (op, group, group_seq, start, thread) for the watchdog

    def __init__(self, id, sync, group):
        self.id, self.sync, self.group = id, sync, group

    def held_work(self):
        """The op's Work if it is still alive, held strongly or weakly; else None."""
        if self.work is not None:
            return self.work
        return self.work_ref() if self.work_ref is not None else None


def _global(g: Group, local: int) -> int:
    """A group-local rank as a global one."""
    return g.ranks[local] if 0 <= local < len(g.ranks) else local


def _first_tensor(obj):
    while isinstance(obj, (list, tuple)):
        if not obj:
            return None
        obj = obj[0]
    return obj if isinstance(obj, torch.Tensor) else None


def _nbytes(obj) -> tuple[int, object]:
    """Total bytes of the tensors in obj and the first tensor (for dtype and shape)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size(), obj
    total, first = 0, None
    for x in obj or ():
        if isinstance(x, torch.Tensor):
            total += x.numel() * x.element_size()
            first = first if first is not None else x
        else:
            for t in x:
                total += t.numel() * t.element_size()
                first = first if first is not None else t
    return total, first


class Tracer:
    """One per traced process, created when the process group is initialized."""

    def __init__(self, out_dir: str, mode: str = "off"):
        self.mode = mode  # summaries: off | stats | full
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        os.makedirs(out_dir, exist_ok=True)
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        name = rank_file_stem(self.rank, self.host, self.pid, restart)
        self.path = os.path.join(out_dir, name + RANK_FILE_SUFFIX)
        n = 1
        while os.path.exists(self.path):  # a second trace() block in the same process
            n += 1
            self.path = os.path.join(out_dir, f"{name}-s{n}{RANK_FILE_SUFFIX}")
        self.rec = Recorder(self.path)
        self._ids = itertools.count()  # event ids (with DISTTRACE_TEST_FAULT_AT set: one that fails at that id)
        self._gidx = itertools.count()
        self._fixed: dict = {}  # begin_fields() key -> the fixed part of its begin record (see _fixed_part)
        self.groups: dict[int, Group] = {}
        self.pending: dict[int, Event] = {}   # id(python Work) -> event, for async ops the user may wait on
        self.by_ptr: dict[int, Event] = {}    # output data_ptr -> event, for functional collectives' wait_tensor
        self.watchdog = None
        self.backward_site = None  # the user's backward() line while a backward pass runs (hooks.py sets it)
        self.tls = _ThreadSlot()
        self.in_flight: dict[int, tuple] = {}  # event id -> (op, group, group_seq, start, thread) for the watchdog
        # event id -> Event, for the async ops whose future's callback will end them: the job may let go of the
        # Work (DDP does, once its reducer waited in C++) before gloo's thread has run the callback
        self.awaited: dict[int, Event] = {}
        # Fault injection for the tests that prove an internal failure never reaches the job
        fault = os.environ.get("DISTTRACE_TEST_FAULT_AT")
        if fault and fault.isdigit():
            self._ids = _failing_count(int(fault))
        self.rec.write({
            "k": "meta", "v": FORMAT_VERSION, "rank": self.rank, "world_size": self.world_size,
            "local_rank": int(os.environ.get("LOCAL_RANK", -1)), "host": self.host, "pid": self.pid,
            "backend": str(dist.get_backend()), "torch": torch.__version__, "summaries": mode,
            "mono_ns": time.monotonic_ns(), "wall_ns": time.time_ns(), "argv": sys.argv[:20],
            "restart": int(restart) if restart.isdigit() else 0,
        })

    # -- groups ----------------------------------------------------------------------------------
    def group(self, pg_script_obj) -> Group:
        """The Group of a c10d op's process-group argument (a ScriptObject)."""
        return self.group_of(dist.ProcessGroup.unbox(pg_script_obj))

    def group_of(self, pg) -> Group:
        """The Group of a Python ProcessGroup object."""
        g = self.groups.get(id(pg))
        return g if g is not None else self._new_group(pg)

    def _new_group(self, pg) -> Group:
        try:
            ranks = tuple(dist.get_process_group_ranks(pg))
        except Exception:  # noqa: BLE001 - a group torch does not know by that handle: use its size
            ranks = tuple(range(pg.size()))
        name = str(getattr(pg, "group_name", "") or "")
        desc = str(getattr(pg, "group_desc", "") or "")
        # pg is kept alive while it is ours (its id() is our key) and let go when the job destroys it (release)
        g = Group(next(self._gidx), name, ranks, pg, _gloo_backend(pg))
        self.groups[id(pg)] = g
        self.rec.write({"k": "group", "g": g.gidx, "name": name, "desc": desc, "ranks": list(ranks),
                        "backend": _backend_name(pg)})
        return g

    # -- the hot path ------------------------------------------------------------------------------
    def begin(self, spec: Spec, args: tuple) -> Event | None:
        """An op seen by the dispatcher kernel (c10d schema arguments; group-local root and peer); None when
        nothing is communicated: tensors without data (FakeTensorMode, the meta device) are not an op to record."""
        n = len(args)
        inp = args[spec.inp] if spec.inp is not None else None
        out = args[spec.out] if spec.out is not None else None
        first = _first_tensor(inp if inp is not None else out)
        if first is not None and first.is_meta:
            return None
        is_async = None
        if spec.async_arg is not None:
            is_async = bool(args[spec.async_arg]) if spec.async_arg < n else True
        return self.begin_fields(spec, self.group(args[spec.pg]), inp, out,
                                 args[spec.root] if spec.root is not None else None,
                                 args[spec.peer] if spec.peer is not None else None,
                                 args[spec.tag] if spec.tag is not None and spec.tag < n else None, is_async)

    def begin_fields(self, spec: Spec, g: Group, inp, out, root, peer, tag, is_async) -> Event:
        """Write the begin record of an op about to be issued, and return its Event. Called by begin() and by
        fastpath.py's ProcessGroup method wrapper; root, peer: group-local; is_async: the op's async flag (None:
        it has none)."""
        site, api, origin = callsite.walk(3)  # from the kernel or the wrapper outwards
        if site is None:
            # no Python frame of the user's: an autograd device thread (CUDA) runs this backward
            site = self.backward_site
        if api is None:
            api = origin or _C10D_TO_API[spec.name]
            in_backward = (origin or "").startswith("autograd.") or (origin is None and self.backward_site)
            if spec.name == "allreduce_" and in_backward and "torch.nn.parallel.distributed" in sys.modules:
                api = origin = "ddp.reducer_allreduce"  # DDP's C++ reducer, launched from backward()
        if is_async is None:
            is_async = api not in SYNC_P2P_APIS and spec.name != "monitored_barrier_"
        elif type(is_async) is not bool:
            is_async = bool(is_async)
        # Everything but the op's id, group_seq and time repeats from one call of a line to the next: that part
        # of the record is formatted once per distinct key (a third of the cost of formatting it each time).
        # The usual [tensor]'s bytes follow from its dtype and shape; other inputs' bytes are part of the key.
        if type(inp) is list and len(inp) == 1 and type(inp[0]) is _Tensor:
            first = inp[0]
            key = (spec, api, origin, site, g, root, peer, tag, first.dtype, first.shape, first.is_cuda, is_async,
                   get_ident())
            nbytes = -1
        else:
            nbytes, first = _nbytes(inp) if inp is not None else (0, None)
            if first is None and out is not None:
                out_bytes, first = _nbytes(out)
                if spec.op == "recv":
                    nbytes = out_bytes
            if first is None:
                key = (spec, api, origin, site, g, root, peer, tag, None, None, False, is_async, get_ident(), nbytes)
            else:
                key = (spec, api, origin, site, g, root, peer, tag, first.dtype, first.shape, first.is_cuda,
                       is_async, get_ident(), nbytes)
        fixed = self._fixed.get(key)
        if fixed is None:
            fixed = self._fixed_part(key, first.nbytes if nbytes < 0 else nbytes)
        head, collective, special = fixed
        ev = Event(next(self._ids), not is_async, g)
        if special:
            self._special(ev, key, inp, out)
        gs = None
        if collective:
            gs = g.next_seq
            g.next_seq = gs + 1
        if self.mode == "off":
            t = monotonic_ns()  # last: everything above is our own cost, not the op's
            if collective:
                line = b'%b%d,"gs":%d,"t":%d}\n' % (head, ev.id, gs, t)
            else:
                line = b'%b%d,"t":%d}\n' % (head, ev.id, t)
        else:
            line, t = self._with_summary(ev, head, gs, inp, out, spec.inplace)
        ev.info = (spec.op, g, gs, t, key[12])
        if not is_async or ev.cuda:
            # what the watchdog watches: ops the program is blocked in (a CPU async op only while waited on;
            # a CUDA op until the device completes it)
            self.in_flight[ev.id] = ev.info
        self.rec.write_raw(line)
        return ev

    @staticmethod
    def _special(ev: Event, key, inp, out) -> None:
        """What few ops need: a CUDA op, a recv from any source, a functional collective."""
        spec, api, peer, cuda, is_async = key[0], key[1], key[6], key[10], key[11]
        ev.cuda = cuda
        ev.peer_any = spec.op == "recv" and peer is None
        if is_async and api.startswith("funcol."):  # completed by wait_tensor(output), found by address
            t = _first_tensor(out if out is not None else inp if spec.inplace else None)
            if t is not None:
                ev.out_ptr = t.data_ptr()

    def _with_summary(self, ev: Event, head: bytes, gs, inp, out, inplace) -> tuple[bytes, int]:
        """The begin record with the input's summary (summaries on), and its time."""
        summary = b""
        s = self._summary(ev.id, "in", summaries.summarize(inp, self.mode == "full")) if inp is not None else None
        if s is not None:
            summary = b',"in":' + orjson.dumps(s, default=str)
        ev.tensors = out if out is not None else (inp if inplace else None)
        t = monotonic_ns()
        if gs is not None:
            return b'%b%d,"gs":%d%b,"t":%d}\n' % (head, ev.id, gs, summary, t), t
        return b'%b%d%b,"t":%d}\n' % (head, ev.id, summary, t), t

    def _fixed_part(self, key, nbytes: int) -> tuple[bytes, bool, bool]:
        """(the begin record up to its id, is it a collective, does it need _special) for a begin_fields() key."""
        spec, api, origin, site, g, root, peer, tag, dtype, shape, cuda, is_async, tid = key[:13]
        op = spec.op
        root = None if root is None else _global(g, root)
        peer = None if peer is None else _global(g, peer)
        parts = [b'{"k":"b","op":"%b","api":%b,"g":%d' % (_OPS[op], orjson.dumps(api), g.gidx)]
        if root is not None:
            parts.append(b',"root":%d' % root)
        if peer is not None:
            parts.append(b',"peer":%d' % peer)
        if tag is not None:
            parts.append(b',"tag":%d' % tag)
        parts.append(b',"bytes":%d' % nbytes)
        if dtype is not None:
            parts.append(b',"dtype":%b,"shape":%b' % (orjson.dumps(str(dtype).removeprefix("torch.")),
                                                    orjson.dumps(list(shape))))
        parts.append(b',"async":true' if is_async else b',"async":false')
        if site:
            parts.append(b',"site":' + orjson.dumps(site))
        if origin and origin != api:
            parts.append(b',"origin":' + orjson.dumps(origin))
        if tid != _MAIN_THREAD:
            parts.append(b',"th":%d' % tid)
        parts.append(b',"i":')
        special = cuda or (op == "recv" and peer is None) or (is_async and api.startswith("funcol."))
        fixed = (b"".join(parts), op != "send" and op != "recv", special)
        if len(self._fixed) > _CACHE_LIMIT:  # a job has few distinct lines and shapes; a pathological one is cut
            self._fixed.clear()
        self._fixed[key] = fixed
        return fixed

    def issued(self, ev: Event, result) -> None:
        """The backend accepted the op; `result` is what the c10d op returned (Work, or (tensors, Work))."""
        work = result[-1] if isinstance(result, tuple) else result
        if work is not None and not isinstance(work, torch.ScriptObject):
            work = None
        self.issued_work(ev, None if work is None else dist.distributed_c10d.Work.unbox(work), ours=True)

    def issued_work(self, ev: Event, work, ours: bool = False) -> None:
        """The backend accepted the op and returned `work` (a Python Work, or None). ours: `work` is a wrapper
        this tracer made (the kernel's path), not the object the job will be handed (the fast path)."""
        try:  # the backend's own sequence number, read right after issue: Flight Recorder's id for this op
            ev.seq = ev.group.pg._get_sequence_number_for_group()
        except Exception:  # noqa: BLE001
            pass
        if work is None:
            self.complete(ev)  # the backend finished it synchronously (monitored_barrier, ...)
            return
        if ev.sync and not ev.cuda:
            self.tls.sync = ev   # distributed_c10d waits on it next, on this thread
            return
        self.track(ev, work, ours)

    def track(self, ev: Event, w, ours: bool) -> None:
        """Follow an async op's Work: its future's completion, the user's wait() on it.

        The job's own Work object (the fast path's) is held weakly: the entry lasts as long as the job holds it.
        A wrapper of ours (the kernel's path) is held until the op completes: the job is handed that same object
        only if it is alive when the op returns to Python, else a new one whose wait() we would not know."""
        self.pending[id(w)] = ev
        if ours:
            ev.work = w
        else:
            self._hold_weakly(ev, w)
        if ev.out_ptr:
            self.by_ptr[ev.out_ptr] = ev  # functional collectives complete through wait_tensor(output)
        if ev.cuda:
            ev.watched = True
            # A CUDA Work's future completes on the host as soon as the op is enqueued, so its callback says
            # nothing about the device. Work.is_completed() queries the op's CUDA events without blocking: a
            # watcher thread polls it (resolution: the polling interval, about a millisecond).
            _cuda_watcher().add(self, ev, w)
            return
        try:
            fut = w.get_future()
        except Exception:  # noqa: BLE001 - gloo send/recv have no future: they end at wait()
            return
        ev.watched = True
        self.awaited[ev.id] = ev
        fut.add_done_callback(lambda f, ev=ev: self._future_done(ev, f))

    def _future_done(self, ev: Event, fut) -> None:
        try:
            err = None
            try:
                fut.value()
            except Exception as e:  # noqa: BLE001
                err = e
            self.complete(ev, err)
            self.finished(ev)
        except Exception as e:  # noqa: BLE001
            self.fail(e)

    def _hold_weakly(self, ev: Event, w) -> None:
        """Keep ev in `pending` under id(w) for as long as w lives, without keeping w alive."""
        key, pending = id(w), self.pending

        def gone(_ref, key=key, ev=ev) -> None:  # w is being freed: its id may be reused after this
            if pending.get(key) is ev:
                pending.pop(key, None)
        ev.work_ref = weakref.ref(w, gone)

    def finished(self, ev: Event) -> None:
        """ev's op has completed: hold its Work weakly from now on. It stays in `pending` so that a later wait()
        on it is timed, for as long as the job holds the Work; a Work held by us alone would keep its tensors
        alive after the job let go of them (a job that waits through work.get_future() never calls wait())."""
        w = ev.work
        if w is None:
            return
        ev.work = None
        self._hold_weakly(ev, w)
        # Works the job holds but never waits on from Python: past a bound, forget the finished ones
        pending = self.pending
        if len(pending) > PENDING_LIMIT:
            for k in [k for k, e in list(pending.items()) if e.ended]:
                pending.pop(k, None)

    def complete(self, ev: Event, err: BaseException | None = None, t: int | None = None, bound=False) -> None:
        if ev.ended:
            return
        ev.ended = True
        t = t or time.monotonic_ns()
        self.in_flight.pop(ev.id, None)
        self.awaited.pop(ev.id, None)
        if ev.out_ptr and self.by_ptr.get(ev.out_ptr) is ev and ev.work is None:
            del self.by_ptr[ev.out_ptr]
        if err is None and not bound and not ev.peer_any and ev.tensors is None:
            # the common case, formatted directly: a third of the cost of a dict through orjson
            if type(ev.seq) is int:
                self.rec.write_raw(b'{"k":"e","i":%d,"t":%d,"seq":%d}\n' % (ev.id, t, ev.seq))
            else:
                self.rec.write_raw(b'{"k":"e","i":%d,"t":%d}\n' % (ev.id, t))
            return
        rec = {"k": "e", "i": ev.id, "t": t}
        if bound:
            rec["bound"] = True  # completion seen only at exit: the op ended at or before t
        if ev.seq is not None:
            rec["seq"] = ev.seq
        if err is not None:
            rec["st"] = "error"
            rec["err"] = f"{type(err).__name__}: {err}"[:1000]
        work = ev.held_work() if ev.peer_any else None
        if work is not None:  # a recv from any source: now we know which
            try:
                rec["peer"] = work._source_rank() if hasattr(work, "_source_rank") else work.source_rank()
            except Exception:  # noqa: BLE001
                pass
        if ev.tensors is not None and err is None:
            summary = self._summary(ev.id, "out", summaries.summarize(ev.tensors, self.mode == "full"))
            if summary is not None:
                rec["out"] = summary
            ev.tensors = None
        self.rec.write(rec)

    def wait_begins(self, work, t0: int) -> None:
        ev = self.pending.get(id(work))
        if ev is not None and not ev.ended:
            self.in_flight[ev.id] = ev.info[:3] + (t0,) + ev.info[4:]

    def waited(self, work, t0: int, t1: int, err: BaseException | None) -> None:
        """The user's (or a library's) wait() on an async op's `work` ran from t0 to t1."""
        ev = self.pending.pop(id(work), None)
        if ev is None:
            return
        self.in_flight.pop(ev.id, None)
        self.rec.write({"k": "w", "i": ev.id, "t0": t0, "t1": t1})
        if not ev.ended and (not ev.watched or err is not None):
            self.complete(ev, err, t1)
        ev.work = None

    def tensor_waited(self, tensor, t0: int, t1: int) -> None:
        """_c10d_functional.wait_tensor(tensor) ran from t0 to t1 (functional collectives, DTensor)."""
        ev = self.by_ptr.pop(tensor.data_ptr(), None)
        if ev is None:
            return
        self.rec.write({"k": "w", "i": ev.id, "t0": t0, "t1": t1})
        if ev.work is not None:
            self.pending.pop(id(ev.work), None)
            ev.work = None
        if not ev.ended:
            self.complete(ev, None, t1)  # gloo gives no future for some ops: their end is the wait

    def error(self, ev: Event, err: BaseException) -> None:
        if self.tls.sync is ev:
            self.tls.sync = None
        self.complete(ev, err)

    # -- summaries ------------------------------------------------------------------------------
    def _summary(self, ev_id: int, which: str, s) -> dict | None:
        """The summary to put in the record now; a CUDA one is resolved later and written as an "s" record."""
        if isinstance(s, summaries.Pending):
            _resolver().add(self, ev_id, which, s)
            return None
        return s

    # -- lifecycle ------------------------------------------------------------------------------
    def write(self, obj) -> None:
        self.rec.write(obj)

    def fail(self, e: BaseException) -> None:
        self.rec.disable(f"internal error: {type(e).__name__}: {e}")

    def release(self, pg=None) -> None:
        """The job destroyed process group pg (None: all of them, with the default group): let go of it, and
        of the Works of its ops, so that they are freed when the job frees them, as they would be untraced. One
        kept past destroy_process_group is destroyed at the interpreter's exit instead, where gloo can abort
        the process ("terminate called without an active exception")."""
        if pg is None:
            self._settle()
            groups = list(self.groups.values())
            self.groups.clear()
            if self.watchdog is not None:
                self.watchdog.store = None  # the job's store goes with its default group
        else:
            g = self.groups.pop(id(pg), None)
            groups = [g] if g is not None else []
        self._end_unwaited(lambda ev: pg is None or ev.group in groups)
        for g in groups:
            g.pg = g.gloo = None

    def _end_unwaited(self, which) -> None:
        """Let go of the async ops that `which` picks among those nobody waited on: the ones whose backend
        gives no completion callback and that are done by now are said to be, with an end time that is only
        an upper bound."""
        for table in (self.pending, self.by_ptr):
            for key, ev in list(table.items()):
                if not which(ev):
                    continue
                try:
                    work = ev.held_work()
                    if not ev.ended and work is not None and work.is_completed():
                        self.complete(ev, bound=True)
                except Exception:  # noqa: BLE001
                    pass
                table.pop(key, None)  # (a Work's weakref callback may have taken it meanwhile)
                ev.work = None

    def _settle(self, timeout_s: float = 0.1) -> None:
        """Give the completion callbacks of ops that are done a moment to run (on gloo's threads) before the
        groups go or the file closes: an op whose end is never recorded reads as a hang."""
        deadline = time.monotonic() + timeout_s
        while self.awaited and time.monotonic() < deadline:
            time.sleep(0.001)

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        self._settle()
        self._end_unwaited(lambda ev: True)
        r = _THREADS.get(_Resolver)
        if r is not None:
            r.drain()
        self.rec.close()


class _failing_count:
    """Event ids whose number `at` raises: that event's begin fails inside the tracer (for the fault tests)."""

    def __init__(self, at: int):
        self.n, self.at = -1, at

    def __next__(self) -> int:
        self.n += 1
        if self.n == self.at:
            raise RuntimeError("injected fault (DISTTRACE_TEST_FAULT_AT)")
        return self.n


_MAIN_THREAD = threading.main_thread().ident
_OPS = {op: op.encode() for op in ("broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
                                   "reduce_scatter", "all_to_all", "barrier", "send", "recv")}
_CACHE_LIMIT = 20000  # begin-record heads kept per tracer


def _backend_name(pg) -> str:
    try:
        return str(dist.get_backend(pg))
    except Exception:  # noqa: BLE001
        return ""


class _Resolver(threading.Thread):
    """Resolves CUDA summaries off the training thread and writes them as "s" records."""

    def __init__(self):
        super().__init__(name="disttrace-summaries", daemon=True)
        self.items: list = []
        self.cv = threading.Condition()

    def add(self, tracer, ev_id, which, pending) -> None:
        with self.cv:
            self.items.append((tracer, ev_id, which, pending))
            self.cv.notify()

    def run(self) -> None:
        while True:
            with self.cv:
                while not self.items:
                    self.cv.wait()
                tracer, ev_id, which, pending = self.items.pop(0)
            try:
                tracer.write({"k": "s", "i": ev_id, "which": which, "s": pending.resolve()})
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
        self.lock = threading.Lock()
        self.wake = threading.Event()

    def add(self, tracer, ev, work) -> None:
        with self.lock:
            self.items.append((tracer, ev, work))
        self.wake.set()

    def run(self) -> None:
        while True:
            if not self.items:
                self.wake.wait()
                self.wake.clear()
            with self.lock:
                items, self.items = self.items, []
            keep = []
            now = time.monotonic_ns()
            for tracer, ev, work in items:
                try:
                    if ev.ended:
                        continue
                    if work.is_completed():
                        tracer.complete(ev, None, now)  # a failure surfaces at wait() or in the watchdog
                        tracer.finished(ev)
                    else:
                        keep.append((tracer, ev, work))
                except Exception as e:  # noqa: BLE001 - e.g. the process group is gone: stop watching it
                    tracer.complete(ev, e, now)
            if keep:
                with self.lock:
                    self.items[:0] = keep
                time.sleep(0.0005 if len(keep) < 64 else 0.002)


def _cuda_watcher() -> _CudaWatcher:
    return _background(_CudaWatcher)


_THREADS: dict = {}  # the one background thread of each kind, started on first use


def _background(kind):
    thread = _THREADS.get(kind)
    if thread is None:
        thread = _THREADS[kind] = kind()
        thread.start()
    return thread


def _resolver() -> _Resolver:
    return _background(_Resolver)
