"""The formula that predicts a rank's parameters', gradients' and optimizer state's bytes (docs/ANALYSIS.md "Memory").

Its inputs are what record/memory_model.py found as the job made them: the wrappers ("mwrap": DDP, FSDP2's
fully_shard) and each optimizer at its first step ("mopt"). Ψ: the model's parameter values (DDP's module, FSDP2's
unsharded sizes, else the optimizer's); bytes per value from their dtypes; K: the optimizer state's bytes per value
(its entries shaped like their parameter: Adam's exp_avg and exp_avg_sq, 4 + 4 in fp32; scalars such as Adam's step
are left out of K and said); N: the group's size. The schemes:
- DDP (replicated):        params b_p·Ψ, grads b_g·Ψ, optimizer K·Ψ
- ZeRO-1 (ZeroRedundancyOptimizer): params b_p·Ψ, grads b_g·Ψ, optimizer K·(the values of its own partition of whole
  parameters), KΨ/N beside
- ZeRO-3 (FSDP2 fully_shard): each b·Ψ/N, optimizer K·Ψ/N
- master copies (an optimizer over fp32 copies of 16-bit module parameters, record/memory_model.py): the copies are
  optimizer state, their bytes per value in K (the seed's 4 + 4 + 4); Ψ the modules' parameters. With no wrapper,
  each rank's copies 1/N of Ψ (N the world's size) is a hand-written ZeRO-1: optimizer K·(its copies' values).
A module's buffers count as parameters (DDP's are added to the prediction and said).
"""

from __future__ import annotations

from ...units import fmt_bytes
from .results import Formula, KindCheck

DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
               "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16, "float8_e4m3fn": 1,
               "float8_e5m2": 1}
CHECKED = ("params", "grads", "optimizer")


def values(by_dtype: dict) -> int:
    return sum(int(n) for n in by_dtype.values()) if isinstance(by_dtype, dict) else 0


def value_bytes(by_dtype: dict) -> float:
    """Bytes per value of these dtypes' values (their mean, weighted by count)."""
    n = values(by_dtype)
    return sum(DTYPE_BYTES.get(d, 4) * int(c) for d, c in by_dtype.items()) / n if n else 0.0


def _fsdp(wraps: list[dict]) -> dict | None:
    """The fully_shard calls' records of a rank, summed (one record per call)."""
    found = [w for w in wraps if w.get("scheme") == "fsdp2"]
    if not found:
        return None
    params: dict[str, int] = {}
    for w in found:
        for d, n in (w.get("params") or {}).items():
            params[d] = params.get(d, 0) + int(n)
    return {"params": params, "group_size": max(int(w.get("group_size") or 1) for w in found),
            "param_dtype": next((w.get("param_dtype") for w in found if w.get("param_dtype")), None)}


def _optimizer(opts: list[dict]) -> tuple[dict | None, dict | None]:
    """(the optimizer that holds the state, the ZeroRedundancyOptimizer around it or None)."""
    inner_ids = {o.get("inner") for o in opts if o.get("inner") is not None}
    zero = next((o for o in opts if o.get("inner") is not None), None)
    holder = next((o for o in opts if o.get("id") in inner_ids), None) if zero else None
    if holder is None:
        holder = next((o for o in opts if o.get("id") not in inner_ids and o.get("inner") is None), None)
    return holder, zero


