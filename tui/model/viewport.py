"""The visible time window: integer zoom level z shows span / 2**z of the trace, starting offset_ns after t0."""

from __future__ import annotations

MAX_ZOOM = 40


def window_ns(span_ns: int, zoom: int) -> float:
    return max(1.0, span_ns / (2 ** zoom))


def max_zoom(span_ns: int, width: int) -> int:
    """Deepest level at which a cell still covers at least 1 ns."""
    z = 0
    while z < MAX_ZOOM and span_ns / (2 ** (z + 1)) >= max(1, width):
        z += 1
    return z


def clamp_offset(span_ns: int, zoom: int, offset_ns: float) -> int:
    w = window_ns(span_ns, zoom)
    return int(max(0.0, min(offset_ns, span_ns - w)))


def zoom_to(span_ns: int, zoom: int, offset_ns: int, new_zoom: int, anchor_ns: float | None = None) -> tuple[int, int]:
    """New (zoom, offset) keeping anchor_ns (relative to t0; default: the window centre) at the same place."""
    w = window_ns(span_ns, zoom)
    if anchor_ns is None:
        anchor_ns = offset_ns + w / 2
    frac = (anchor_ns - offset_ns) / w if w else 0.5
    frac = min(1.0, max(0.0, frac))
    nw = window_ns(span_ns, new_zoom)
    return new_zoom, clamp_offset(span_ns, new_zoom, anchor_ns - frac * nw)


def follow(span_ns: int, zoom: int, offset_ns: int, t_ns: int, margin: float = 0.1) -> int:
    """Offset that keeps time t_ns (relative to t0) inside the window, moving as little as possible."""
    w = window_ns(span_ns, zoom)
    lo, hi = offset_ns + w * margin, offset_ns + w * (1 - margin)
    if t_ns < lo:
        return clamp_offset(span_ns, zoom, t_ns - w * margin)
    if t_ns > hi:
        return clamp_offset(span_ns, zoom, t_ns - w * (1 - margin))
    return offset_ns


def nice_tick(ns_per_cell: float, min_cells: int = 12) -> int:
    """A 1/2/5 x 10^k ns tick interval at least min_cells cells apart."""
    target = ns_per_cell * min_cells
    step = 1
    while True:
        for m in (1, 2, 5):
            if step * m >= target:
                return step * m
        step *= 10
