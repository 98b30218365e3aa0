"""The fast path: Python-API collectives on CPU tensors, recorded without the dispatcher kernel's cost.

hooks.py's BackendSelect kernel sees every c10d op, whoever issued it, but a Python kernel in the dispatcher
boxes the op's arguments into Python objects and back again (about 20 µs per op on a small VM, as much as a
4 KiB gloo all_reduce takes). Most ops of a job that calls torch.distributed itself come through the Python
methods of ProcessGroup (`group.allreduce([t], opts)` in distributed_c10d, or the user's own call), so these
methods are wrapped: the wrapper records the op from the method's arguments, then calls the method with the
BackendSelect key excluded on this thread, so the dispatcher goes straight to the backend.

Excluding BackendSelect also takes it from factory functions that the backend runs on this thread (gloo's
gather calls at::empty), which then would find no backend; so the wrapper includes the CPU key for the same
span, which is what BackendSelect would have computed for them. That is only true of a CPU backend working on
CPU tensors, so the fast path is taken only when the op's tensors are plain dense CPU tensors, the group's CPU
backend is gloo (a backend written in Python would run its own code under our dispatch keys) and no Python
dispatch mode is active (FakeTensorMode must not produce records); everything else (CUDA, barriers, tensor
subclasses, other backends, other overloads of a method) takes the kernel's path, which records the same fields.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch._C import DispatchKey

from .capture import SPECS

_C = torch._C
_Tensor = torch.Tensor
_strided = torch.strided
_BACKEND_SELECT, _CPU = DispatchKey.BackendSelect, DispatchKey.CPU


# ProcessGroup method -> (c10d op it issues, how its arguments read). Only the overloads that
# distributed_c10d calls: (tensors..., opts) with an options object, or send/recv's (tensors, rank, tag).
# A decoder returns (inp, out, root, peer, tag, async) or None when the call is another overload.
def _opts(options: str, inp: int | None, out: int | None, at: int, root: bool = False):
    cls = getattr(torch._C._distributed_c10d, options, None)

    def decode(args):
        if len(args) != at + 1 or type(args[at]) is not cls:
            return None
        o = args[at]
        return (args[inp] if inp is not None else None, args[out] if out is not None else None,
                o.rootRank if root else None, None, None, o.asyncOp)
    return decode if cls is not None and hasattr(cls(), "asyncOp") else None


def _p2p(sends: bool):
    def decode(args):
        if len(args) != 3 or type(args[1]) is not int or type(args[2]) is not int:
            return None
        return (args[0], None, None, args[1], args[2], None) if sends else (None, args[0], None, args[1], args[2], None)
    return decode


_METHODS = {
    "allreduce": ("allreduce_", _opts("AllreduceOptions", 0, None, 1)),
    "allreduce_coalesced": ("allreduce_coalesced_", _opts("AllreduceCoalescedOptions", 0, None, 1)),
    "broadcast": ("broadcast_", _opts("BroadcastOptions", 0, None, 1, root=True)),
    "reduce": ("reduce_", _opts("ReduceOptions", 0, None, 1, root=True)),
    "allgather": ("allgather_", _opts("AllgatherOptions", 1, 0, 2)),
    "_allgather_base": ("_allgather_base_", _opts("AllgatherOptions", 1, 0, 2)),
    "allgather_coalesced": ("allgather_coalesced_", _opts("AllgatherOptions", 1, 0, 2)),
    "allgather_into_tensor_coalesced": ("allgather_into_tensor_coalesced_", _opts("AllgatherOptions", 1, 0, 2)),
    "reduce_scatter": ("reduce_scatter_", _opts("ReduceScatterOptions", 1, 0, 2)),
    "_reduce_scatter_base": ("_reduce_scatter_base_", _opts("ReduceScatterOptions", 1, 0, 2)),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter_tensor_coalesced_", _opts("ReduceScatterOptions", 1, 0, 2)),
    "alltoall": ("alltoall_", _opts("AllToAllOptions", 1, 0, 2)),
    "alltoall_base": ("alltoall_base_", _opts("AllToAllOptions", 1, 0, 4)),
    # the names newer torch's distributed_c10d calls (the same c10d ops)
    "all_gather_single": ("_allgather_base_", _opts("AllgatherOptions", 1, 0, 2)),
    "all_gather_single_coalesced": ("allgather_into_tensor_coalesced_", _opts("AllgatherOptions", 1, 0, 2)),
    "reduce_scatter_single": ("_reduce_scatter_base_", _opts("ReduceScatterOptions", 1, 0, 2)),
    "reduce_scatter_single_coalesced": ("reduce_scatter_tensor_coalesced_", _opts("ReduceScatterOptions", 1, 0, 2)),
    "all_to_all_single": ("alltoall_base_", _opts("AllToAllOptions", 1, 0, 4)),
    "gather": ("gather_", _opts("GatherOptions", 1, 0, 2, root=True)),
    "scatter": ("scatter_", _opts("ScatterOptions", 1, 0, 2, root=True)),
    "send": ("send", _p2p(sends=True)),
    "recv": ("recv_", _p2p(sends=False)),
}


def _plain_cpu(obj) -> bool:
    """Is the first tensor in obj (a tensor, or nested lists of them) a plain dense CPU tensor?"""
    while type(obj) is list or type(obj) is tuple:
        if not obj:
            return True
        obj = obj[0]
    return type(obj) is _Tensor and obj.is_cpu and obj.layout is _strided and not obj.is_quantized


def install(hooks) -> None:
    """Wrap ProcessGroup's collective methods (hooks: the module that holds the tracer and the nesting guard)."""
    PG = dist.ProcessGroup
    for method, (c10d_name, decode) in _METHODS.items():
        raw = PG.__dict__.get(method)  # the class's own descriptor, to put back as it was
        spec = SPECS.get(c10d_name)
        if raw is None or spec is None or decode is None or getattr(raw, "_disttrace_orig", None) is not None:
            continue
        wrapper = _wrap(hooks, getattr(PG, method), spec, decode)
        wrapper._disttrace_raw = raw  # type: ignore[attr-defined]
        setattr(PG, method, wrapper)


