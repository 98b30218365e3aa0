"""Import PyTorch profiler (Kineto) traces: one Chrome-trace JSON per rank (`*.pt.trace.json[.gz]`) -> normalized
events in an EventTable.

What a trace holds (docs/FORMAT.md, "PyTorch profiler traces", lists the fields and the versions covered):
- host ops (cat `cpu_op`/`user_annotation`, one thread each): the dispatcher's `c10d::allreduce_`...; NCCL's
  `record_param_comms` (args "Collective name", "dtype", "In/Out msg nelems", "Process Group Name/Description/
  Ranks", "Rank", perhaps "Seq") and `nccl:all_reduce`... These nest on the issuing thread: the ones whose start
  lies inside the outermost make one host op, whose interval is the host issue time;
- device work: kernels (cat `kernel`), linked to their host op by "External id" (or by "correlation" to the
  `cuda_runtime` launch inside it), a coalesced block's end, or a CUDA graph's launch (kineto_device.py: which
  kernels are communication, by what launched them first and by name last); newer Kineto copies the collective's
  metadata onto the kernel. gloo has no kernels: its worker threads' `gloo:all_reduce`... annotations are the
  execution, paired with the host ops in issue order per kind (gloo runs a group's work in that order);
- `distributedInfo`: rank, world size, pg_config (each group's name, description and ranks).

Every vintage is read for what it has (older Kineto: Unix-epoch µs, record_param_comms without metadata, sizes only
in "Input Dims"); what it lacked goes to the table's notes, what could not be used (a time out of range, a kernel
without its host op, a block without its ops) is counted in its warnings or notes, never dropped in silence.

An op's start/end is its kernel's interval: arrivals and completions as the peers see them (gloo: the host's issue,
as disttrace records it, and the end of gloo's execution); the host interval is kept beside it (`host_start_ns`,
`host_end_ns`). A kernel or an execution whose host op is missing (the profiling window began mid-op) is still an
event: what it says is kept, the rest is listed in `kineto_unknown`. Collectives are numbered per (rank, group) by
the group's "Seq" when every rank has it, else by order. Kineto times are each host's own wall clock: ranks are
aligned on the collectives' exits (`clockfit.py`).

Imports neither torch nor textual.
"""

from __future__ import annotations

import bisect
import gzip
import os
import re
import sysconfig
import zlib
from dataclasses import dataclass, field

import orjson

from ...errors import TraceError
from ...format import is_user_file
from ...units import fmt_in, fmt_list
from .clockfit import ClockFit, fit_clock_offsets
from ..table.event_table import EventTable, RankInfo
from ..table.rows import extend
from .kineto_device import COMM_KERNEL, GRAPH_LAUNCH, RUNTIME_CATS, Linked, Op, kernel_kind, link_kernels

_SNIFF = 4096
_MARKS = (b'"traceEvents"', b'"schemaVersion"', b'"distributedInfo"')
MAX_TRACE_BYTES = 8 << 30   # decompressed; a profiler trace past this is not read whole into memory
_LIMIT = 1 << 62
_MAX_US = _LIMIT // 1000     # a time in µs up to here (year 2116 as Unix-epoch µs, which older Kineto writes)
_EXACT_US = 2 ** 53 / 1000   # below this a float's µs * 1000 rounds to the right ns; above, split it first
# host ops that are communication: the dispatcher's c10d ops, functional collectives, symmetric memory's, and the
# backends' record_function annotations (nccl:all_reduce, hccl:..., xccl:...); gloo:* are read apart (its execution)
_HOST_OPS = ("c10d::", "nccl:", "hccl:", "xccl:", "rccl:", "_c10d_functional::", "c10d_functional::", "symm_mem::")
_ANNOTATIONS = ("nccl:", "hccl:", "xccl:", "rccl:")
_CARRIERS = frozenset({"nccl:coalesced", "hccl:coalesced", "xccl:coalesced", "rccl:coalesced"})
# ops whose completion is near-simultaneous on every rank of the group: the clock fit's points
_SYMMETRIC = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"})

# c++ type names of the profiler's "Input type" and c10 ScalarType names of "dtype" -> (dtype, bytes per element)
_DTYPES = {
    "float": ("float32", 4), "double": ("float64", 8), "c10::Half": ("float16", 2), "c10::BFloat16": ("bfloat16", 2),
    "long int": ("int64", 8), "long": ("int64", 8), "int64_t": ("int64", 8), "int": ("int32", 4),
    "short int": ("int16", 2), "short": ("int16", 2), "signed char": ("int8", 1), "unsigned char": ("uint8", 1),
    "bool": ("bool", 1), "c10::complex<float>": ("complex64", 8), "c10::complex<double>": ("complex128", 16),
    "Float": ("float32", 4), "Double": ("float64", 8), "Half": ("float16", 2), "BFloat16": ("bfloat16", 2),
    "Long": ("int64", 8), "Int": ("int32", 4), "Short": ("int16", 2), "Char": ("int8", 1), "Byte": ("uint8", 1),
    "Bool": ("bool", 1), "ComplexFloat": ("complex64", 8), "ComplexDouble": ("complex128", 16),
    "Float8_e4m3fn": ("float8_e4m3fn", 1), "Float8_e5m2": ("float8_e5m2", 1),
}
# c10d ops whose first tensor argument is the output: the input is the second
_INPUT_SECOND = frozenset({"allgather_base", "reduce_scatter_base", "alltoall_base", "allgather", "reduce_scatter",
                           "allgather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced", "gather", "scatter",
                           "alltoall", "allgather_coalesced"})
_KERNEL_OP = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
              "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": None, "Send": "send", "Recv": "recv"}
_P2P_NAME = re.compile(r"(\d+)\s*(->|<-)\s*(\d+)")
_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")
_INT_RE = re.compile(r"-?\d+")


