"""The device side of a profiler (Kineto) trace, for kineto.py: which kernels are communication, and which
host op each one ran for.

A kernel is communication by what launched it, its name only when nothing else says:
- its host op: the kernel's "External id" names the CPU op around its launch (newer Kineto; older Kineto writes
  the kernel's own correlation id there instead, so an External id equal to the correlation says nothing), else
  its "correlation" names the launch (`cudaLaunchKernel`, `hipExtModuleLaunchKernel`...: cat `cuda_runtime`),
  and the launch lies inside a communication host op on its thread;
- a coalesced block (`batch_isend_irecv`, `_coalescing_manager`): its ops launch nothing, the block's end
  (`nccl:coalesced`, or a record_param_comms named "coalesced") launches the kernel(s) that carry all of them;
- a CUDA graph's replay: the kernels a `cudaGraphLaunch` ran share its correlation; each communication kernel of
  each replay is an op of its own, issued by the graph launch;
- its name: NCCL's of every vintage (`ncclKernel_*`, `ncclDevKernel_*`), RCCL's (the same prefixes, and
  `ncclDevKernel_Generic`), MSCCL's (`mscclKernel_*`); a kernel so named with no host op is still an op;
- a kernel without such a name is communication only when a communication host op launched it from inside its
  backend's part (record_param_comms, nccl:*: not the c10d op's own preparation, such as a barrier's fill of its
  tensor) and launched no NCCL-named kernel (a custom all-reduce); never one of ATen's own (`at::native::`); a copy
  beside an NCCL kernel is not.

Imports neither torch nor textual.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

COMM_KERNEL = ("ncclKernel_", "ncclDevKernel_", "mscclKernel_")
GRAPH_LAUNCH = ("cudaGraphLaunch", "hipGraphLaunch")
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "privateuse1_runtime"})
# the collective a kernel's name hints at (NCCL names every kernel after the first op it may run; 2.12-2.13 named
# them all SendRecv, and RCCL's are Generic): the last resort, after the host op and the metadata
_KERNEL_KIND = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
                "broadcast": "broadcast", "reduce": "reduce", "sendrecv": None, "send": "send", "recv": "recv",
                "alltoall": "all_to_all"}


def kernel_kind(name: str) -> str | None:
    """The op a communication kernel's name says (`ncclDevKernel_AllReduce_Sum_f32_RING_LL` -> all_reduce), or None
    when it names none (SendRecv: an all_to_all or a send/recv; Generic; MSCCL's)."""
    rest = name.split("_", 1)[1] if "_" in name else ""
    token = rest.split("(", 1)[0].split("_", 1)[0].lower()
    return _KERNEL_KIND.get(token)


@dataclass
class Op:
    """One communication op on one rank, as its parts are found."""
    tid: object
    host_start: int | None = None
    host_end: int | None = None
    names: list = field(default_factory=list)      # the host ops' names, outermost first
    meta: dict = field(default_factory=dict)       # record_param_comms' (or the kernel's) args
    concrete: list = field(default_factory=list)   # the c10d op's "Concrete Inputs"
    c10d_dims: object = None
    c10d_types: object = None
    ann_dims: object = None                        # the nccl:*/hccl:* annotation's "Input Dims"/"Input type"
    ann_types: object = None
    rpc_dims: object = None                        # record_param_comms' own "Input Dims" (older PyTorch)
    rpc_types: object = None
    ext_ids: set = field(default_factory=set)
    exec_start: int | None = None
    exec_end: int | None = None
    exec_kind: str = ""                             # "kernel", "gloo" or ""
    exec_name: str = ""
    exec_args: dict = field(default_factory=dict)
    site: str | None = None
    inner: tuple | None = None                      # the span of its record_param_comms and nccl:* (the backend)
    carrier: bool = False                           # a coalesced block's end: its kernels carry the block's ops
    how: str = ""                                   # "coalesced", "graph" or "launched": how the kernel was found
    kernels: int = 0


@dataclass
class Linked:
    """What linking found, for the report's notes and warnings."""
    kernels: int = 0          # communication kernels seen
    unlinked: int = 0         # ... with no host op: an op each
    graph: int = 0            # ... replayed by a CUDA graph: an op each
    coalesced_ops: int = 0    # ops of coalesced blocks timed by their block's kernels
    blocks: int = 0           # coalesced blocks with kernels
    lost_blocks: int = 0      # ... whose ops are not in the trace (the window began mid-block)
    launched: list = field(default_factory=list)  # ops timed by a kernel without a communication name: its names


def _threads(ops: list[Op]) -> tuple[dict, dict]:
    by_tid: dict = {}
    for o in ops:
        if o.host_start is not None:
            by_tid.setdefault(o.tid, []).append(o)
    for lst in by_tid.values():
        lst.sort(key=lambda o: o.host_start)
    return by_tid, {tid: [o.host_start for o in lst] for tid, lst in by_tid.items()}


def _finder(ops: list[Op], runtime: dict):
    """host_of(args): the op whose host interval launched a kernel with these args, or None."""
    by_ext = {x: o for o in ops for x in o.ext_ids}
    by_tid, starts = _threads(ops)

    def host_of(args: dict) -> Op | None:
        c, x = args.get("correlation"), args.get("External id")
        if type(x) is int and x != c:
            o = by_ext.get(x)
            if o is not None:
                return o
        r = runtime.get(c) if type(c) is int else None
        if r is None:
            return None
        tid, t = r
        cands = by_tid.get(tid)
        if not cands:
            return None
        k = bisect.bisect_right(starts[tid], t) - 1
        while k >= 0:  # a carrier's interval may outlast the op after it: the latest op holding t
            if cands[k].host_start <= t <= cands[k].host_end:
                return cands[k]
            if k == 0 or cands[k - 1].host_end < cands[k].host_start:
                return None
            k -= 1
        return None
    return host_of


def _add(o: Op, ts: int, end: int, name: str, args: dict) -> None:
    if o.exec_start is None or ts < o.exec_start:
        o.exec_start = ts
    o.exec_end = max(o.exec_end or 0, end)
    o.exec_kind, o.exec_name = "kernel", name
    o.kernels += 1
    if "Collective name" in args:
        o.exec_args = args


def link_kernels(ops: list[Op], carriers: list[Op], kernels: list, others: list, runtime: dict,
                 graphs: dict) -> tuple[list[Op], Linked]:
    """Each communication kernel (`kernels`: (ts, end, name, args)) to its host op or carrier; a kernel of a graph
    replay or with no host op becomes an op of its own (returned). `others`: the kernels without a communication
    name, linked only to the ops that launched no named kernel. `graphs`: correlation -> (tid, start, end) of each
    graph launch."""
    out = Linked()
    host_of = _finder(ops + carriers, runtime)
    new: list[Op] = []
    orphans: list = []  # kernels launched outside every host op: perhaps an older block's end (_blocks_2_0)
    for kernel in kernels:
        ts, end, name, args = kernel
        out.kernels += 1
        o = host_of(args)
        if o is None:
            c = args.get("correlation") if type(args.get("correlation")) is int else None
            g = graphs.get(c)
            if g is not None:  # one op per kernel per replay, issued by the graph launch
                out.graph += 1
                o = Op(tid=g[0], host_start=g[1], host_end=g[2], how="graph")
            elif c in runtime:
                orphans.append((runtime[c], kernel))
                continue
            else:
                out.unlinked += 1
                o = Op(tid=None)
            new.append(o)
        _add(o, ts, end, name, args)
    needy = [o for o in ops if not o.exec_kind and o.host_start is not None]
    if others and needy:
        _launched(needy + [c for c in carriers if not c.exec_kind], others, runtime, out)
    _coalesced(ops, carriers, out)
    for ts, end, name, args in _blocks_2_0(ops, orphans, out):
        out.unlinked += 1
        o = Op(tid=None)
        _add(o, ts, end, name, args)
        new.append(o)
    return new, out


def _blocks_2_0(ops: list[Op], orphans: list, out: Linked) -> list:
    """PyTorch 2.0's coalesced blocks (batch_isend_irecv: `_coalescing_manager`), which have no block end in the
    trace: their ops launch nothing, and ncclGroupEnd launches the kernel that runs them all after the last, outside
    every host op. A kernel launched so on a thread right after ops that had no kernel of their own (since the last
    op that had one) times them, as a block end's would (_coalesced); the kernels launched next, with no op between,
    are the same block's. `orphans`: ((tid, launch time), kernel) of the kernels no host op launched; returns the
    kernels that were no block's end (each an op of its own)."""
    if not orphans:
        return []
    by_tid: dict = {}
    for o in ops:
        if o.host_start is not None:
            by_tid.setdefault(o.tid, []).append((o.host_start, 0, o))
    for k, ((tid, t), _) in enumerate(orphans):
        by_tid.setdefault(tid, []).append((t, 1, k))
    left = []
    for items in by_tid.values():
        items.sort(key=lambda x: (x[0], x[1]))
        pending: list[Op] = []
        block: list[Op] = []
        for _, is_launch, x in items:
            if not is_launch:
                pending = [] if x.exec_kind else pending + [x]
                block = []
                continue
            kernel = orphans[x][1]
            if pending:  # the block's first kernel
                block, pending = pending, []
                out.blocks += 1
                out.coalesced_ops += len(block)
            if not block:
                left.append(kernel)
                continue
            for o in block:
                _add(o, *kernel)
                o.how = "coalesced"
    return left


def _launched(needy: list[Op], others: list, runtime: dict, out: Linked) -> None:
    """Kernels without a communication name that a communication op (or block end) with no named kernel launched:
    its device work (a custom all-reduce)."""
    host_of = _finder(needy, runtime)
    lo = min(o.host_start for o in needy)
    hi = max(o.host_end for o in needy)
    names: dict = {}
    for ts, end, name, args in others:
        c = args.get("correlation")
        r = runtime.get(c) if type(c) is int else None
        if r is None or not lo <= r[1] <= hi or "at::native::" in name:
            continue  # launched outside every op that could own it (the usual kernel), or one of ATen's own
        o = host_of(args)
        if o is not None and (o.inner is None or o.inner[0] <= r[1] <= o.inner[1]):
            _add(o, ts, end, name, args)
            o.how = "launched"
            names[id(o)] = name
    out.launched += list(names.values())


def _coalesced(ops: list[Op], carriers: list[Op], out: Linked) -> None:
    """A coalesced block's ops (on NCCL they launch nothing) are timed by the kernels their block's end launched:
    the ops on its thread since the last op that had a kernel of its own, or the block before."""
    if not carriers:
        return
    by_tid: dict = {}
    for o in ops + carriers:
        if o.host_start is not None:
            by_tid.setdefault(o.tid, []).append(o)
    for lst in by_tid.values():
        lst.sort(key=lambda o: (o.host_start, not o.carrier))
        pending: list[Op] = []
        for o in lst:
            if not o.carrier:
                if o.exec_kind:
                    pending = []
                else:
                    pending.append(o)
                continue
            if not o.exec_kind:  # a block whose kernels the trace lacks (CPU-only profiling)
                pending = []
                continue
            out.blocks += 1
            if not pending:
                out.lost_blocks += 1
            for p in pending:
                p.exec_start, p.exec_end, p.exec_kind, p.exec_name = o.exec_start, o.exec_end, "kernel", o.exec_name
                p.how = "coalesced"
                out.coalesced_ops += 1
            pending = []


__all__ = ["COMM_KERNEL", "GRAPH_LAUNCH", "RUNTIME_CATS", "Linked", "Op", "kernel_kind", "link_kernels"]
