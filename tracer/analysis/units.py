"""Human-readable numbers shared by describe(), the report and the viewer."""

from __future__ import annotations


# A quantity's units, largest first: (name, how many of it make one of the quantity's base unit, the smallest
# magnitude shown in it, digits after the point).
_TIME_UNITS = (("s", 1e-9, 1e9, 2), ("ms", 1e-6, 1e6, 2), ("µs", 1e-3, 1e3, 1), ("ns", 1.0, 0.0, 0))  # of ns
# A gloo job on loopback moving a few bytes measures kB/s: "0.0 MB/s" or "3.3e-05 GB/s" says nothing.
_BANDWIDTH_UNITS = (("GB/s", 1.0, 1.0, 2), ("MB/s", 1e3, 1e-4, 1), ("kB/s", 1e6, 1e-6, 1),
                    ("B/s", 1e9, 0.0, 0))  # of GB/s


def _unit(units: tuple, value: float) -> tuple[str, float, int]:
    """(name, factor, digits) of the unit to show value in: the largest whose smallest magnitude it reaches."""
    a = abs(value)
    for name, factor, smallest, digits in units:
        if a >= smallest:
            return name, factor, digits
    return units[-1][0], units[-1][1], units[-1][3]


def ns_unit(ns: float) -> tuple[str, float]:
    """The unit to show ns nanoseconds in (as fmt_ns does), and the factor from ns to it."""
    return _unit(_TIME_UNITS, ns)[:2]


def fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "-"
    unit, factor, digits = _unit(_TIME_UNITS, ns)
    return f"{ns * factor:.{digits}f} {unit}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def gbps_unit(g: float) -> tuple[str, float]:
    """The unit to show g GB/s in (as fmt_gbps does: MB/s from 0.1 MB/s up), and the factor from GB/s to it."""
    return _unit(_BANDWIDTH_UNITS, g)[:2]


def fmt_gbps(g: float | None) -> str:
    if g is None:
        return "-"
    unit, factor, digits = _unit(_BANDWIDTH_UNITS, g)
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


def fmt_list(xs, most: int = 12) -> str:
    """'4, 9, 14, 19', or the first `most` and how many in all."""
    xs = list(xs)
    shown = ", ".join(map(str, xs[:most]))
    return shown + (f", … ({len(xs)} in all)" if len(xs) > most else "")