def comm_op(name: str) -> str | None:
    """The disttrace op of a profiler name (`c10d::_allgather_base_`, `nccl:send 0->1`, `gloo:all_reduce`, a
    "Collective name" such as `_reduce_scatter_base`), or None for anything that is not a communication op."""
    s = name
    for prefix in _HOST_OPS + ("gloo:",):
        if s.startswith(prefix):
            s = s[len(prefix):]
            break
    s = s.split(" ", 1)[0].strip("_").lower()
    if not s or "wait" in s or s in ("coalesced", "monitored_barrier_"):
        return None
    flat = s.replace("_", "")
    if "reducescatter" in flat:
        return "reduce_scatter"
    if "allgather" in flat:
        return "all_gather"
    if "alltoall" in flat:
        return "all_to_all"
    if "allreduce" in flat:
        return "all_reduce"
    for op in ("broadcast", "barrier", "send", "recv", "reduce", "gather", "scatter"):
        if flat.startswith(op):
            return op
    return None


def _bare(name: str) -> str:
    """`c10d::_allgather_base_` -> `allgather_base`."""
    return name.split("::", 1)[-1].split(" ", 1)[0].strip("_").lower()


# -- claiming ---------------------------------------------------------------------------------------------------

def _head(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF)
            if head[:2] == b"\x1f\x8b":
                f.seek(0)
                with gzip.GzipFile(fileobj=f) as g:
                    return g.read(_SNIFF)
            return head
    except (OSError, EOFError, zlib.error):
        return b""


def is_kineto_file(path: str) -> bool:
    """A JSON (or gzipped JSON) object whose first KB names a Chrome trace's keys."""
    if not os.path.isfile(path):
        return False
    head = _head(path)
    return head.lstrip().startswith(b"{") and any(m in head for m in _MARKS)


def _files_of(path: str) -> list[str]:
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return []
    return [os.path.join(path, n) for n in names if n.endswith((".json", ".json.gz"))
            and os.path.isfile(os.path.join(path, n))]


def source_files(path: str) -> list[str]:
    """The files the events of `path` (a trace file, or a directory of them) come from: what the trace store's
    fingerprint watches (every .json[.gz] of a directory: one that is not a trace makes a warning)."""
    return _files_of(path) if os.path.isdir(path) else [path]


def is_kineto_dir(path: str) -> bool:
    return os.path.isdir(path) and any(is_kineto_file(f) for f in _files_of(path))


def claims(path: str) -> bool:
    """Whether `path` is a profiler trace file or a directory of them (one per rank, any names)."""
    return is_kineto_file(path) or is_kineto_dir(path)


# -- reading ----------------------------------------------------------------------------------------------------

