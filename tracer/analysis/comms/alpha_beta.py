"""Theory beside measurement: the volume each op must move, and an alpha-beta model fitted from the trace.

Volume per rank with ring algorithms (the seeds' table, per rank rather than in total): all_reduce 2(N-1)/N*S,
all_gather / reduce_scatter / all_to_all / gather / scatter (N-1)/N*S, broadcast / reduce / send S — i.e.
nccl-tests' busbw factor times S (see comms/bandwidth.py; comms/collectives.py keeps it per instance as volume_bytes). The
model t = alpha + beta*volume is fitted per op from the trace's own instances: the lower quartile of duration per
power-of-two size bucket (what the link achieves without interference), then least squares over the buckets. An
instance far above it, and beyond the job's own spread of that op and size, is flagged slow."""

from __future__ import annotations

from ...data.table.columns import order_by, run_starts, typecode
from ...data.table import NONE
from ..core.results import NULL, AlphaBeta
from ..core.tables import CollectiveTable, P2PTable

SLOW_FACTOR = 4.0       # slower than 4x the model...
SLOW_MIN_NS = 1_000_000  # ...and by more than 1 ms (scheduler noise on a loaded box is that large)...
OUTLIERS = 6.0           # ...and beyond the median of its op and size by this many of their spreads
MIN_SPREAD_SAMPLES = 4   # instances of an op and size needed to know their spread


def _bit_lengths(x):
    """int.bit_length of each of x (a numpy int64 column), in numpy: frexp's exponent of |x|, less one where the
    float rounded |x| up to the next power of two."""
    import numpy as np

    m = np.abs(x).astype(np.uint64)
    e = np.frexp(m.astype(np.float64))[1].astype(np.int64)
    e[m == 0] = 0
    over = e > 0
    e[over] -= np.left_shift(np.uint64(1), (e[over] - 1).astype(np.uint64)) > m[over]
    return e


def _fit(x, y) -> tuple[float, float]:
    """alpha, beta of one op's points (x: volume, y: time; numpy int64 columns in the trace's order): least
    squares over each volume bucket's lower quartile (_quartiles)."""
    xs, ys = _quartiles(x, y)
    if len(xs) < 2:
        return float(min(ys)), 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    beta = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    if beta <= 0:
        return float(min(ys)), 0.0
    alpha = my - beta * mx
    if alpha < 0:  # force through the origin rather than predict negative times for small messages
        beta = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
        alpha = 0.0
    return alpha, beta


def _quartiles(x, y) -> tuple[list[int], list[int]]:
    """One point per power-of-two bucket of volume (int.bit_length), the buckets in order of their first point:
    the lower quartile of its times (what the link achieves without interference), i.e. of its points sorted by
    time, stably, the len // 4-th. As (volumes, times)."""
    import numpy as np

    bucket = _bit_lengths(x)
    order = order_by(bucket, y)  # by bucket, then time (ties in the trace's order)
    starts = np.flatnonzero(run_starts(bucket[order]))
    counts = np.diff(np.append(starts, len(order)))
    picked = order[starts + counts // 4]
    picked = picked[np.argsort(np.minimum.reduceat(order, starts))]  # the buckets by their first point
    return x[picked].tolist(), y[picked].tolist()


def fit_models(collectives: CollectiveTable, p2p: P2PTable) -> dict[str, AlphaBeta]:
    """The alpha-beta model of each op kind (collectives by their op, messages as "send"), in order of each
    kind's first complete instance."""
    import numpy as np

    points: dict[str, list] = {}
    codes = np.frombuffer(collectives.op.codes, np.dtype(typecode(collectives.op.codes)))
    volume, d = (np.frombuffer(c, np.int64) for c in (collectives.volume_bytes, collectives.duration_ns))
    done = d != NULL
    present, first = np.unique(codes[done], return_index=True)
    for code in present[np.argsort(first, kind="stable")].tolist():
        rows = done & (codes == code)
        points.setdefault(collectives.op.values[code], []).append((volume[rows], d[rows]))
    nbytes, transfer = (np.frombuffer(c, np.int64) for c in (p2p.bytes, p2p.transfer_ns))
    if (known := transfer != NONE).any():
        points.setdefault("send", []).append((nbytes[known], transfer[known]))
    models = {}
    for op, parts in points.items():
        x, y = (np.concatenate([p[i] for p in parts]) for i in (0, 1))
        alpha, beta = _fit(x, y)
        models[op] = AlphaBeta(op, alpha, beta, len(x))
    return models


def typical_spread(keys, durations, k: float = 0.0):
    """Per instance, the median of its key's durations (NULL ones left out) plus k times their spread (the median
    absolute deviation, as a standard deviation); +inf where the key has fewer than MIN_SPREAD_SAMPLES (no spread
    known: nothing stands beyond it). The report shows it with k = 1."""
    import numpy as np

    out = np.full(len(keys), np.inf)
    ok = durations != NULL
    for key in np.unique(keys[ok]).tolist():
        sel = ok & (keys == key)
        if sel.sum() < MIN_SPREAD_SAMPLES:
            continue
        x = durations[sel].astype(np.float64)
        med = np.median(x)
        out[keys == key] = med + k * 1.4826 * np.median(np.abs(x - med))
    return out


def flag_slow(collectives: CollectiveTable, models: dict[str, AlphaBeta]) -> None:
    """Fill the model_ns and slow columns."""
    import numpy as np

    # (in numpy, an op kind at a time, not a Python loop over every instance)
    codes, volume, d = map(np.asarray, (collectives.op.codes, collectives.volume_bytes, collectives.duration_ns))
    model_c, slow_c = np.frombuffer(collectives.model_ns, np.float64), np.frombuffer(collectives.slow, np.uint8)
    for code, op in enumerate(collectives.op.values):
        m = models.get(op)
        if m is None:
            continue
        k = np.flatnonzero(codes == code)
        model = m.alpha_ns + m.beta_ns_per_byte * volume[k].astype(np.float64)
        model_c[k] = model
        # and past the job's own spread of that op and size: the model is fitted on the same trace, latency only
        # where every message has one size, so ordinary jitter on a busy machine stands several times above it
        slow_c[k] = ((d[k] != NULL) & (d[k] > SLOW_FACTOR * model) & (d[k] - model > SLOW_MIN_NS)
                     & (d[k] > typical_spread(volume[k], d[k], OUTLIERS)))
