"""The fast path: Python-API collectives on CPU tensors in a gloo group, recorded at a fraction of the kernel's cost.

hooks.py's BackendSelect kernel sees every c10d op, whoever issued it, but a Python kernel in the dispatcher boxes
the op's arguments into Python objects and back again (on a small VM, as much per op as a small gloo all_reduce
takes: benchmarks/bench_recorder.py measures the recorder's cost per op). Most ops of a job that calls
torch.distributed itself come through the Python methods of ProcessGroup (`group.allreduce([t], opts)` in
distributed_c10d, or the user's own call), so these methods are wrapped: the wrapper records the op from the
method's arguments, then hands the same arguments to the same-named method of the group's gloo backend, which is
where the dispatcher would have taken them.

What the ProcessGroup method does besides, and so what the wrapper must not skip (ProcessGroup.hpp, Ops.cpp):
- it calls the c10d operator through the dispatcher, whose CPU kernel unpacks the options and calls
  `getBackend(CPU)->allreduce(tensors, opts)`: the same call, with the same option values;
- the dispatcher records the op for the profiler while one runs: then the wrapper takes the method's own path;
- under `_allow_inflight_collective_as_graph_input` it registers the Work with the outputs for wait_tensor:
  then too.
The fast path is also taken only when the op's tensors are plain dense CPU tensors, the group's CPU backend is
exactly ProcessGroupGloo (a subclass may override its methods), and no Python dispatch mode is active
(FakeTensorMode must not produce records). Everything else (CUDA, barriers, tensor subclasses, other backends,
other overloads, the coalesced tensor ops the backend has no Python method for) takes the kernel's path, which
records the same fields. Both read the tracer and the nesting guard from current.py.

With summaries off (the default) the common case takes the lean path: a reader per method family (_LEAN) checks
what varies per call, and the wrapper itself looks its own key up in Tracer.lean (what the key's first sight
decided: Tracer.lean_entry), writes the begin record and issues the op; a synchronous op waits in
Completion.lean_sync for hooks.py's Work.wait to end it, without an Event (docs/ARCHITECTURE.md, "The lean path").
Where the recorder's compiled part is built (compiled.py), the lean branch of the readers _lean_one and _lean_p2p
runs as one C call (_hotpath.Lean) with the same rules in the same order, and the code below is its twin.
"""

from __future__ import annotations

from threading import get_ident

import torch
import torch.distributed as dist

from time import monotonic_ns

from . import current
from .callsite import walk
from .compiled import offers
from .completion import PENDING_LIMIT, Event
from .op_records import BEGIN_LINE, BEGIN_LINE_GS, BEGIN_LINE_PS, nbytes
from .specs import SPECS

_C = torch._C
_Tensor = torch.Tensor
_strided = torch.strided
_Gloo = getattr(dist, "ProcessGroupGloo", None)
_inflight_as_graph_input = getattr(_C._distributed_c10d, "_allow_inflight_collective_as_graph_input", None)
_begin_c = offers("begin")  # the lean path's begin record, formatted and written in C (compiled.py)
# ... and the whole lean branch of the wrapper for the readers _lean_one and _lean_p2p (where walk is compiled too)
_Lean = offers("Lean")
_Method = offers("Method")  # ... and the wrapper's checks before it (with _Lean)
GENERAL = object()  # what it returns for the general path (at a key's first sight: the walk, for the code below)


# ProcessGroup method -> (c10d op it issues, how its arguments read, the backend's method that takes the same
# arguments). Only the overloads that distributed_c10d calls: (tensors..., opts) with an options object, or
# send/recv's (tensors, rank, tag). A decoder returns (inp, out, root, peer, tag, async), or None when the call is
# another overload or its tensors are not plain dense CPU tensors.
def _opts(options: str, inp: int | None, out: int | None, at: int, root: bool = False):
    cls = getattr(torch._C._distributed_c10d, options, None)

    def decode(args):
        if len(args) != at + 1 or type(args[at]) is not cls:
            return None
        i = args[inp] if inp is not None else None
        o = args[out] if out is not None else None
        if (i is not None and not _plain_cpu(i)) or (o is not None and not _plain_cpu(o)):
            return None
        opts = args[at]
        return i, o, opts.rootRank if root else None, None, None, opts.asyncOp
    return decode if cls is not None and hasattr(cls(), "asyncOp") else None