def _read(path: str) -> dict:
    """The trace in one file as a dict; ValueError with a short reason on damage."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TRACE_BYTES + 1)
    except OSError as e:
        raise ValueError(e.strerror or str(e)) from None
    if data[:2] == b"\x1f\x8b":
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = d.decompress(data, MAX_TRACE_BYTES + 1)
            if not d.eof:
                raise ValueError("a torn gzip file (it ends before its compressed stream does)")
            data = out
        except zlib.error as e:
            raise ValueError(f"a damaged gzip file ({e})") from None
    if len(data) > MAX_TRACE_BYTES:
        raise ValueError(f"larger than {MAX_TRACE_BYTES >> 30} GiB")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"not valid JSON, perhaps truncated ({str(e).splitlines()[0][:80]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError("no 'traceEvents' list in it")
    return doc


def _ns(v) -> int | None:
    """A Chrome-trace time in microseconds (float or int) -> integer ns; None when it is not one or out of range.

    Relative times (newer Kineto: after baseTimeNanoseconds) and Unix-epoch µs (older Kineto: 1.69e15 in 2023)
    alike; an epoch time's float holds it to a quarter µs, its ns are taken without the float's rounding."""
    t = type(v)
    if t is float:
        if 0 <= v < _EXACT_US:
            return round(v * 1000)
        if _EXACT_US <= v < _MAX_US:
            i = int(v)
            return i * 1000 + round((v - i) * 1000)
        return None
    if t is int and 0 <= v < _MAX_US:
        return v * 1000
    return None


def _ranks_of(value) -> tuple[int, ...]:
    if isinstance(value, str) and len(value) < 1 << 20:
        vals = [int(x) for x in _INT_RE.findall(value)]
    elif isinstance(value, (list, tuple)):
        vals = [x for x in value if type(x) is int]
    else:
        return ()
    return tuple(v for v in dict.fromkeys(vals) if 0 <= v < 1 << 31)


@dataclass
class _RankTrace:
    path: str
    rank: int
    world: int
    host: str
    backend: str
    pgs: dict            # pg name -> (ranks, desc)
    ops: list            # [Op]
    stacks: bool         # the trace has Python stacks (with_stack=True)
    linked: Linked = field(default_factory=Linked)
    step_ends: list = field(default_factory=list)
    bad_times: int = 0   # events whose ts or dur is not a time in range: skipped, counted
    bad_comm: dict = field(default_factory=dict)   # ... of them, communication ones by name
    dropped: dict = field(default_factory=dict)    # host ops that are no op (Work.wait's record_param_comms): by name
    carriers: int = 0    # coalesced blocks' ends (nccl:coalesced)


def _pg_config(info: dict) -> dict:
    cfg = info.get("pg_config")
    out = {}
    items = cfg.values() if isinstance(cfg, dict) else cfg if isinstance(cfg, list) else ()
    for c in items:
        if isinstance(c, dict):
            name = c.get("pg_name", c.get("name"))
            ranks = _ranks_of(c.get("ranks"))
            if isinstance(name, (str, int)) and ranks:
                out[str(name)[:200]] = (ranks, str(c.get("pg_desc", c.get("desc", "")))[:200])
    return out


_NAME_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def _parse(path: str, doc: dict, fallback_rank: int) -> _RankTrace:
    info = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    rank = info.get("rank")
    base = doc.get("baseTimeNanoseconds")
    base = base if type(base) is int and 0 <= base < _LIMIT else 0
    last = _LIMIT - base     # a time past this, base added, is out of range
    host_ops: dict = {}      # tid -> [(start, end, name, args)]
    gloo: list = []          # (start, end, name, args)
    kernels: list = []       # communication kernels by name
    others: list = []        # every other kernel: communication only if a communication op launched it
    runtime: dict = {}       # correlation -> (tid, ts)
    graphs: dict = {}        # correlation of a cudaGraphLaunch -> (tid, ts, end)
    frames: dict = {}        # tid -> [(start, end, name)]
    step_ends: list = []     # ends of the ProfilerStep#N annotations (profile.step() with a schedule)
    meta_rank = None
    bad = 0
    bad_comm: dict = {}
    for e in doc["traceEvents"]:
        if type(e) is not dict or e.get("ph") != "X":
            continue
        name, cat = e.get("name"), e.get("cat")
        if type(name) is not str or cat == "gpu_user_annotation":
            # (a record_function's span on the device's timeline: an H100 trace has one per nccl:* and per
            # ProfilerStep#N; read as host ops they made each collective twice and each step two)
            continue
        ts, dur = _ns(e.get("ts")), _ns(e.get("dur"))
        if ts is None or ts > last or (dur is None and e.get("dur") is not None):
            bad += 1
            if _is_comm_name(name):
                key = name.split("(", 1)[0][:60]
                bad_comm[key] = bad_comm.get(key, 0) + 1
            continue
        ts += base
        end = ts + (dur or 0)
        args = e.get("args") if type(e.get("args")) is dict else {}
        tid = (e.get("pid"), e.get("tid"))
        if cat == "kernel":
            if name.startswith(COMM_KERNEL):
                kernels.append((ts, end, name, args))
            else:
                others.append((ts, end, name, args))
        elif cat in RUNTIME_CATS:
            c = args.get("correlation")
            if type(c) is int:
                runtime[c] = (tid, ts)
                if name.startswith(GRAPH_LAUNCH):
                    graphs[c] = (tid, ts, end)
        elif name.startswith("ProfilerStep#"):
            step_ends.append(end)
        elif cat == "python_function":
            frames.setdefault(tid, []).append((ts, end, name))
        elif name.startswith("gloo:"):
            if comm_op(name):
                gloo.append((ts, end, name, args))
        elif name == "record_param_comms" or name.startswith(_HOST_OPS):
            if name == "record_param_comms" and type(args.get("Rank")) is int:
                meta_rank = args["Rank"]
            if name == "record_param_comms" or comm_op(name) or name in _CARRIERS:
                host_ops.setdefault(tid, []).append((ts, end, name, args))
    if type(rank) is not int or not 0 <= rank < 1 << 31:
        rank = meta_rank
    if type(rank) is not int:
        m = _NAME_RANK.search(os.path.basename(path)) or re.search(r"(\d+)\D*$", os.path.basename(path))
        rank = int(m.group(1)) if m and len(m.group(1)) < 9 else fallback_rank
    world = info.get("world_size") if type(info.get("world_size")) is int else 0
    host = doc.get("host_name") if type(doc.get("host_name")) is str else ""
    dropped: dict = {}
    ops, carriers = _host_ops(host_ops, dropped)
    rt = _RankTrace(path, rank, world, host[:200], str(info.get("backend", ""))[:40], _pg_config(info), ops,
                    bool(frames), bad_times=bad, bad_comm=bad_comm, dropped=dropped, carriers=len(carriers))
    new, rt.linked = link_kernels(ops, carriers, kernels, others, runtime, graphs)
    rt.ops.extend(new)
    _pair_gloo(rt, gloo)
    if frames:
        _sites(rt.ops, frames)
    rt.step_ends = sorted(step_ends)
    return rt


def _is_comm_name(name: str) -> bool:
    return name == "record_param_comms" or name.startswith(_HOST_OPS + COMM_KERNEL + ("gloo:",))


def _carrier(name: str, args: dict) -> bool:
    """A coalesced block's end: `nccl:coalesced` (or the record_param_comms that names it)."""
    return name in _CARRIERS or (name == "record_param_comms" and args.get("Collective name") == "coalesced")


def _host_ops(by_tid: dict, dropped: dict) -> tuple[list[Op], list[Op]]:
    """The host ops, one per call: on a thread, an op that starts inside the outermost one is part of it (a
    c10d op holds record_param_comms, which holds nccl:*; an nccl:* interval may outlast it). A coalesced block's
    end is a carrier, not an op (returned apart); its interval, which may outlast it, takes in no op after it.
    What is no communication op (a record_param_comms of Work.wait's) is counted in `dropped` by name."""
    out = []
    for tid, evs in by_tid.items():
        evs.sort(key=lambda x: (x[0], -x[1]))
        cur = None
        for ts, end, name, args in evs:
            carrier = _carrier(name, args)
            if cur is None or ts > cur.host_end or (cur.carrier and not carrier):
                cur = Op(tid=tid, host_start=ts, host_end=end, carrier=carrier)
                out.append(cur)
            cur.names.append(name)
            if type(args.get("External id")) is int:
                cur.ext_ids.add(args["External id"])
            if cur.names[0] != name and (name == "record_param_comms" or name.startswith(_ANNOTATIONS)):
                cur.inner = (min(cur.inner[0], ts), max(cur.inner[1], end)) if cur.inner else (ts, end)
            if name == "record_param_comms":
                if "Collective name" in args or not cur.meta:
                    cur.meta = args
                if cur.rpc_dims is None:
                    cur.rpc_dims, cur.rpc_types = args.get("Input Dims"), args.get("Input type")
            elif name.startswith("c10d::") and not cur.concrete:
                ci = args.get("Concrete Inputs")
                cur.concrete = ci if isinstance(ci, list) else []
                cur.c10d_dims, cur.c10d_types = args.get("Input Dims"), args.get("Input type")
            elif name.startswith(_ANNOTATIONS) and cur.ann_dims is None:
                cur.ann_dims, cur.ann_types = args.get("Input Dims"), args.get("Input type")
    ops, carriers = [], []
    for o in out:
        if o.carrier:
            carriers.append(o)
        elif _op_of(o) is not None:
            ops.append(o)
        else:  # a record_param_comms of "wait" (older PyTorch: one without args), or nothing mappable
            coll = o.meta.get("Collective name")
            what = o.names[0] if coll is None else f"{o.names[0]} ({coll})"
            dropped[what[:80]] = dropped.get(what[:80], 0) + 1
    ops.sort(key=lambda o: o.host_start)
    return ops, carriers


