"""Human-readable numbers shared by describe(), the report and the viewer."""

from __future__ import annotations


def fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "-"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


# Bandwidth units, largest first: (name, how many of it make 1 GB/s). A gloo job on loopback moving a few bytes
# measures kB/s: "0.0 MB/s" or "3.3e-05 GB/s" says nothing.
GBPS_UNITS = (("GB/s", 1.0), ("MB/s", 1e3), ("kB/s", 1e6), ("B/s", 1e9))


def gbps_unit(g: float) -> tuple[str, float]:
    """The unit to show g GB/s in, and the factor from GB/s to it (MB/s from 0.1 MB/s up)."""
    if g >= 1:
        return GBPS_UNITS[0]
    if g >= 1e-4:
        return GBPS_UNITS[1]
    if g >= 1e-6:
        return GBPS_UNITS[2]
    return GBPS_UNITS[3]


def fmt_gbps(g: float | None) -> str:
    if g is None:
        return "-"
    unit, factor = gbps_unit(g)
    digits = 2 if unit == "GB/s" else 0 if unit == "B/s" else 1
    return f"{g * factor:.{digits}f} {unit}"


def fmt_ranks(ranks) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) > 8:
        return f"ranks {', '.join(map(str, ranks[:8]))} … ({len(ranks)} ranks)"
    return "ranks " + ", ".join(map(str, ranks))


def fmt_ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st, 112th."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