def formula(memory) -> Formula | None:
    """The formula of the trace's ranks (importers/memory_files.MemoryTrace); None when nothing was found."""
    ranks = memory.ranks
    if not ranks:
        return None
    first = ranks[min(ranks)]
    ddp = next((w for w in first.wraps if w.get("scheme") == "ddp"), None)
    fsdp = _fsdp(first.wraps)
    holder, zero = _optimizer(first.optimizers)
    unrecognized, notes = [], []
    k = float(sum(int(v) for v in (holder.get("state") or {}).values())) if holder else 0.0
    master = (holder or {}).get("master")
    if master:
        k += value_bytes(master)
        notes.append(f"{holder.get('cls')}'s fp32 master copies of the model's 16-bit parameters ({values(master):,} "
                     f"values) are optimizer state, their {_num(value_bytes(master))} bytes a value in K")
    if holder is None:
        unrecognized.append("no optimizer stepped: K (the optimizer state's bytes per value) is unknown")
    elif not holder.get("state"):
        unrecognized.append(f"{holder.get('cls')}'s state has no entry shaped like its parameters: K = 0")
    if holder is not None and holder.get("scalar_bytes"):
        notes.append(f"{holder.get('cls')}'s scalar state (its step counts: {fmt_bytes(holder['scalar_bytes'])}) "
                     "is left out of K")
    if fsdp is not None:
        scheme, params = "fsdp2", fsdp["params"]
        n = fsdp["group_size"]
        if zero is not None:
            unrecognized.append("a ZeroRedundancyOptimizer over fully_shard's parameters: counted as FSDP2's")
    elif zero is not None:
        scheme, params, n = "zero1", (ddp or {}).get("params") or zero.get("params") or {}, int(zero.get("group_size") or 1)
    elif ddp is not None:
        scheme, params, n = "ddp", ddp.get("params") or {}, int(ddp.get("group_size") or 1)
    elif master:
        scheme, params, n = _hand_written(holder, int((getattr(first, "meta", None) or {}).get("world_size") or 1))
        if scheme == "zero1":
            notes.append(f"a hand-written ZeRO-1: each rank's master copy is 1/{n} of the model's parameters")
    elif holder is not None:
        scheme, params, n = "replicated", holder.get("params") or {}, 1
        unrecognized.append("no DDP, ZeroRedundancyOptimizer or FSDP2 found: the parameters are taken as "
                            "replicated, the optimizer's own")
    else:
        return Formula("unknown", 0, 0.0, 1, {}, "", {}, unrecognized=unrecognized + [
            "no DDP, ZeroRedundancyOptimizer, FSDP2 or optimizer found"])
    psi = values(params)
    bp = value_bytes(params)
    bpv = {"params": bp, "grads": bp}
    buffers = int(value_bytes(ddp.get("buffers") or {}) * values(ddp.get("buffers") or {})) if ddp else 0
    predicted, even = {}, None
    for r, m in ranks.items():
        if scheme == "fsdp2":
            predicted[r] = {"params": round(bp * psi / n), "grads": round(bp * psi / n), "optimizer": round(k * psi / n)}
        else:
            opt_values = psi
            if scheme == "zero1":
                h, z = _optimizer(m.optimizers)
                opt_values = values((z or zero).get("local") or {}) if zero else values((h or holder).get("master"))
                even = round(k * psi / n)
            predicted[r] = {"params": round(bp * psi) + buffers, "grads": round(bp * psi),
                            "optimizer": round(k * opt_values)}
    if buffers:
        notes.append(f"the module's buffers ({fmt_bytes(buffers)}) are counted as parameters")
    if scheme == "ddp" or (scheme == "zero1" and ddp is not None):
        notes.append("DDP's gradient buckets are communication buffers beside the gradients: about b_g·Ψ more "
                     f"({fmt_bytes(round(bp * psi))}) unless gradient_as_bucket_view")
    if scheme == "fsdp2":
        notes.append("FSDP2's all-gathered (unsharded) units are communication buffers while they are in use: "
                     "the peak holds the largest unit or two beside the shards")
    return Formula(scheme, psi, k, n, bpv, _expression(scheme, bp, k), predicted, even, unrecognized, notes)


def _hand_written(holder: dict, world: int) -> tuple[str, dict, int]:
    """(scheme, Ψ's dtypes, N) of master copies with no wrapper: 1/world of the model's values is ZeRO-1's shard."""
    model = holder.get("model") or {}
    mine, psi = values(holder.get("master") or {}), values(model)
    if world > 1 and mine * world == psi:
        return "zero1", model, world
    return "replicated", model or holder.get("master") or {}, 1


def _num(x: float) -> str:
    return f"{x:g}"


def _expression(scheme: str, bp: float, k: float) -> str:
    """The formula with its numbers: the seed's (2 + 2 + K)Ψ with this job's bytes per value and K."""
    b, kk = _num(bp), _num(k)
    if scheme == "fsdp2":
        return f"({b} + {b} + {kk})Ψ/N"
    if scheme == "zero1":
        return f"({b} + {b})Ψ + {kk}Ψ/N"
    return f"({b} + {b} + {kk})Ψ"


def checks(f: Formula | None, ranks: dict) -> list[KindCheck]:
    """Predicted against measured, per rank, for the kinds the formula predicts."""
    if f is None:
        return []
    out = []
    for r, m in sorted(ranks.items()):
        pred = f.predicted.get(r)
        if not pred:
            continue
        for kind in CHECKED:
            measured = getattr(m, f"{kind}_bytes")
            p = pred[kind]
            out.append(KindCheck(r, kind, p, measured, measured / p if p else float("inf") if measured else 1.0))
    return out
