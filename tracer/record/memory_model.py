"""What the memory formula needs, found as the job makes it (`disttrace run --memory`): never by a change to the script.

- Modules: torch.nn.Module.register_parameter (what setting a Parameter on a module calls) is wrapped: a module's
  parameters are the tracker's parameters from their creation, whatever wraps them or not (a hand-written scheme).
- Optimizers: torch.optim.Optimizer.__init__ is wrapped (its parameters become the tracker's), and the global
  optimizer-step hooks (torch.optim.optimizer.register_optimizer_step_pre_hook/post_hook) sample around each step
  and, at an optimizer's first step, write an "mopt" record: the parameters it holds here, its state's bytes per
  value (the entries shaped like their parameter: Adam's exp_avg and exp_avg_sq) and the rest (scalars: Adam's step).
  A ZeroRedundancyOptimizer's record names its local optimizer (`inner`), the group's size and its own partition.
  Master copies (mixed precision's fp32 weights): an optimizer's parameter that is fp32, not a module's, and copies a
  16-bit module parameter (shaped like one not matched yet, or flat: as many values as the 16-bit parameters
  together, or 1/N of them) is a master copy: counted as optimizer state (the seed's K = 4 + 4 + 4 counts it so); the
  optimizer's other parameters (a free fp32 temperature, a LayerNorm kept in fp32) stay parameters. Its record says
  `master` (the copies) and the modules' parameters (`model`): a hand-written ZeRO-1 (each rank's master copy 1/N of
  the model) is recognized from them.
- DDP: DistributedDataParallel.__init__ is wrapped: an "mwrap" record (scheme "ddp": the module's parameters and
  buffers by dtype, the group's size), and the module's parameters and buffers become the tracker's.
- FSDP2: FSDPParamGroup.__init__ (what every fully_shard call makes, however the job imported fully_shard) is
  wrapped: an "mwrap" record (scheme "fsdp2": the unsharded sizes, the local shards, the shard group's size, the
  mixed-precision dtypes), and the sharded parameters become the tracker's.
Classes are patched, not module attributes: a job that imported a name before tracing started sees the patch too.
Everything is put back by uninstall(). Docs: docs/FORMAT.md "Memory"; the formulas: docs/ANALYSIS.md "Memory".
"""

from __future__ import annotations

import functools
import time
import weakref
from collections import Counter

import torch

from ..format import MEM_AT_OPT, MEM_KINDS, MEM_OPT, MEM_WRAP

OPTIMIZER = MEM_KINDS.index("optimizer")
_Tensor = torch.Tensor
_tracker = None  # memory.py's Tracker while memory is recorded (memory.py imports this module, never the reverse)

_patched: list[tuple[object, str, object]] = []  # (owner, name, original) to put back
_handles: list = []
_seen_opts: weakref.WeakSet = weakref.WeakSet()  # optimizers whose "mopt" record is written
_masters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # optimizer -> its master copies (weakrefs)
_module_params: dict[int, weakref.ref] = {}      # id -> the modules' parameters registered while traced
SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def local(t):
    """The plain tensor whose storage holds t's values: a DTensor's local shard, else t (None: no storage here)."""
    if type(t) is _Tensor or type(t) is torch.nn.Parameter:
        return t
    inner = getattr(t, "_local_tensor", None)
    if inner is not None:
        return inner
    return t if isinstance(t, _Tensor) and not hasattr(t, "__tensor_flatten__") else None


def install(tracker) -> None:
    global _tracker
    _tracker = tracker
    _patch(torch.nn.Module, "register_parameter", _after_register_parameter)
    _patch(torch.optim.Optimizer, "__init__", _after_optimizer_init)
    from torch.nn.parallel import DistributedDataParallel

    _patch(DistributedDataParallel, "__init__", _after_ddp_init)
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
    except ImportError:  # a torch without FSDP2
        FSDPParamGroup = None
    if FSDPParamGroup is not None:
        _patch(FSDPParamGroup, "__init__", _after_fsdp_group_init)
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    _handles.append(register_optimizer_step_pre_hook(_pre_step))
    _handles.append(register_optimizer_step_post_hook(_post_step))