def _pair_gloo(rt: _RankTrace, gloo: list) -> None:
    """gloo's executions to the host ops, in issue order per kind (a reduce_scatter runs as gloo's all_reduce);
    one before its host op, or left over, is an op of its own (the window began or ended mid-op)."""
    if not gloo:
        return
    gloo.sort()
    used = [False] * len(gloo)
    by_kind: dict = {}
    for k, g in enumerate(gloo):
        by_kind.setdefault(comm_op(g[2]), []).append(k)
    heads = {kind: 0 for kind in by_kind}
    for op in rt.ops:
        if op.exec_kind or op.host_start is None:
            continue
        kind = _op_of(op)
        for want in (kind, "all_reduce") if kind == "reduce_scatter" else (kind,):
            lst = by_kind.get(want, [])
            h = heads.get(want, 0)
            while h < len(lst) and (used[lst[h]] or gloo[lst[h]][0] < op.host_start):
                h += 1
            if h < len(lst):
                # a reduce_scatter takes gloo's reduce_scatter if one comes before the next all_reduce
                k = lst[h]
                used[k] = True
                heads[want] = h + 1
                ts, end, name, args = gloo[k]
                op.exec_start, op.exec_end, op.exec_kind, op.exec_name, op.exec_args = ts, end, "gloo", name, args
                break
    for k, (ts, end, name, args) in enumerate(gloo):
        if not used[k]:
            rt.ops.append(Op(tid=None, exec_start=ts, exec_end=end, exec_kind="gloo", exec_name=name,
                              exec_args=args))


def _sites(ops: list[Op], frames: dict) -> None:
    """Each host op's call site: the innermost user frame of the Python stack around it (with_stack=True)."""
    for tid, evs in frames.items():
        queries = sorted((o.host_start, k, o) for k, o in enumerate(ops) if o.tid == tid and o.host_start is not None)
        if not queries:
            continue
        evs.sort(key=lambda x: (x[0], -x[1]))
        stack: list = []
        j = 0
        for q, _, op in queries:
            while j < len(evs) and evs[j][0] <= q:
                while stack and stack[-1][1] < evs[j][0]:
                    stack.pop()
                stack.append(evs[j])
                j += 1
            while stack and stack[-1][1] < q:
                stack.pop()
            for _, end, name in reversed(stack):
                m = _FRAME.match(name)
                if m and end >= q and _user_frame(m.group(1)):
                    op.site = f"{m.group(1)[:300]}:{m.group(2)} in {m.group(3)[:100]}"
                    break


_STDLIB = sysconfig.get_paths()["stdlib"]
_NOT_USER = ("torch", "disttrace", "torchgen", "functorch", "typing_extensions.py")


def _user_frame(path: str) -> bool:
    """Whether a frame's file is the user's. The profiler writes paths relative to sys.path's entries
    ("torch/distributed/distributed_c10d.py", "disttrace/tracer/...", "contextlib.py"), so the package is its first
    part and a bare name may be the standard library's."""
    if not path.startswith(("/", "<")) and ":" not in path[:3]:
        head = path.replace("\\", "/").split("/", 1)[0]
        if head in _NOT_USER or ("/" not in path and os.path.exists(os.path.join(_STDLIB, path))):
            return False
    return is_user_file(path)


# -- ops -> events ----------------------------------------------------------------------------------------------

def _op_of(o: Op) -> str | None:
    """The op, from the best source the trace has: the c10d op names what the user called (a barrier runs an
    allreduce), then the collective's metadata, then the other host ops' names (nccl:all_to_all), gloo's
    execution, and last the kernel's name."""
    for n in o.names:
        if n.startswith(("c10d::", "_c10d_functional::", "c10d_functional::")) and comm_op(n):
            return comm_op(n)
    meta = o.meta or o.exec_args
    if isinstance(meta.get("Collective name"), str) and comm_op(meta["Collective name"]):
        return comm_op(meta["Collective name"])
    for n in o.names:
        if comm_op(n):
            return comm_op(n)
    if o.exec_kind == "gloo":
        return comm_op(o.exec_name)
    if o.exec_kind == "kernel":
        return kernel_kind(o.exec_name)
    return None


def _numel(dims) -> int | None:
    if isinstance(dims, list) and all(type(d) is int and 0 <= d < _LIMIT for d in dims):
        n = 1
        for d in dims[:64]:
            n *= d
        return n if n < _LIMIT else None
    return None


def _tensor_bytes(dims, types, idx: int) -> tuple[int, str, list] | None:
    """(bytes, dtype, shape) of the profiler's "Input Dims"/"Input type" entry idx: one tensor ([64] "float"), or a
    TensorList ([[100], [300]]: their total; its dtype from `types` when it names one, else unknown: None)."""
    if not (isinstance(dims, list) and len(dims) > idx and isinstance(types, list) and len(types) > idx):
        return None
    d, t = dims[idx], types[idx]
    dt = _DTYPES.get(t) if isinstance(t, str) else None
    if dt is None:
        return None
    n = _numel(d)
    if n is not None:
        return n * dt[1], dt[0], list(d)
    return None


def _list_bytes(dims, types) -> tuple[int, str, list] | None:
    """The total of the tensors an annotation lists (nccl:all_reduce's [[19618307]], gloo's [[100], [300]] of a
    coalesced all_reduce); the dtype and shape of the first."""
    if not isinstance(dims, list) or not dims or not isinstance(types, list) or len(types) < len(dims):
        return None
    total, first = 0, None
    for k in range(min(len(dims), 1 << 12)):
        got = _tensor_bytes(dims, types, k)
        if got is None:
            return None
        total += got[0]
        first = first or got
    return (total, first[1], first[2]) if first else None


