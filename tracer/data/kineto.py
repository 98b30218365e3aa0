"""Import PyTorch profiler (Kineto) traces: one Chrome-trace JSON per rank (`*.pt.trace.json[.gz]`) -> normalized
events in an EventTable.

What a trace holds (docs/FORMAT.md, "PyTorch profiler traces", lists the fields and the versions covered):
- host ops (cat `cpu_op`/`user_annotation`, one thread each): the dispatcher's `c10d::allreduce_`...; NCCL's
  `record_param_comms` (args "Collective name", "dtype", "In/Out msg nelems", "Process Group Name/Description/
  Ranks", "Rank", perhaps "Seq") and `nccl:all_reduce`... These nest on the issuing thread: the ones whose start
  lies inside the outermost make one host op, whose interval is the host issue time;
- device work: NCCL kernels (cat `kernel`, `ncclKernel_*`/`ncclDevKernel_*`), linked to their host op by
  "External id" (or by "correlation" to the `cuda_runtime` launch inside it); newer Kineto copies the collective's
  metadata onto the kernel. gloo has no kernels: its worker threads' `gloo:all_reduce`... annotations are the
  execution, paired with the host ops in issue order per kind (gloo runs a group's work in that order);
- `distributedInfo`: rank, world size, pg_config (each group's name, description and ranks).

An op's start/end is its kernel's interval: arrivals and completions as the peers see them (gloo: the host's issue,
as disttrace records it, and the end of gloo's execution); the host interval is kept beside it (`host_start_ns`, `host_end_ns`). A kernel or an execution whose host op
is missing (the profiling window began mid-op) is still an event: what it says is kept, the rest is listed in
`kineto_unknown`. Collectives are numbered per (rank, group) by the group's "Seq" when every rank has it, else
by order. Kineto times are each host's own wall clock: ranks are aligned on the collectives' exits
(`clockfit.py`).

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

from ..format import is_user_file
from .clockfit import ClockFit, fit_clock_offsets
from .events import EventTable, RankInfo, TraceError, extend

_SNIFF = 4096
_MARKS = (b'"traceEvents"', b'"schemaVersion"', b'"distributedInfo"')
MAX_TRACE_BYTES = 8 << 30   # decompressed; a profiler trace past this is not read whole into memory
_LIMIT = 1 << 62
NCCL_KERNEL = ("ncclKernel_", "ncclDevKernel_")
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
    for prefix in ("c10d::", "nccl:", "gloo:", "_c10d_functional::", "c10d_functional::"):
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
    """A Chrome-trace time in microseconds (float) -> integer ns."""
    if type(v) in (int, float) and 0 <= v < 1e15:
        return int(round(v * 1000))
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
class _Op:
    """One communication op on one rank, as its parts are found."""
    tid: object
    host_start: int | None = None
    host_end: int | None = None
    names: list = field(default_factory=list)      # the host ops' names, outermost first
    meta: dict = field(default_factory=dict)       # record_param_comms' (or the kernel's) args
    concrete: list = field(default_factory=list)   # the c10d op's "Concrete Inputs"
    c10d_dims: object = None
    c10d_types: object = None
    ext_ids: set = field(default_factory=set)
    exec_start: int | None = None
    exec_end: int | None = None
    exec_kind: str = ""                             # "kernel", "gloo" or ""
    exec_name: str = ""
    exec_args: dict = field(default_factory=dict)
    site: str | None = None


@dataclass
class _RankTrace:
    path: str
    rank: int
    world: int
    host: str
    backend: str
    pgs: dict            # pg name -> (ranks, desc)
    ops: list            # [_Op]
    stacks: bool         # the trace has Python stacks (with_stack=True)
    kernels: int = 0
    unlinked: int = 0
    step_ends: list = field(default_factory=list)


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
    host_ops: dict = {}      # tid -> [(start, end, name, args)]
    gloo: list = []          # (start, end, name, args)
    kernels: list = []
    runtime: dict = {}       # correlation -> (tid, ts)
    frames: dict = {}        # tid -> [(start, end, name)]
    step_ends: list = []     # ends of the ProfilerStep#N annotations (profile.step() with a schedule)
    meta_rank = None
    for e in doc["traceEvents"]:
        if type(e) is not dict or e.get("ph") != "X":
            continue
        name, cat = e.get("name"), e.get("cat")
        if type(name) is not str or cat == "gpu_user_annotation":
            # (a record_function's span on the device's timeline: an H100 trace has one per nccl:* and per
            # ProfilerStep#N; read as host ops they made each collective twice and each step two)
            continue
        ts, dur = _ns(e.get("ts")), _ns(e.get("dur"))
        if ts is None:
            continue
        ts += base
        end = ts + (dur or 0)
        args = e.get("args") if type(e.get("args")) is dict else {}
        tid = (e.get("pid"), e.get("tid"))
        if cat == "kernel":
            if name.startswith(NCCL_KERNEL):
                kernels.append((ts, end, name, args))
        elif cat in ("cuda_runtime", "cuda_driver", "privateuse1_runtime"):
            c = args.get("correlation")
            if type(c) is int:
                runtime[c] = (tid, ts)
        elif name.startswith("ProfilerStep#"):
            step_ends.append(end)
        elif cat == "python_function":
            frames.setdefault(tid, []).append((ts, end, name))
        elif name.startswith("gloo:"):
            if comm_op(name):
                gloo.append((ts, end, name, args))
        elif name == "record_param_comms" or name.startswith(("c10d::", "nccl:", "_c10d_functional::",
                                                               "c10d_functional::")):
            if name == "record_param_comms" and type(args.get("Rank")) is int:
                meta_rank = args["Rank"]
            if name == "record_param_comms" or comm_op(name):
                host_ops.setdefault(tid, []).append((ts, end, name, args))
    if type(rank) is not int or not 0 <= rank < 1 << 31:
        rank = meta_rank
    if type(rank) is not int:
        m = _NAME_RANK.search(os.path.basename(path)) or re.search(r"(\d+)\D*$", os.path.basename(path))
        rank = int(m.group(1)) if m and len(m.group(1)) < 9 else fallback_rank
    world = info.get("world_size") if type(info.get("world_size")) is int else 0
    host = doc.get("host_name") if type(doc.get("host_name")) is str else ""
    rt = _RankTrace(path, rank, world, host[:200], str(info.get("backend", ""))[:40], _pg_config(info),
                    _host_ops(host_ops), bool(frames))
    _link_kernels(rt, kernels, runtime)
    _pair_gloo(rt, gloo)
    if frames:
        _sites(rt.ops, frames)
    rt.step_ends = sorted(step_ends)
    return rt


def _host_ops(by_tid: dict) -> list[_Op]:
    """The host ops, one per call: on a thread, an op that starts inside the outermost one is part of it (a
    c10d op holds record_param_comms, which holds nccl:*; an nccl:* interval may outlast it)."""
    out = []
    for tid, evs in by_tid.items():
        evs.sort(key=lambda x: (x[0], -x[1]))
        cur = None
        for ts, end, name, args in evs:
            if cur is None or ts > cur.host_end:
                cur = _Op(tid=tid, host_start=ts, host_end=end)
                out.append(cur)
            cur.names.append(name)
            if type(args.get("External id")) is int:
                cur.ext_ids.add(args["External id"])
            if name == "record_param_comms":
                cur.meta = args
            elif name.startswith("c10d::") and not cur.concrete:
                ci = args.get("Concrete Inputs")
                cur.concrete = ci if isinstance(ci, list) else []
                cur.c10d_dims, cur.c10d_types = args.get("Input Dims"), args.get("Input type")
    # an op whose only part is a record_param_comms of "wait" (or nothing mappable) is not a communication op
    out = [o for o in out if _op_of(o) is not None or not o.names]
    out.sort(key=lambda o: o.host_start)
    return out


def _link_kernels(rt: _RankTrace, kernels: list, runtime: dict) -> None:
    """Each NCCL kernel to its host op (External id, else the launch's correlation inside a host op's interval);
    a kernel with neither is an op of its own."""
    by_ext = {x: o for o in rt.ops for x in o.ext_ids}
    by_tid: dict = {}
    for o in rt.ops:
        by_tid.setdefault(o.tid, []).append(o)
    starts = {tid: [o.host_start for o in os_] for tid, os_ in by_tid.items()}
    orphans = []
    for ts, end, name, args in kernels:
        rt.kernels += 1
        op = by_ext.get(args.get("External id"))
        if op is None and args.get("correlation") in runtime:
            tid, t = runtime[args["correlation"]]
            cands = by_tid.get(tid, [])
            k = bisect.bisect_right(starts.get(tid, []), t) - 1
            if k >= 0 and cands[k].host_start <= t <= cands[k].host_end:
                op = cands[k]
        if op is None:
            rt.unlinked += 1
            op = _Op(tid=None)
            orphans.append(op)
        if op.exec_start is None or ts < op.exec_start:
            op.exec_start = ts
        op.exec_end = max(op.exec_end or 0, end)
        op.exec_kind, op.exec_name = "kernel", name
        if "Collective name" in args:
            op.exec_args = args
    rt.ops.extend(orphans)


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
            rt.ops.append(_Op(tid=None, exec_start=ts, exec_end=end, exec_kind="gloo", exec_name=name,
                              exec_args=args))


def _sites(ops: list[_Op], frames: dict) -> None:
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

def _op_of(o: _Op) -> str | None:
    for n in o.names:                     # the c10d op names what the user called (a barrier runs an allreduce)
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
        kind = re.split(r"[_(]", o.exec_name.split("_", 1)[1], maxsplit=1)[0] if "_" in o.exec_name else ""
        return _KERNEL_OP.get(kind)
    return None


def _numel(dims) -> int | None:
    if isinstance(dims, list) and all(type(d) is int and 0 <= d < _LIMIT for d in dims):
        n = 1
        for d in dims[:64]:
            n *= d
        return n if n < _LIMIT else None
    return None


def _bytes_of(o: _Op, op: str) -> tuple[int | None, str | None, list | None]:
    """(bytes, dtype, shape) of what this rank puts in, from the best source the trace has."""
    meta = o.meta or o.exec_args
    dt = _DTYPES.get(meta.get("dtype")) if isinstance(meta.get("dtype"), str) else None
    key = "Out msg nelems" if op == "recv" else "In msg nelems"
    n = meta.get(key)
    if dt and type(n) is int and 0 <= n < _LIMIT:
        return n * dt[1], dt[0], None
    if o.exec_kind == "gloo":  # gloo's annotation: the tensor it ran on
        dims, types = o.exec_args.get("Input Dims"), o.exec_args.get("Input type")
        if isinstance(dims, list) and dims and isinstance(types, list) and types:
            n, dt = _numel(dims[0]), _DTYPES.get(types[0]) if isinstance(types[0], str) else None
            if n is not None and dt:
                return n * dt[1], dt[0], list(dims[0])
        elif op == "barrier":
            return 0, None, None
    if op == "barrier":
        return 0, None, None
    dims, types = o.c10d_dims, o.c10d_types
    idx = 1 if o.names and _bare(o.names[0]) in _INPUT_SECOND else 0
    if isinstance(dims, list) and len(dims) > idx and isinstance(types, list) and len(types) > idx:
        d, t = dims[idx], types[idx]
        dt = _DTYPES.get(t) if isinstance(t, str) else None
        if dt and _numel(d) is not None:
            return _numel(d) * dt[1], dt[0], list(d)
    return None, None, None


def _concrete_int(o: _Op, k: int) -> int | None:
    c = o.concrete
    if len(c) > k and isinstance(c[k], str) and c[k].lstrip("-").isdigit() and len(c[k]) < 10:
        return int(c[k])
    return None


def _group_of(o: _Op, rt: _RankTrace) -> tuple[str | None, tuple[int, ...], str]:
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


def _events(rt: _RankTrace, present: list[int], guessed: list) -> list[dict]:
    out = []
    for o in rt.ops:
        op = _op_of(o)
        unknown = []
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
                guessed.append(rt.rank)
            unknown.append("group")
        elif not ranks:  # a truncated list of ranks that could not be rebuilt
            unknown.append("group_ranks")
        nbytes, dtype, shape = _bytes_of(o, op)
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
        seq = (o.meta or o.exec_args).get("Seq")
        api = o.names[0] if o.names else o.exec_name.split("(", 1)[0][:80]
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
        if unknown:
            ev["kineto_unknown"] = unknown
        out.append(ev)
    return out


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
    return ev["rank"], t


# -- clocks -----------------------------------------------------------------------------------------------------

def _align(events: list[dict], table: EventTable, traces: list[_RankTrace]) -> dict[int, ClockFit]:
    exits: dict = {}
    for ev in events:
        if ev["op"] in _SYMMETRIC and ev.get("group_seq") is not None and ev["end_ns"] is not None \
                and len(ev["group_ranks"]) > 1:
            exits.setdefault((ev["group"], ev["group_seq"]), {})[ev["rank"]] = ev["end_ns"]
    ranks = sorted({rt.rank for rt in traces})
    fits = fit_clock_offsets(exits, ranks)
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
    parts, k = [], 0
    while k < len(ranks):
        j = k
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[k]) if j == k else f"{ranks[k]}-{ranks[j]}")
        k = j + 1
    return ", ".join(parts)


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
    events: list[dict] = []
    for r in present:
        events += _events(traces[r], present, guessed)
    if not events:
        raise TraceError(f"{', '.join(paths)}: the profiler traces hold no communication ops "
                         "(profile with activities CPU and CUDA around the job's collectives)")
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
    _say(table, traces, fits, world, present, guessed, events)
    skipped, why = extend(table, events)
    if skipped:
        table.warnings.append(f"skipped {skipped} profiler ops that could not be read ({why})")


def _span(events: list[dict], rank: int) -> int:
    ts = [ev["start_ns"] for ev in events if ev["rank"] == rank]
    return max(ts) - min(ts) if ts else 0


def _say(table, traces, fits, world, present, guessed, events) -> None:
    """What the import could and could not know: warnings for what is missing, notes for the rest."""
    notes = table.notes
    missing = sorted(set(range(world)) - set(present)) if world else []
    if missing:
        table.warnings.append(f"ranks {_fmt_ranks(missing)} have no profiler trace ({len(present)} of {world} "
                              f"ranks' files given): their side of every collective is unknown; what each given "
                              f"rank did is analysed")
    kernels = sum(rt.kernels for rt in traces.values())
    unlinked = sum(rt.unlinked for rt in traces.values())
    on_device = sum(1 for ev in events if ev.get("kineto_exec") == "kernel")
    gloo = sum(1 for ev in events if ev.get("kineto_exec") == "gloo")
    notes.append(f"imported from {len(traces)} PyTorch profiler trace(s): {len(events)} communication ops; "
                 + (f"{on_device} timed by their NCCL kernel ({kernels} kernels, {unlinked} without their host op: "
                    "kept, what only the host op says marked unknown); " if kernels else "")
                 + (f"{gloo} by gloo's execution on its worker thread; " if gloo else "")
                 + "the host's issue time is kept as host_start_ns")
    if unlinked:
        table.warnings.append(f"{unlinked} NCCL kernel(s) have no host op in the trace (the profiling window began "
                              "mid-op, or the trace was filtered): their group, bytes or peer may be unknown")
    if guessed:
        multi = any(len({c[0] for c in rt.pgs.values()}) > 1 for rt in traces.values())
        (table.warnings if multi else notes).append(
            f"{len(guessed)} op(s) carry no process group (no record_param_comms: gloo or CPU-only profiling): "
            "matched as the default group's" + (", though the job has several groups: ops of the others may be "
                                                "matched wrongly" if multi else ""))
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
        offs = ", ".join(f"rank {r} {f.offset_ns / 1e3:+.1f} us" for r, f in sorted(aligned.items())[:8])
        notes.append(f"clocks aligned on the collectives' exits to rank {min(fits)}'s: {offs}"
                     f"{' ...' if len(aligned) > 8 else ''}; uncertainty up to {worst / 1e3:.1f} us"
                     + (f", drift fitted for ranks {_fmt_ranks(sorted(drift))}" if drift else ""))
    left = sorted(set(present) - set(fits))
    if left:
        table.warnings.append(f"ranks {_fmt_ranks(left)} share no collective with the others: their clocks are "
                              "not aligned")


__all__ = ["claims", "comm_op", "is_kineto_dir", "is_kineto_file", "load_kineto", "source_files"]