def uninstall() -> None:
    global _tracker
    _tracker = None
    while _patched:
        owner, name, orig = _patched.pop()
        setattr(owner, name, orig)
    while _handles:
        _handles.pop().remove()
    _module_params.clear()


def _patch(owner, name: str, after) -> None:
    """owner.name runs as before, then after(self, *args, **kwargs) (which never raises into the job)."""
    orig = getattr(owner, name)

    @functools.wraps(orig)
    def wrapper(self, *args, **kwargs):
        result = orig(self, *args, **kwargs)
        memory_run(after, self, *args, **kwargs)
        return result

    setattr(owner, name, wrapper)
    _patched.append((owner, name, orig))


def memory_run(fn, *args, **kwargs) -> None:
    """fn(...) with the tracker, if memory is recorded; a failure of ours stops the recording, never the job."""
    t = _tracker
    if t is None or t.broken:
        return
    t._guard(lambda: fn(t, *args, **kwargs))


def by_dtype(tensors) -> dict[str, int]:
    """Number of values by dtype ("float32": n) of the tensors' local parts."""
    counts: Counter = Counter()
    for p in tensors:
        p = local(p)
        if p is not None:
            counts[str(p.dtype).removeprefix("torch.")] += p.numel()
    return dict(counts)


def _group_size(group) -> int:
    import torch.distributed as dist

    try:
        return dist.get_world_size(group)
    except Exception:  # noqa: BLE001
        return 1


# -- what the job makes ----------------------------------------------------------------------------------------
def _after_register_parameter(t, module, name, param=None, *args, **kwargs) -> None:
    if isinstance(param, _Tensor):
        _module_params[id(param)] = weakref.ref(param)
        t.add_param(param)


def _is_module_param(p) -> bool:
    ref = _module_params.get(id(p))
    return ref is not None and ref() is p


def _live_module_params() -> list:
    alive = [w() for w in list(_module_params.values())]
    return [p for p in alive if p is not None]