def _bytes_of(o: Op, op: str) -> tuple[int | None, str | None, list | None, str]:
    """(bytes, dtype, shape, source) of what this rank puts in, from the best source the trace has: the collective's
    metadata (record_param_comms' nelems and dtype), gloo's execution, the c10d op's input, the nccl:* annotation's
    tensors, record_param_comms' own first input (older PyTorch); source "" when none says."""
    if op == "barrier":  # (NCCL runs it as an all_reduce of one byte, which its metadata describes)
        return 0, None, None, "op"
    meta = o.meta or o.exec_args
    dt = _DTYPES.get(meta.get("dtype")) if isinstance(meta.get("dtype"), str) else None
    key = "Out msg nelems" if op == "recv" else "In msg nelems"
    n = meta.get(key)
    if dt and type(n) is int and 0 <= n < _LIMIT:
        return n * dt[1], dt[0], None, "metadata"
    if o.exec_kind == "gloo":  # gloo's annotation: the tensors it ran on
        got = _list_bytes(o.exec_args.get("Input Dims"), o.exec_args.get("Input type"))
        if got:
            return (*got, "gloo")
    idx = 1 if o.names and _bare(o.names[0]) in _INPUT_SECOND else 0
    got = _tensor_bytes(o.c10d_dims, o.c10d_types, idx)
    if got:
        return (*got, "c10d")
    got = _list_bytes(o.ann_dims, o.ann_types)
    if got:
        return (*got, "annotation")
    got = _tensor_bytes(o.rpc_dims, o.rpc_types, 0)
    if got:
        return (*got, "record_param_comms")
    return None, None, None, ""


def _concrete_int(o: Op, k: int) -> int | None:
    c = o.concrete
    if len(c) > k and isinstance(c[k], str) and c[k].lstrip("-").isdigit() and len(c[k]) < 10:
        return int(c[k])
    return None


def _group_of(o: Op, rt: _RankTrace) -> tuple[str | None, tuple[int, ...], str]:
    """(group name, its global ranks, description); name None when the trace does not say."""
    meta = o.meta or o.exec_args
    name = meta.get("Process Group Name")
    desc = meta.get("Process Group Description")
    ranks = _ranks_of(meta.get("Process Group Ranks"))
    if isinstance(name, (str, int)) and str(name) != "":
        name = str(name)[:200]
        cfg = rt.pgs.get(name)
        if _truncated(meta.get("Process Group Ranks")):
            ranks = cfg[0] if cfg else _progression(ranks, meta.get("Group size"))
        if not ranks and cfg:
            ranks = cfg[0]
        desc = desc if isinstance(desc, str) else (cfg[1] if cfg else "")
        if not ranks:
            start, stride, size = (meta.get(k) for k in ("Global rank start", "Global rank stride", "Group size"))
            if all(type(v) is int and 0 <= v < 1 << 31 for v in (start, stride, size)) and stride > 0:
                ranks = tuple(range(start, start + stride * size, stride))
        return name, ranks, desc
    return None, (), ""


def _truncated(value) -> bool:
    """Whether "Process Group Ranks" was cut short: record_param_comms writes a group of more than 30 ranks as its
    first 29, "...", and its last ("[0, 1, ..., 28, ..., 127]")."""
    return isinstance(value, str) and "..." in value


def _progression(shown: tuple[int, ...], size) -> tuple[int, ...]:
    """The whole group from a truncated list (first ranks and the last) and its size, when the ranks shown step
    evenly up to the last; () when they do not (the group is then not known from this op)."""
    if type(size) is not int or not 2 < len(shown) <= size < 1 << 31:
        return ()
    head, last = shown[:-1], shown[-1]
    stride = head[1] - head[0]
    if stride <= 0 or any(b - a != stride for a, b in zip(head, head[1:])) or last != head[0] + stride * (size - 1):
        return ()
    return tuple(range(head[0], last + 1, stride))


def _default_group(rt: _RankTrace, present: list[int]) -> tuple[str, tuple[int, ...], str]:
    for name, (ranks, desc) in rt.pgs.items():
        if desc == "default_pg":
            return name, ranks, desc
    if rt.world:
        return "0", tuple(range(rt.world)), "default_pg"
    return "0", tuple(present), "default_pg"


def _events(rt: _RankTrace, present: list[int], guessed: list, sources: dict) -> list[dict]:
    """The normalized events of one rank's ops; `guessed` gets the rank of each op matched as the default group's,
    `sources` counts where the ops' sizes came from."""
    out = []
    for o in rt.ops:
        op = _op_of(o)
        unknown = []
        nometa = o.exec_kind != "gloo" and bool(o.names) and not isinstance(o.meta.get("Collective name"), str)
        if nometa:
            sources["no metadata"] = sources.get("no metadata", 0) + 1
        if o.host_start is None:
            unknown.append("host_time")
        name, ranks, desc = _group_of(o, rt)
        if op is None:  # a SendRecv kernel alone: all_to_all or send/recv, its host op would say
            op = "all_to_all"
            unknown.append("op")
        if name is None:
            if o.host_start is None and o.exec_kind == "kernel" and len({c[0] for c in rt.pgs.values()}) > 1:
                name, ranks, desc = f"unknown:{rt.rank}", (rt.rank,), ""  # which of the job's groups: unknown
            else:
                name, ranks, desc = _default_group(rt, present)
                if not nometa:  # (said with the ops that lack metadata)
                    guessed.append(rt.rank)
            unknown.append("group")
        elif not ranks:  # a truncated list of ranks that could not be rebuilt
            unknown.append("group_ranks")
        nbytes, dtype, shape, src = _bytes_of(o, op)
        sources[src] = sources.get(src, 0) + 1
        if nbytes is None:
            nbytes = 0
            unknown.append("bytes")
        peer = root = None
        ranks_l = list(ranks)
        if op in ("send", "recv"):
            local = None
            for n in o.names:
                m = _P2P_NAME.search(n) if n.startswith("nccl:") else None
                if m:
                    local = int(m.group(3))
            if local is None and o.names and o.names[0].startswith("c10d::"):
                local = _concrete_int(o, 2)
            if local is not None:
                peer = ranks_l[local] if 0 <= local < len(ranks_l) else None
            if peer is None:
                unknown.append("peer")
        elif op == "broadcast":
            local = _concrete_int(o, 2)
            root = ranks_l[local] if local is not None and 0 <= local < len(ranks_l) else None
        elif op in ("reduce", "gather", "scatter"):
            local = _concrete_int(o, 3)
            root = ranks_l[local] if local is not None and 0 <= local < len(ranks_l) else None
        # a kernel's start is the device's arrival; gloo's annotation may start late (an isend's at its wait()):
        # there the host's issue is the arrival, as disttrace records it
        start = o.exec_start if o.exec_start is not None else o.host_start
        if o.exec_kind == "gloo" and o.host_start is not None:
            start = min(o.host_start, start)
        end = o.exec_end if o.exec_start is not None else o.host_end
        if not o.exec_kind:
            unknown.append("device_time")
        # (a graph replays its captured kernels' metadata, "Seq" included, every time: numbered by order instead)
        seq = None if o.how == "graph" else (o.meta or o.exec_args).get("Seq")
        api = _api(o)
        ev = {
            "rank": rt.rank, "host": rt.host, "op": op, "api": "kineto:" + api[:80],
            "group": "world" if desc == "default_pg" else name, "group_ranks": ranks_l,
            "seq": seq if type(seq) is int and 0 <= seq < _LIMIT else None,
            "peer": peer, "root": root, "bytes": nbytes, "dtype": dtype, "shape": shape,
            "async_op": "True" in o.concrete, "start_ns": start, "end_ns": end, "status": "ok",
            "site": o.site, "host_start_ns": o.host_start, "host_end_ns": o.host_end,
        }
        if rt.step_ends:  # as disttrace's markers: the steps ended before the op's issue
            ev["step"] = bisect.bisect_right(rt.step_ends, o.host_start if o.host_start is not None else start)
        if o.exec_kind:
            ev["kineto_exec"] = o.exec_kind
        if o.how:
            ev["kineto_kernel"] = o.how
        if unknown:
            ev["kineto_unknown"] = unknown
        out.append(ev)
    return out