def uninstall() -> None:
    PG = dist.ProcessGroup
    for method in _METHODS:
        raw = getattr(PG.__dict__.get(method), "_disttrace_raw", None)
        if raw is not None:
            setattr(PG, method, raw)


def _wrap(hooks, orig, spec, decode):
    nesting = hooks._nesting
    is_excluded, set_excluded = _C._dispatch_tls_is_dispatch_key_excluded, _C._dispatch_tls_set_dispatch_key_excluded
    is_included, set_included = _C._dispatch_tls_is_dispatch_key_included, _C._dispatch_tls_set_dispatch_key_included
    dispatch_modes = _C._len_torch_dispatch_stack

    def method(self, *args, **kwargs):
        t = hooks._tracer
        if t is None or kwargs or getattr(nesting, "depth", 0) or dispatch_modes():
            return orig(self, *args, **kwargs)  # the kernel's path records it, if it is a real op
        ev = None
        try:
            fields = decode(args)
            if fields is not None:
                inp, out, root, peer, tag, is_async = fields
                if (inp is None or _plain_cpu(inp)) and (out is None or _plain_cpu(out)):
                    g = t.group_of(self)
                    if g.cpu_gloo:
                        ev = t.begin_fields(spec, g, inp, out, root, peer, tag, is_async)
        except Exception as e:  # noqa: BLE001
            t.fail(e)
        if ev is None:
            return orig(self, *args)
        was_excluded, was_included = is_excluded(_BACKEND_SELECT), is_included(_CPU)
        set_excluded(_BACKEND_SELECT, True)
        set_included(_CPU, True)
        nesting.depth = 1  # should the kernel still be reached, it records nothing a second time
        try:
            try:
                work = orig(self, *args)
            finally:  # the keys are this thread's own again before anything else runs
                nesting.depth = 0
                set_excluded(_BACKEND_SELECT, was_excluded)
                set_included(_CPU, was_included)
        except BaseException as e:
            hooks._safe(t.error, ev, e)
            raise
        try:
            t.issued_work(ev, work)
        except Exception as e:  # noqa: BLE001
            t.fail(e)
        return work

    method._disttrace_orig = orig  # type: ignore[attr-defined]
    method.__doc__ = orig.__doc__
    method.__name__ = getattr(orig, "__name__", "method")
    return method