def _master_copies(params) -> list:
    """The optimizer's parameters that are fp32 copies of the job's 16-bit module parameters (mixed precision's master
    weights, optimizer state in the seed's accounting): fp32, not a module's, and shaped like a 16-bit module
    parameter (each copied once, over all optimizers: a free fp32 tensor beside a full set of copies finds none
    left), or flat with as many values as the 16-bit parameters together, or 1/N of them (a hand-written ZeRO-1's
    shard, N the world's size). Anything else fp32 (a learnable temperature, a LayerNorm kept in fp32) is a parameter."""
    sixteen = [m for m in _live_module_params() if local(m) is not None and local(m).dtype in SIXTEEN_BIT]
    if not sixteen:
        return []
    shapes = Counter(tuple(m.shape) for m in sixteen) - Counter(tuple(c.shape) for c in _copies())
    total = sum(m.numel() for m in sixteen)
    world = max(1, _group_size(None))
    flat = {total, total // world, -(-total // world)}
    copies = []
    for p in params:
        lp = local(p)
        if lp is None or lp.dtype != torch.float32 or _is_module_param(p):
            continue
        shape = tuple(p.shape)
        if shapes[shape] > 0:
            shapes[shape] -= 1
            copies.append(p)
        elif p.dim() == 1 and p.numel() in flat:
            copies.append(p)
    return copies


def _copies() -> list:
    """The master copies the optimizers hold so far."""
    alive = (w() for ws in list(_masters.values()) for w in ws)
    return [p for p in alive if p is not None]


def _after_optimizer_init(t, opt, *args, **kwargs) -> None:
    params = [p for g in opt.param_groups for p in g["params"]]
    copies = _master_copies(params)
    if copies:
        _masters[opt] = [weakref.ref(p) for p in copies]
    ids = {id(p) for p in copies}
    for p in params:
        if id(p) in ids:
            t.count(p, OPTIMIZER)
        else:
            t.add_param(p)


def _after_ddp_init(t, ddp, *args, **kwargs) -> None:
    module = ddp.module
    params, buffers = list(module.parameters()), list(module.buffers())
    for p in params + buffers:
        t.add_param(p)
    t.rec.write({"k": MEM_WRAP, "t": time.monotonic_ns(), "scheme": "ddp", "params": by_dtype(params),
                 "buffers": by_dtype(buffers), "group_size": _group_size(getattr(ddp, "process_group", None)),
                 "bucket_view": bool(getattr(ddp, "gradient_as_bucket_view", False))})


def _after_fsdp_group_init(t, group, *args, **kwargs) -> None:
    fsdp_params = list(group.fsdp_params)
    orig: Counter = Counter()
    for fp in fsdp_params:
        n = 1
        for d in fp._orig_size:
            n *= d
        orig[str(fp.sharded_param.dtype).removeprefix("torch.")] += n
        t.add_param(fp.sharded_param)
    mp = getattr(group, "mp_policy", None)
    info = getattr(group, "mesh_info", None)
    t.rec.write({"k": MEM_WRAP, "t": time.monotonic_ns(), "scheme": "fsdp2", "params": dict(orig),
                 "local": by_dtype(fp.sharded_param for fp in fsdp_params),
                 "group_size": int(getattr(info, "shard_mesh_size", 1) or 1),
                 "param_dtype": _dtype_name(getattr(mp, "param_dtype", None)),
                 "reduce_dtype": _dtype_name(getattr(mp, "reduce_dtype", None))})


def _dtype_name(d) -> str | None:
    return None if d is None else str(d).removeprefix("torch.")


# -- optimizer steps ------------------------------------------------------------------------------------------
def _pre_step(opt, args, kwargs) -> None:
    t = _tracker
    if t is None or t.broken:
        return
    memory_run(_register_params, opt)
    t._guard(t.sample, MEM_AT_OPT, f"{type(opt).__name__}.step")
    t.in_opt += 1


def _post_step(opt, args, kwargs) -> None:
    t = _tracker
    if t is None or t.broken:
        return
    t.in_opt = max(0, t.in_opt - 1)
    memory_run(_count_state, opt)
    t._guard(t.sample, MEM_AT_OPT, f"{type(opt).__name__}.step end")


def _register_params(t, opt) -> None:
    if opt not in _seen_opts and opt not in _masters:
        _after_optimizer_init(t, opt)  # (an optimizer made before tracing started)


def _count_state(t, opt) -> None:
    """Its state is the optimizer's; at its first step, its "mopt" record."""
    state = getattr(opt, "state", None) or {}
    for s in state.values():
        for v in s.values() if isinstance(s, dict) else ():
            if isinstance(v, torch.Tensor):
                t.count(v, OPTIMIZER)
    if opt in _seen_opts:
        return
    _seen_opts.add(opt)
    params = [p for g in opt.param_groups for p in g["params"]]
    per_value, scalar_bytes = _state_shape(opt, params)
    rec = {"k": MEM_OPT, "t": time.monotonic_ns(), "id": id(opt), "cls": type(opt).__name__,
           "params": by_dtype(params), "state": per_value, "scalar_bytes": scalar_bytes}
    if opt in _masters:
        rec["master"] = by_dtype(p for p in (w() for w in _masters[opt]) if p is not None)
        rec["model"] = by_dtype(_live_module_params())
    inner = getattr(opt, "optim", None)
    if isinstance(inner, torch.optim.Optimizer):  # ZeroRedundancyOptimizer: its local optimizer holds the state
        rec["inner"] = id(inner)
        rec["group_size"] = int(getattr(opt, "world_size", 0) or _group_size(getattr(opt, "process_group", None)))
        rec["local"] = by_dtype(p for g in inner.param_groups for p in g["params"])
    t.rec.write(rec)


def _state_shape(opt, params) -> tuple[dict[str, int], int]:
    """The state's bytes per parameter value, by entry (the entries with as many values as their parameter), and
    the bytes of the other entries (scalars such as Adam's step), from the state as the first step made it."""
    per_value: dict[str, int] = {}
    scalar = 0
    state = getattr(opt, "state", None) or {}
    for p in params:
        s = state.get(p)
        if not isinstance(s, dict):
            continue
        lp = local(p)
        for name, v in s.items():
            lv = local(v) if isinstance(v, torch.Tensor) else None
            if lv is None:
                continue
            if lp is not None and lv.numel() == lp.numel() and lv.numel() > 1:
                per_value.setdefault(name, lv.element_size())
            else:
                scalar += lv.numel() * lv.element_size()
    return per_value, scalar