def _api(o: Op) -> str:
    """What issued the op: its c10d op, else its annotation (nccl:all_to_all, under a bare record_param_comms in
    older PyTorch), else its first host op; the graph launch, or the kernel, when it has none."""
    for prefixes in (("c10d::", "_c10d_functional::", "c10d_functional::", "symm_mem::"), _ANNOTATIONS):
        for n in o.names:
            if n.startswith(prefixes):
                return n
    if o.names:
        return o.names[0]
    return "cudaGraphLaunch" if o.how == "graph" else o.exec_name.split("(", 1)[0][:80]


def _number(events: list[dict]) -> None:
    """group_seq: per (rank, group), the group's "Seq" minus its smallest when every collective of the group has
    one (ranks whose window began at different ops still line up), else the order of issue; ids per rank."""
    by_group: dict = {}
    for ev in events:
        if ev["op"] not in ("send", "recv") and not ev["group"].startswith("unknown:"):
            by_group.setdefault(ev["group"], []).append(ev)
    for evs in by_group.values():
        if all(ev["seq"] is not None for ev in evs):
            lo = min(ev["seq"] for ev in evs)
            for ev in evs:
                ev["group_seq"] = ev["seq"] - lo
        else:
            per: dict = {}
            for ev in sorted(evs, key=_issue):
                ev["group_seq"] = per[ev["rank"]] = per.get(ev["rank"], -1) + 1
    per_rank: dict = {}
    for ev in sorted(events, key=_issue):
        ev["id"] = per_rank[ev["rank"]] = per_rank.get(ev["rank"], -1) + 1


def _sizes_from_peers(events: list[dict]) -> None:
    """An op whose size the trace does not say (a kernel alone, older Kineto) takes it from the same collective on
    another rank, for the ops whose ranks all put in the same size; `kineto_unknown` then says "bytes_from_peers"."""
    sizes = {}
    for ev in events:
        if ev.get("group_seq") is not None and "bytes" not in ev.get("kineto_unknown", ()):
            sizes.setdefault((ev["group"], ev["group_seq"]), (ev["op"], ev["bytes"], ev["dtype"], ev["shape"]))
    for ev in events:
        unknown = ev.get("kineto_unknown", ())
        if "bytes" in unknown and ev["op"] in _SAME_SIZE and ev.get("group_seq") is not None:
            hit = sizes.get((ev["group"], ev["group_seq"]))
            if hit and hit[0] == ev["op"]:
                ev["bytes"], ev["dtype"], ev["shape"] = hit[1:]
                unknown[unknown.index("bytes")] = "bytes_from_peers"


_SAME_SIZE = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"})


def _issue(ev: dict) -> tuple:
    t = ev["host_start_ns"] if ev["host_start_ns"] is not None else ev["start_ns"]
    return ev["rank"], t, ev["start_ns"]  # (a graph launch issues its replay's kernels at once: in their order)


# -- clocks -----------------------------------------------------------------------------------------------------

def _align(events: list[dict], table: EventTable, traces: list[_RankTrace]) -> dict[int, ClockFit]:
    exits: dict = {}
    starts: dict = {}
    for ev in events:
        if ev["op"] in _SYMMETRIC and ev.get("group_seq") is not None and ev["end_ns"] is not None \
                and len(ev["group_ranks"]) > 1:
            key = (ev["group"], ev["group_seq"])
            exits.setdefault(key, {})[ev["rank"]] = ev["end_ns"]
            starts.setdefault(key, {})[ev["rank"]] = ev["start_ns"]
    ranks = sorted({rt.rank for rt in traces})
    fits = fit_clock_offsets(exits, ranks, starts)
    for ev in events:
        f = fits.get(ev["rank"])
        if f is None:
            continue
        for key in ("start_ns", "end_ns", "host_start_ns", "host_end_ns"):
            if ev.get(key) is not None:
                ev[key] = f.apply(ev[key])
    return fits


# -- loading ----------------------------------------------------------------------------------------------------

def _fmt_ranks(ranks: list[int]) -> str:
    """'0-3, 5': the ranks, each run of consecutive ones as its first and last (units.fmt_list)."""
    return fmt_list(ranks, None, spans=True)