def _p2p(sends: bool):
    def decode(args):
        if len(args) != 3 or type(args[1]) is not int or type(args[2]) is not int or not _plain_cpu(args[0]):
            return None
        return (args[0], None, None, args[1], args[2], None) if sends else (None, args[0], None, args[1], args[2], None)
    return decode


# The lean path's readers, one per method family: (first tensor, root, peer, tag, async flag, bytes or -1 where
# they follow from the first tensor's dtype and shape, input, output) of the common case, or None (the general
# path decides). Only the checks that vary from call to call are here: the first tensor's device and layout; its
# dtype (quantized or not) is part of the lean key, checked once (Tracer.lean_entry).
def _lean_one(options: str, root: bool = False):
    """([tensor], opts): all_reduce, broadcast, reduce. (_hotpath.Lean reads them the same way: read.c_reader.)"""
    cls = getattr(torch._C._distributed_c10d, options, None)

    def read(args):
        if len(args) != 2 or type(args[1]) is not cls:
            return None
        inp = args[0]
        first = _one_plain(inp)
        if first is None:
            return None
        opts = args[1]
        return first, opts.rootRank if root else None, None, None, opts.asyncOp, -1, inp, None
    read.c_reader = (False, root, cls)  # (p2p, root, options class)
    return read


def _one_plain(ts):
    """The tensor of ts if ts is a list of one plain dense CPU tensor (its dtype is checked once: lean_entry)."""
    if type(ts) is not list or len(ts) != 1:
        return None
    first = ts[0]
    if type(first) is not _Tensor or not first.is_cpu or first.layout is not _strided:
        return None
    return first


def _lean_p2p(sends: bool):
    """([tensor], peer, tag): send, recv."""
    def read(args):
        if len(args) != 3 or type(args[1]) is not int or type(args[2]) is not int:
            return None
        ts = args[0]
        first = _one_plain(ts)
        if first is None:
            return None
        return (first, None, args[1], args[2], None, -1) + ((ts, None) if sends else (None, ts))
    read.c_reader = (True, False, None)
    return read


def _lean_many(decode):
    """Any other method: its decoder's plain tensors, their bytes counted each call (as the general path does)."""
    def read(args):
        fields = decode(args)
        if fields is None:
            return None
        inp, out, root, peer, tag, is_async = fields
        size, first = nbytes(inp) if inp is not None else (0, None)
        if first is None and out is not None:
            out_bytes, first = nbytes(out)
            size = out_bytes if inp is None else size
        if first is None:
            return None
        return first, root, peer, tag, is_async, size, inp, out
    return read


_METHODS = {
    "allreduce": ("allreduce_", _opts("AllreduceOptions", 0, None, 1), "allreduce"),
    "allreduce_coalesced": ("allreduce_coalesced_", _opts("AllreduceCoalescedOptions", 0, None, 1),
                            "allreduce_coalesced"),
    "broadcast": ("broadcast_", _opts("BroadcastOptions", 0, None, 1, root=True), "broadcast"),
    "reduce": ("reduce_", _opts("ReduceOptions", 0, None, 1, root=True), "reduce"),
    "allgather": ("allgather_", _opts("AllgatherOptions", 1, 0, 2), "allgather"),
    "_allgather_base": ("_allgather_base_", _opts("AllgatherOptions", 1, 0, 2), "_allgather_base"),
    "allgather_coalesced": ("allgather_coalesced_", _opts("AllgatherOptions", 1, 0, 2), "allgather_coalesced"),
    "reduce_scatter": ("reduce_scatter_", _opts("ReduceScatterOptions", 1, 0, 2), "reduce_scatter"),
    "_reduce_scatter_base": ("_reduce_scatter_base_", _opts("ReduceScatterOptions", 1, 0, 2), "_reduce_scatter_base"),
    "alltoall": ("alltoall_", _opts("AllToAllOptions", 1, 0, 2), "alltoall"),
    "alltoall_base": ("alltoall_base_", _opts("AllToAllOptions", 1, 0, 4), "alltoall_base"),
    # the names newer torch's distributed_c10d calls (the same c10d ops; the backend kept the old names)
    "all_gather_single": ("_allgather_base_", _opts("AllgatherOptions", 1, 0, 2), "_allgather_base"),
    "reduce_scatter_single": ("_reduce_scatter_base_", _opts("ReduceScatterOptions", 1, 0, 2), "_reduce_scatter_base"),
    "all_to_all_single": ("alltoall_base_", _opts("AllToAllOptions", 1, 0, 4), "alltoall_base"),
    "gather": ("gather_", _opts("GatherOptions", 1, 0, 2, root=True), "gather"),
    "scatter": ("scatter_", _opts("ScatterOptions", 1, 0, 2, root=True), "scatter"),
    "send": ("send", _p2p(sends=True), "send"),
    "recv": ("recv_", _p2p(sends=False), "recv"),
}


