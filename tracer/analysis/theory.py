"""Theory beside measurement: the volume each op must move, and an alpha-beta model fitted from the trace.

Volume per rank with ring algorithms (the seeds' table, per rank rather than in total): all_reduce 2(N-1)/N*S,
all_gather / reduce_scatter / all_to_all / gather / scatter (N-1)/N*S, broadcast / reduce / send S — i.e.
nccl-tests' busbw factor times S (see bandwidth.py; collectives.py keeps it per instance as volume_bytes). The
model t = alpha + beta*volume is fitted per op from the trace's own instances: the lower quartile of duration per
power-of-two size bucket (what the link achieves without interference), then least squares over the buckets. An
instance far above it is flagged slow."""

from __future__ import annotations

from ..data.events import NONE
from .model import NULL, AlphaBeta
from .tables import CollectiveTable, P2PTable

SLOW_FACTOR = 4.0       # slower than 4x the model...
SLOW_MIN_NS = 1_000_000  # ...and by more than 1 ms (scheduler noise on a loaded box is that large)


def _fit(points: list[tuple[int, int]]) -> tuple[float, float]:
    buckets: dict[int, list[tuple[int, int]]] = {}
    for x, y in points:
        buckets.setdefault(x.bit_length(), []).append((x, y))
    xs, ys = [], []
    for pts in buckets.values():
        pts.sort(key=lambda p: p[1])
        x, y = pts[len(pts) // 4]
        xs.append(x)
        ys.append(y)
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


def fit_models(collectives: CollectiveTable, p2p: P2PTable) -> dict[str, AlphaBeta]:
    points: dict[str, list[tuple[int, int]]] = {}
    ops = collectives.op.values
    for code, volume, d in zip(collectives.op.codes, collectives.volume_bytes, collectives.duration_ns):
        if d != NULL:
            points.setdefault(ops[code], []).append((volume, d))
    for b, tr in zip(p2p.bytes, p2p.transfer_ns):
        if tr != NONE:
            points.setdefault("send", []).append((b, tr))
    models = {}
    for op, pts in points.items():
        alpha, beta = _fit(pts)
        models[op] = AlphaBeta(op, alpha, beta, len(pts))
    return models


def flag_slow(collectives: CollectiveTable, models: dict[str, AlphaBeta]) -> None:
    """Fill the model_ns and slow columns."""
    ops, model_c, slow_c = collectives.op.values, collectives.model_ns, collectives.slow
    for k, (code, volume, d) in enumerate(zip(collectives.op.codes, collectives.volume_bytes,
                                              collectives.duration_ns)):
        m = models.get(ops[code])
        if m is None:
            continue
        model_c[k] = model = m.alpha_ns + m.beta_ns_per_byte * volume
        slow_c[k] = d != NULL and d > SLOW_FACTOR * model and d - model > SLOW_MIN_NS