def load_kineto(paths: list[str], table: EventTable, progress=None, run=None) -> None:
    """Append the communication ops of profiler traces (files, or directories of them) to `table` (unsorted).

    A file named directly that cannot be read raises TraceError; in a directory it is skipped with a warning,
    and TraceError is raised when no file is readable."""
    files: list[tuple[str, bool]] = []
    for p in paths:
        if os.path.isdir(p):
            for f in _files_of(p):
                if is_kineto_file(f):
                    files.append((f, False))
                elif f.endswith(".json.gz") or f.endswith(".json"):
                    try:
                        _read(f)
                        table.warnings.append(f"{f}: skipped, not a PyTorch profiler trace")
                    except ValueError as e:
                        table.warnings.append(f"{f}: skipped, not a readable profiler trace: {e}")
        else:
            files.append((p, True))
    traces: dict[int, _RankTrace] = {}
    for k, (f, named) in enumerate(files):
        if progress is not None:
            progress(k / max(len(files), 1), "reading profiler traces")
        try:
            doc = _read(f)
        except ValueError as e:
            if named:
                raise TraceError(f"{f}: not a readable PyTorch profiler trace: {e}") from None
            table.warnings.append(f"{f}: skipped, not a readable PyTorch profiler trace: {e}")
            continue
        rt = _parse(f, doc, k)
        if rt.rank in traces:
            table.warnings.append(f"{f}: a second trace of rank {rt.rank}; using "
                                  f"{os.path.basename(traces[rt.rank].path)}")
            continue
        traces[rt.rank] = rt
    if not traces:
        raise TraceError(f"{', '.join(paths)}: no readable PyTorch profiler traces")
    present = sorted(traces)
    guessed: list = []
    sources: dict = {}
    events: list[dict] = []
    for r in present:
        events += _events(traces[r], present, guessed, sources)
    if not events:
        raise TraceError(f"{', '.join(paths)}: the profiler traces hold no communication ops; "
                         f"{_what_they_hold([traces[r] for r in present])} (profile with activities CPU and CUDA "
                         "around the job's collectives)")
    _number(events)
    _sizes_from_peers(events)
    fits = _align(events, table, list(traces.values()))
    world = max(rt.world for rt in traces.values())
    for r, rt in traces.items():
        f = fits.get(r)
        damage = ""
        table.ranks[r] = RankInfo(rank=r, host=rt.host, world_size=rt.world, backend=rt.backend, source=rt.path,
                                  clock_offset_ns=f.offset_ns if f else 0,
                                  clock_uncertainty_ns=f.uncertainty_ns if f else 0,
                                  clock_drift_ns=int(f.drift * _span(events, r)) if f and f.drift else None,
                                  damage=damage)
    _say(table, traces, fits, world, present, guessed, events, sources)
    skipped, why = extend(table, events)
    if skipped:
        table.warnings.append(f"skipped {skipped} profiler ops that could not be read ({why})")


def _span(events: list[dict], rank: int) -> int:
    ts = [ev["start_ns"] for ev in events if ev["rank"] == rank]
    return max(ts) - min(ts) if ts else 0


def _top(counts: dict, k: int = 4) -> str:
    top = sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:k]
    return ", ".join(f"{name} ×{n}" for name, n in top) + (", ..." if len(counts) > k else "")


def _what_they_hold(traces: list[_RankTrace]) -> str:
    """What traces without a communication op did hold, by name: said when refusing them."""
    kinds: dict = {}
    for rt in traces:
        try:
            doc = _read(rt.path)
        except ValueError:
            continue
        for e in doc["traceEvents"]:
            if type(e) is dict and e.get("ph") == "X" and type(e.get("name")) is str:
                cat = e.get("cat") if e.get("cat") in ("kernel", "cpu_op", "user_annotation") else "other"
                names = kinds.setdefault(cat, {})
                name = e["name"].split("(", 1)[0][:60]
                names[name] = names.get(name, 0) + 1
    said = [f"{sum(kinds[c].values())} {what} ({_top(kinds[c])})" for c, what in
            (("kernel", "kernels"), ("cpu_op", "CPU ops"), ("user_annotation", "annotations")) if kinds.get(c)]
    bad = sum(rt.bad_times for rt in traces)
    if bad:
        said.append(f"{bad} events skipped for a time out of range")
    dropped: dict = {}
    for rt in traces:
        for name, n in rt.dropped.items():
            dropped[name] = dropped.get(name, 0) + n
    if dropped:
        said.append(f"host ops that are no communication op ({_top(dropped)})")
    return "they hold " + ("; ".join(said) if said else "no complete events ('ph': 'X')")


_SOURCES = (("metadata", "the collective metadata"), ("gloo", "gloo's execution"), ("c10d", "the c10d op's input"),
            ("annotation", "the nccl:* annotation's Input Dims"), ("record_param_comms", "record_param_comms' input"))