_LEAN = {
    "allreduce": _lean_one("AllreduceOptions"),
    "broadcast": _lean_one("BroadcastOptions", root=True),
    "reduce": _lean_one("ReduceOptions", root=True),
    "send": _lean_p2p(sends=True),
    "recv": _lean_p2p(sends=False),
}


def _plain_cpu(obj) -> bool:
    """Is the first tensor in obj (a tensor, or nested lists of them) a plain dense CPU tensor?"""
    cls = type(obj)
    while cls is list or cls is tuple:
        if not obj:
            return True
        obj = obj[0]
        cls = type(obj)
    return cls is _Tensor and obj.is_cpu and obj.layout is _strided and not obj.is_quantized


def install() -> None:
    """Wrap ProcessGroup's collective methods."""
    import torch.autograd.profiler as profiler  # not at import: this module may be imported while torch is

    if _Lean is not None:
        offers("init_lean")(_Tensor, _strided, profiler, _inflight_as_graph_input, GENERAL, current.safe,
                            _lean_failed, _lean_async, PENDING_LIMIT, globals())
    PG = dist.ProcessGroup
    for method, (c10d_name, decode, backend_method) in _METHODS.items():
        raw = PG.__dict__.get(method)  # the class's own descriptor, to put back as it was
        spec = SPECS.get(c10d_name)
        direct = getattr(_Gloo, backend_method, None)
        if raw is None or spec is None or decode is None or direct is None or _inflight_as_graph_input is None \
                or getattr(raw, "_disttrace_orig", None) is not None:
            continue
        lean = _LEAN.get(method) or _lean_many(decode)
        wrapper = _wrap(getattr(PG, method), spec, decode, lean, direct, profiler)
        wrapper._disttrace_raw = raw  # type: ignore[attr-defined]
        setattr(PG, method, wrapper)


def uninstall() -> None:
    PG = dist.ProcessGroup
    for method in _METHODS:
        raw = getattr(PG.__dict__.get(method), "_disttrace_raw", None)
        if raw is not None:
            setattr(PG, method, raw)


