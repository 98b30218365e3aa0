"""Tensor summaries: min, max, mean, L2 norm, NaN and Inf counts, a checksum, and (mode `full`) the values of
small tensors, so that a teaching demo can show `[2, 2]` and `[6, 3]`.

CPU tensors are summarized at once. CUDA tensors are never synchronized on the hot path: the statistics are
computed by a few kernels into one small device tensor, copied non-blocking into pinned host memory behind a
CUDA event, and `Pending.resolve()` (called later, off the training thread) turns them into the dict.
The checksum is the sum of the tensors' bit patterns modulo 2**48: equal bits give equal checksums, which is
what divergence detection needs (ranks that should hold the same values but do not).
"""

from __future__ import annotations

import torch

MAX_VALUES = 64  # full mode records the values of tensors with at most this many elements in all

_INT_VIEW = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}


def flatten(obj) -> list:
    """The tensors in a tensor, a list of tensors or a list of lists of tensors."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    out = []
    for x in obj or ():
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            out.extend(t for t in x if isinstance(t, torch.Tensor))
    return out


def _values(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().tolist()
    return [_values(x) for x in obj]


def _stats_tensor(tensors: list) -> torch.Tensor:
    """[min, max, sum, sumsq, nan, inf, checksum, numel] as one float64 tensor on the tensors' device.

    Few passes over the data, in its own dtype with float64 accumulation: on CPU the common all-finite case
    takes four (sum, min/max, norm, bits); on CUDA nothing branches on a value (that would synchronize)."""
    parts = []
    for t in tensors:
        t = t.detach()
        n = t.numel()
        if n == 0:
            continue
        flat = t.reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.to(torch.uint8)
        view_dtype = _INT_VIEW.get(flat.element_size())
        if view_dtype is not None and flat.is_contiguous():
            bits = flat.view(view_dtype).sum(dtype=torch.int64)
        else:
            bits = torch.zeros((), dtype=torch.int64, device=flat.device)
        zero = torch.zeros((), dtype=torch.float64, device=flat.device)
        if flat.is_floating_point():
            total = flat.sum(dtype=torch.float64)
            # A NaN or Inf anywhere makes the float64 sum NaN or Inf, so on CPU one sum tells whether the
            # masking passes are needed (on CUDA, reading it would synchronize: always mask there).
            if flat.device.type == "cpu" and bool(torch.isfinite(total)):
                lo, hi = torch.aminmax(flat)
                sumsq = torch.linalg.vector_norm(flat, dtype=torch.float64) ** 2
                nan_f = inf_f = zero
            else:  # min/max over finite values (+inf/-inf when there are none), sums without them
                finite = torch.isfinite(flat)
                nonfinite = n - finite.sum()
                nan = torch.isnan(flat).sum()
                lo = torch.where(finite, flat, float("inf")).amin()
                hi = torch.where(finite, flat, float("-inf")).amax()
                vals = torch.where(finite, flat, 0.0)
                total = vals.sum(dtype=torch.float64)
                sumsq = torch.linalg.vector_norm(vals, dtype=torch.float64) ** 2
                nan_f, inf_f = nan.to(torch.float64), (nonfinite - nan).to(torch.float64)
        else:
            lo, hi = torch.aminmax(flat)
            total = flat.sum(dtype=torch.float64)
            sumsq = (flat.to(torch.float64) ** 2).sum()
            nan_f = inf_f = zero
        parts.append(torch.stack([
            lo.to(torch.float64), hi.to(torch.float64), total, sumsq, nan_f, inf_f,
            torch.remainder(bits, 1 << 48).to(torch.float64),  # exact in float64
            zero + n,
        ]))
    if not parts:
        return torch.zeros(0, dtype=torch.float64)
    if len(parts) == 1:
        return parts[0]
    p = torch.stack(parts)
    return torch.stack([p[:, 0].min(), p[:, 1].max(), p[:, 2].sum(), p[:, 3].sum(), p[:, 4].sum(), p[:, 5].sum(),
                        p[:, 6].sum(), p[:, 7].sum()])


def _as_dict(vals: list) -> dict | None:
    if not vals:
        return None
    mn, mx, s, ss, nan, inf, chk, n = vals
    n = int(n)
    finite = mn <= mx  # min is +inf and max -inf when no element is finite
    return {
        "numel": n,
        "min": mn if finite else None,
        "max": mx if finite else None,
        "mean": s / (n - nan - inf) if n > nan + inf else None,
        "norm": ss ** 0.5,
        "nan": int(nan),
        "inf": int(inf),
        "checksum": int(chk) % (1 << 48),
    }


class Pending:
    """A CUDA summary in flight: resolve() waits for its copy (call it off the training thread)."""

    __slots__ = ("host", "event", "values")

    def __init__(self, host: torch.Tensor, event, values):
        self.host, self.event, self.values = host, event, values

    def resolve(self) -> dict | None:
        self.event.synchronize()
        d = _as_dict(self.host.tolist())
        if d is not None and self.values is not None:
            d["values"] = _values(self.values)
        return d


def summarize(obj, full: bool):
    """Summary of the tensors in obj: a dict (CPU), a Pending (CUDA) or None (no tensors)."""
    while isinstance(obj, (list, tuple)) and len(obj) == 1:
        obj = obj[0]  # c10d passes [tensor] (or [[t0, t1]]): show the values as the user's call had them
    tensors = flatten(obj)
    if not tensors:
        return None
    small = full and sum(t.numel() for t in tensors) <= MAX_VALUES
    if tensors[0].device.type == "cuda":
        # on the tensors' device: a completion thread's current device is cuda:0 whatever the op's was
        with torch.no_grad(), torch.cuda.device(tensors[0].device):
            stats = _stats_tensor(tensors)
            host = torch.empty(stats.shape, dtype=stats.dtype, pin_memory=True)
            host.copy_(stats, non_blocking=True)
            values = _clone_structure(obj) if small else None
            event = torch.cuda.Event()
            event.record()
        return Pending(host, event, values)
    with torch.no_grad():
        d = _as_dict(_stats_tensor(tensors).tolist())
    if d is not None and small:
        d["values"] = _values(obj)
    return d


def _clone_structure(obj):
    """Device copies of small tensors, taken now so that later in-place ops do not change what we show."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    return [_clone_structure(x) for x in obj]