def _say_vintage(table, traces, events, sources, graph) -> None:
    """What this vintage of Kineto lacked and where its ops came from instead (notes); what could not be used
    (warnings)."""
    notes = table.notes
    nometa = sources.get("no metadata", 0)
    if nometa:
        multi = any(len({c[0] for c in rt.pgs.values()}) > 1 for rt in traces.values())
        (table.warnings if multi else notes).append(
            f"{nometa} op(s) without collective metadata (record_param_comms without 'Collective name': PyTorch "
            "before 2.1): the op from the CPU op's name, groups assumed to be the world"
            + (", though the job has several groups: ops of the others may be matched wrongly" if multi else ""))
    said = [f"{sources[k]} from {what}" for k, what in _SOURCES if sources.get(k) and k != "metadata"]
    from_peers = sum(1 for ev in events if "bytes_from_peers" in ev.get("kineto_unknown", ()))
    unknown = sum(1 for ev in events if "bytes" in ev.get("kineto_unknown", ()))
    if said or from_peers or unknown:
        notes.append("sizes: " + ", ".join(([f"{sources['metadata']} from the collective metadata"]
                                            if sources.get("metadata") else []) + said
                                           + ([f"{from_peers} from the same collective on another rank"]
                                              if from_peers else [])
                                           + ([f"{unknown} unknown (0 B)"] if unknown else [])))
    by_name = sum(1 for ev in events if ev["api"].startswith("kineto:") and not ev.get("host_start_ns")
                  and ev.get("kineto_exec") == "kernel" and "op" not in ev.get("kineto_unknown", ()))
    if by_name:
        notes.append(f"{by_name} op(s) known only by their kernel's name (no host op): its kind as NCCL names it")
    links = [rt.linked for rt in traces.values()]
    blocks = sum(x.blocks for x in links)
    if blocks:
        notes.append(f"{sum(x.coalesced_ops for x in links)} op(s) of {blocks} coalesced block(s) "
                     "(batch_isend_irecv, _coalescing_manager) timed by their block's kernels, one event per op")
    lost = sum(x.lost_blocks for x in links)
    if lost:
        table.warnings.append(f"{lost} coalesced block(s) launched kernels but none of their ops is in the trace (the "
                              "profiling window began mid-block): not read as ops")
    if graph:
        notes.append(f"{graph} communication kernel(s) replayed by CUDA graphs: one event per kernel per replay; their "
                     "CPU-side issue (host_start_ns) is the cudaGraphLaunch, their group and size the kernel's "
                     "metadata or unknown")
    launched = [name for x in links for name in x.launched]
    if launched:
        names: dict = {}
        for n in launched:
            n = n.split("(", 1)[0][:60]
            names[n] = names.get(n, 0) + 1
        notes.append(f"{len(launched)} op(s) timed by kernels that their communication op launched without an "
                     f"NCCL/RCCL name (custom communication kernels: {_top(names)})")
    dropped: dict = {}
    for rt in traces.values():
        for name, n in rt.dropped.items():
            dropped[name] = dropped.get(name, 0) + n
    if dropped:
        notes.append(f"{sum(dropped.values())} host op(s) that are no communication op, not read as ops: "
                     f"{_top(dropped)} (a record_param_comms alone is Work.wait's in older PyTorch)")


def _say(table, traces, fits, world, present, guessed, events, sources) -> None:
    """What the import could and could not know: warnings for what is missing, notes for the rest."""
    notes = table.notes
    missing = sorted(set(range(world)) - set(present)) if world else []
    if missing:
        table.warnings.append(f"ranks {_fmt_ranks(missing)} have no profiler trace ({len(present)} of {world} "
                              f"ranks' files given): their side of every collective is unknown; what each given "
                              f"rank did is analysed")
    links = [rt.linked for rt in traces.values()]
    kernels = sum(x.kernels for x in links)
    unlinked = sum(x.unlinked for x in links)
    graph = sum(x.graph for x in links)
    on_device = sum(1 for ev in events if ev.get("kineto_exec") == "kernel")
    gloo = sum(1 for ev in events if ev.get("kineto_exec") == "gloo")
    neither = sum(1 for ev in events if not ev.get("kineto_exec"))
    notes.append(f"imported from {len(traces)} PyTorch profiler trace(s): {len(events)} communication ops; "
                 + (f"{on_device} timed by their kernels ({kernels} communication kernels, {unlinked} without "
                    "their host op: kept, what only the host op says marked unknown); " if on_device else "")
                 + (f"{gloo} by gloo's execution on its worker thread; " if gloo else "")
                 + (f"{neither} with no kernel nor execution in the trace, timed by their host op; " if neither
                    else "")
                 + "the host's issue time is kept as host_start_ns")
    bad = sum(rt.bad_times for rt in traces.values())
    if bad:
        comm: dict = {}
        for rt in traces.values():
            for name, n in rt.bad_comm.items():
                comm[name] = comm.get(name, 0) + n
        (table.warnings if comm else notes).append(
            f"skipped {bad} trace event(s) whose time is not a time in range"
            + (f", {sum(comm.values())} of them communication ({_top(comm)})" if comm else " (none communication)"))
    if unlinked:
        table.warnings.append(f"{unlinked} communication kernel(s) have no host op in the trace (the profiling window "
                              "began mid-op, or the trace was filtered): their group, bytes or peer may be unknown")
    _say_vintage(table, traces, events, sources, graph)
    if guessed:
        multi = any(len({c[0] for c in rt.pgs.values()}) > 1 for rt in traces.values())
        (table.warnings if multi else notes).append(
            f"{len(guessed)} op(s) carry no process group (gloo, CPU-only profiling, or a kernel alone): groups "
            "assumed to be the world" + (
                ", though the job has several groups: ops of the others may be matched wrongly" if multi else ""))
    if not any(rt.stacks for rt in traces.values()):
        notes.append("no call sites: the profiler traces have no Python stacks (profile with with_stack=True)")
    else:
        notes.append("call sites are the calling function's frame as the profiler names it: its first line (or, for a "
                     "frame already running when profiling began, the line it was at then), not the line of the call")
    notes.append("no tensor summaries (the profiler records none): NaN/Inf and divergence are not checked")
    aligned = {r: f for r, f in fits.items() if f.points}
    if aligned:
        worst = max(f.uncertainty_ns for f in aligned.values())
        drift = [r for r, f in aligned.items() if f.drift]
        offs = ", ".join(f"rank {r} {fmt_in(f.offset_ns, 'µs', '+.1f')}" for r, f in sorted(aligned.items())[:8])
        notes.append(f"clocks aligned on the collectives' exits to rank {min(fits)}'s: {offs}"
                     f"{' ...' if len(aligned) > 8 else ''}; uncertainty up to {fmt_in(worst, 'µs', '.1f')}"
                     + (f", drift fitted for ranks {_fmt_ranks(sorted(drift))}" if drift else ""))
    left = sorted(set(present) - set(fits))
    if left:
        table.warnings.append(f"ranks {_fmt_ranks(left)} share no collective with the others: their clocks are "
                              "not aligned")


__all__ = ["claims", "comm_op", "is_kineto_dir", "is_kineto_file", "load_kineto", "source_files"]
