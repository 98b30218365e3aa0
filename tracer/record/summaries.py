"""Tensor summaries: min, max, mean, L2 norm, NaN and Inf counts, a checksum, and (mode `full`) the values of
small tensors, so that a teaching demo can show `[2, 2]` and `[6, 3]`.

CPU tensors are summarized at once (_stats_cpu: float32 sums for float32 and narrower floats, each reduction
read with .item()). CUDA tensors are never synchronized on the hot path: the statistics are
computed by a few kernels into one small device tensor, copied non-blocking into pinned host memory behind a
CUDA event, and `Pending.resolve()` (called later, off the training thread: for_record hands it to background.py's
resolver, which writes an "s" record) turns them into the dict.
The checksum is the sum of the tensors' bytes read as 64-bit words (mod 2**64), folded to 48 bits: equal bits
give equal checksums, which is what divergence detection needs (ranks that should hold the same values but do
not), and a changed bit changes it (but for a 2**-48 chance).
"""

from __future__ import annotations

import math

import torch

from . import background

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


def _flat(t: torch.Tensor) -> torch.Tensor:
    """t as one contiguous row of real numbers (complex as pairs, bool as uint8)."""
    flat = t.detach().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return flat if flat.is_contiguous() else flat.contiguous()


def _words_sum(flat: torch.Tensor) -> torch.Tensor:
    """The sum (mod 2**64) of flat's bytes read as 64-bit words, or as words of its element size when they do
    not divide into 64-bit ones. Widening smaller words to int64 is much slower on CPU than this."""
    try:
        if (flat.numel() * flat.element_size()) % 8 == 0:
            return flat.view(torch.int64).sum()
    except RuntimeError:  # an offset that is not 8-byte aligned
        pass
    view_dtype = _INT_VIEW.get(flat.element_size())
    if view_dtype is None:
        return torch.zeros((), dtype=torch.int64, device=flat.device)
    return flat.view(view_dtype).sum(dtype=torch.int64)


def _stats_tensor(tensors: list) -> torch.Tensor:
    """[min, max, sum, sumsq, nan, inf, words' sum low 32 bits, high 32 bits, numel] as one float64 tensor on the
    tensors' device (CUDA: see _stats_cpu for CPU tensors). Nothing branches on a value, which would synchronize
    with the device: NaN and Inf are always masked out, and sums are taken in float64."""
    parts = []
    for t in tensors:
        n = t.numel()
        if n == 0:
            continue
        flat = _flat(t)
        words = _words_sum(flat)
        zero = torch.zeros((), dtype=torch.float64, device=flat.device)
        if flat.is_floating_point():
            # min/max over finite values (+inf/-inf when there are none), sums without them
            finite = torch.isfinite(flat)
            nonfinite = flat.numel() - finite.sum()  # components: a complex element is two
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
            (words & 0xFFFFFFFF).to(torch.float64), ((words >> 32) & 0xFFFFFFFF).to(torch.float64),  # exact
            zero + n,
        ]))
    if not parts:
        return torch.zeros(0, dtype=torch.float64)
    if len(parts) == 1:
        return parts[0]
    p = torch.stack(parts)
    return torch.stack([p[:, 0].min(), p[:, 1].max(), p[:, 2].sum(), p[:, 3].sum(), p[:, 4].sum(), p[:, 5].sum(),
                        p[:, 6].sum(), p[:, 7].sum(), p[:, 8].sum()])


def _stats_cpu(tensors: list) -> list:
    """What _stats_tensor computes, for CPU tensors, as Python numbers: each reduction is read at once with
    .item() instead of being stacked into a tensor (on small tensors the tensor ops themselves are the cost)."""
    mn, mx, total, sumsq, nan, inf, words, numel = math.inf, -math.inf, 0.0, 0.0, 0, 0, 0, 0
    for t in tensors:
        n = t.numel()
        if n == 0:
            continue
        flat = _flat(t)
        numel += n
        words += _words_sum(flat).item()
        if flat.is_floating_point():
            acc = torch.float64 if flat.dtype == torch.float64 else torch.float32
            s = flat.sum(dtype=acc).item()
            if math.isfinite(s):  # no NaN or Inf (or a float32 overflow, handled with the non-finite below)
                lo, hi = torch.aminmax(flat)
                mn, mx = min(mn, lo.item()), max(mx, hi.item())
                ss = torch.linalg.vector_norm(flat, dtype=acc).item() ** 2
                if not math.isfinite(ss):  # finite values whose squares overflow float32
                    ss = torch.linalg.vector_norm(flat, dtype=torch.float64).item() ** 2
                total, sumsq = total + s, sumsq + ss
                continue
            finite = torch.isfinite(flat)
            n_finite = int(finite.sum().item())
            n_nan = int(torch.isnan(flat).sum().item())
            nan, inf = nan + n_nan, inf + (flat.numel() - n_finite - n_nan)  # components: complex has two
            if n_finite:
                vals = flat[finite]
                lo, hi = torch.aminmax(vals)
                mn, mx = min(mn, lo.item()), max(mx, hi.item())
                total += vals.sum(dtype=torch.float64).item()
                sumsq += torch.linalg.vector_norm(vals, dtype=torch.float64).item() ** 2
        else:
            lo, hi = torch.aminmax(flat)
            mn, mx = min(mn, lo.item()), max(mx, hi.item())
            wide = flat.to(torch.float64)
            total += wide.sum().item()
            sumsq += torch.dot(wide, wide).item()
    if not numel:
        return []
    return [mn, mx, total, sumsq, nan, inf, words, numel]