def _wrap(orig, spec, decode, lean_args, direct, profiler):
    nested = current.nested
    dispatch_modes = _C._len_torch_dispatch_stack
    inflight = _inflight_as_graph_input
    begin = _begin_c
    c_reader = getattr(lean_args, "c_reader", None)
    lean_c = _Lean(*c_reader, spec, direct) if _Lean is not None and c_reader is not None else None

    def method(self, *args, **kwargs):
        t = current.tracer
        if t is None or kwargs or (nested and get_ident() in nested) or dispatch_modes():
            return orig(self, *args, **kwargs)  # the kernel's path records it, if it is a real op
        lean = t.lean
        walked = None
        if lean is not None and lean_c is not None:
            got = lean_c(t, self, args)  # rest's lean branch, in C (compiled.py): the Work, or the general path
            if type(got) is tuple:
                walked = got  # a key's first sight: decided by rest, with this walk (one walk an op)
            elif got is GENERAL:
                lean = None
            else:
                return got
        return rest(t, self, args, lean, walked)

    def rest(t, self, args, lean, walked):
        """The lean path in Python (lean: t.lean, or None for the general path; walked: the walk, where C made it)
        and the general path."""
        if lean is not None:
            # The lean path (summaries off, the common case): the begin record written here, a synchronous op's end
            # by hooks.py's Work.wait from Completion.lean_sync; no Event unless the op is async
            entry = None
            try:
                fields = lean_args(args)
                if fields is not None and not profiler._is_profiler_enabled and not inflight():
                    first, root, peer, tag, is_async, size, inp, out = fields
                    g = t.groups.get(id(self)) or t.groups.of(self)
                    backend = g.gloo
                    if walked is None:
                        walked = walk(2)
                    tid = get_ident()
                    key = (spec, walked, g, root, peer, tag, first.dtype, first.shape, is_async, size, tid)
                    entry = lean.get(key)
                    if entry is None:
                        entry = t.lean_entry(key, spec, walked, g, inp, out, root, peer, tag, is_async)
                    if entry and backend is not None:
                        head, collective, is_async, op, slot, pair = entry
                        i = next(t._ids)
                        gs = ps = None
                        if collective:
                            gs = g.next_seq
                            g.next_seq = gs + 1
                        elif pair is not None:  # (a send or recv: its peer is known on this path)
                            ps = pair.next_seq
                            pair.next_seq = ps + 1
                        if begin is not None:  # the same record, the time taken last, formatted and written in C
                            now = begin(t.rec, head, i, gs, ps)
                        else:
                            now = monotonic_ns()  # last: everything above is our own cost, not the op's
                            line = BEGIN_LINE_GS % (head, i, gs, now) if gs is not None else \
                                BEGIN_LINE_PS % (head, i, ps, now) if ps is not None else BEGIN_LINE % (head, i, now)
                            rec = t.rec
                            try:
                                rec.raw(line)
                            except ValueError:  # the map is full (or closed): write_raw grows it (or drops the line)
                                rec.write_raw(line)
                    else:
                        entry = None
            except Exception as e:  # noqa: BLE001
                t.fail(e)
                entry = None
            if entry is not None:  # issued: a synchronous op into lean_sync (the job waits on its Work next)
                try:
                    work = direct(backend, *args)
                except BaseException as e:
                    current.safe(_lean_failed, t, i, is_async, op, g, gs, now, tid, slot, e)
                    raise
                if is_async or work is None:
                    current.safe(_lean_async, t, i, op, g, gs, now, tid, slot, work)
                    return work
                seq = None
                if t.read_seq:
                    try:  # the backend's own sequence number, read right after issue: Flight Recorder's id for it
                        seq = self._get_sequence_number_for_group()
                    except Exception:  # noqa: BLE001
                        pass
                sync = t.completion.lean_sync
                if len(sync) > PENDING_LIMIT:  # Works never waited on (an exception between): forget them
                    sync.clear()
                sync[id(work)] = (op, g, gs, now, tid, i, seq, slot)
                return work
        ev = None
        try:
            fields = decode(args)
            if fields is not None and not profiler._is_profiler_enabled and not inflight():
                g = t.groups.get(id(self)) or t.groups.of(self)
                backend = g.gloo
                if backend is not None:
                    ev = t.begin_fields(spec, g, *fields)
        except Exception as e:  # noqa: BLE001
            t.fail(e)
        if ev is None:
            return orig(self, *args)
        try:
            work = direct(backend, *args)
        except BaseException as e:
            current.safe(t.completion.error, ev, e)
            raise
        try:
            t.completion.issued_work(ev, work)
        except Exception as e:  # noqa: BLE001
            t.fail(e)
        return work

    if lean_c is not None and _Method is not None:  # the method itself in C too: its checks, then lean_c, else rest (as above)
        method = _Method(orig, lean_c, rest, vars(current), nested, dispatch_modes)
    method._disttrace_orig = orig  # type: ignore[attr-defined]
    method.__doc__ = orig.__doc__
    method.__name__ = getattr(orig, "__name__", "method")
    return method


def _lean_event(i, is_async, op, g, gs, now, tid, slot) -> Event:
    """The Event of an op the lean path began (its rare cases: async, refused)."""
    ev = Event(i, not is_async, g)
    ev.info, ev.agg = (op, g, gs, now, tid), slot
    return ev


def _lean_async(t, i, op, g, gs, now, tid, slot, work) -> None:
    """An async op the lean path issued: followed as the general path follows it."""
    t.completion.issued_work(_lean_event(i, True, op, g, gs, now, tid, slot), work)


def _lean_failed(t, i, is_async, op, g, gs, now, tid, slot, err) -> None:
    """The backend refused an op the lean path began: its end record, with the error."""
    t.completion.error(_lean_event(i, is_async, op, g, gs, now, tid, slot), err)