_MASK48 = (1 << 48) - 1


def _from_device(vals: list) -> list:
    """_stats_tensor's values (read back from the device) as _stats_cpu gives them: the words' sum in one int."""
    if not vals:
        return []
    return vals[:6] + [(int(vals[7]) << 32) + int(vals[6]), vals[8]]


def _as_dict(vals: list) -> dict | None:
    """[min, max, sum, sumsq, nan, inf, words' sum, numel] as the summary dict."""
    if not vals:
        return None
    mn, mx, s, ss, nan, inf, words, n = vals
    n = int(n)
    words &= (1 << 64) - 1
    finite = mn <= mx  # min is +inf and max -inf when no element is finite
    return {
        "numel": n,
        "min": mn if finite else None,
        "max": mx if finite else None,
        "mean": s / (n - nan - inf) if n > nan + inf else None,
        "norm": ss ** 0.5,
        "nan": int(nan),
        "inf": int(inf),
        # 64 bits folded to 48, so that JSON readers that hold numbers as doubles (JavaScript) keep it exact
        "checksum": (words ^ (words >> 48)) & _MASK48,
    }


class Pending:
    """A CUDA summary in flight: resolve() waits for its copy (call it off the training thread)."""

    __slots__ = ("host", "event", "values")

    def __init__(self, host: torch.Tensor, event, values):
        self.host, self.event, self.values = host, event, values

    def resolve(self) -> dict | None:
        self.event.synchronize()
        d = _as_dict(_from_device(self.host.tolist()))
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
    if tensors[0].is_cuda:
        # on the tensors' device: a completion thread's current device is cuda:0 whatever the op's was
        with torch.no_grad(), torch.cuda.device(tensors[0].device):
            stats = _stats_tensor(tensors)
            host = torch.empty(stats.shape, dtype=stats.dtype, pin_memory=True)
            host.copy_(stats, non_blocking=True)
            values = _clone_structure(obj) if small else None
            event = torch.cuda.Event()
            event.record()
        return Pending(host, event, values)
    d = _as_dict(_stats_cpu(tensors))  # on detached tensors: no autograd state to switch off
    if d is not None and small:
        d["values"] = _values(obj)
    return d


WARM_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32, torch.uint8)


def warm_up() -> None:
    """Load the summary kernels on the current CUDA device now, when tracing starts (init_process_group), if the
    job already uses CUDA. With CUDA's lazy loading a kernel is loaded at its first launch, and that waits for
    the device to go idle: the first traced op with summaries returned only once the kernels queued before it were
    done (later ops at once), and a device hang hid behind it. Never creates a CUDA context."""
    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return
        device = torch.device("cuda", torch.cuda.current_device())
        for dtype in WARM_DTYPES:
            summarize(torch.ones(2, dtype=dtype, device=device), full=False).resolve()
    except Exception:  # noqa: BLE001 - only a warm-up
        pass


def for_record(full: bool, write, ev_id: int, which: str, obj) -> dict | None:
    """The summary of obj to put in event ev_id's record now (`which`: "in" or "out"); a CUDA one is resolved
    later, off the training thread, and written (write: the recorder's) as an "s" record."""
    s = summarize(obj, full)
    if isinstance(s, Pending):
        background.resolver().add(write, ev_id, which, s)
        return None
    return s


def _clone_structure(obj):
    """Device copies of small tensors, taken now so that later in-place ops do not change what we show."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    return [_clone_structure(x) for x in obj]
