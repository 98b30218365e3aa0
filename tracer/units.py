"""Human-readable numbers: the one home of how disttrace writes times, sizes, bandwidths and lists of ranks, for the
report, the analysis' sentences (describe, problems), the importers' notes, the viewer and the demos' narrations.
Beside format.py, below data/: it imports nothing of disttrace's, nor numpy, so that every layer may write a number.

One vocabulary: every text names its units from the tables below and takes the largest unit the value reaches. What
differs with the room a text has is only a Style: how many digits, whether a space stands before the unit, how
small a unit it goes down to. The report writes "12.30 ms" and "1.5 KiB"; the viewer's narrow columns "12.3ms" and
"1.5KiB"; the narrations "12.3 ms" (no finer than µs) and, counting bytes in powers of ten as the texts they quote
do, "4.19 MB".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction


def _vocabulary(*units: tuple[str, int | Fraction]) -> dict[str, tuple[float, float]]:
    """name -> (its size in the quantity's base unit, how many of it make one base unit), each the float nearest
    the exact number: 1 ms is 1e6 ns and 1 ns is 1e-6 ms, to the last bit as those literals are."""
    return {name: (float(size), float(1 / Fraction(size))) for name, size in units}


TIME = _vocabulary(("s", 10**9), ("ms", 10**6), ("µs", 10**3), ("ns", 1))  # of ns
BYTES = _vocabulary(("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10),
                    ("GB", 10**9), ("MB", 10**6), ("kB", 10**3), ("B", 1))  # of bytes
BANDWIDTH = _vocabulary(("GB/s", 1), ("MB/s", Fraction(1, 10**3)), ("kB/s", Fraction(1, 10**6)),
                        ("B/s", Fraction(1, 10**9)))  # of GB/s
_ANY = {**TIME, **BYTES, **BANDWIDTH}


@dataclass(frozen=True)
class Style:
    """How one kind of text writes one quantity.

    `shown`: the units it uses, largest first, each (name, format spec of the number) or (name, spec, the smallest
    magnitude shown in it, in the base unit; else the unit's size); the last takes every smaller value. `divide`:
    the number is the value divided by the unit's size, else the value times the unit's factor (the two round
    differently in the last digit now and then: each text keeps the digits it always wrote)."""

    quantity: dict[str, tuple[float, float]]
    shown: tuple[tuple, ...]
    sep: str = " "
    missing: str = "-"
    divide: bool = False

    def unit(self, value: float) -> tuple[str, str]:
        """(name, format spec) of the unit to show value in: the largest whose smallest magnitude it reaches."""
        return self.shown[self._index(abs(value))][:2]

    def _index(self, a: float) -> int:
        for k in range(len(self.shown)):
            if a >= self._smallest(k):
                return k
        return len(self.shown) - 1

    def _smallest(self, k: int) -> float:
        name, _, *smallest = self.shown[k]
        return smallest[0] if smallest else self.quantity[name][0]

    def format(self, value: float | None) -> str:
        if value is None:
            return self.missing
        k = self._index(abs(value))
        number = self._number(value, k)
        # a value just under a larger unit that its digits round up to it, or that three significant digits can
        # only write with an exponent, is written in that unit: 999.6 µs is "1ms", not "1e+03µs" nor "1000ns";
        # 1,048,575 B is "1MiB", not "1.02e+03KiB"
        if k and ("e" in number or abs(float(number)) * self.quantity[self.shown[k][0]][0] >= self._smallest(k - 1)):
            k -= 1
            number = self._number(value, k)
        return f"{number}{self.sep}{self.shown[k][0]}"

    def _number(self, value: float, k: int) -> str:
        name, spec = self.shown[k][:2]
        size, factor = self.quantity[name]
        return f"{value / size if self.divide else value * factor:{spec}}"


# The report and the analysis' sentences (which the report's --json quotes: every digit here is pinned).
REPORT_TIME = Style(TIME, (("s", ".2f"), ("ms", ".2f"), ("µs", ".1f"), ("ns", ".0f")))
REPORT_BYTES = Style(BYTES, (("GiB", ".1f"), ("MiB", ".1f"), ("KiB", ".1f"), ("B", ".0f")), divide=True)
# A gloo job on loopback moving a few bytes measures kB/s: "0.0 MB/s" or "3.3e-05 GB/s" says nothing.
REPORT_BANDWIDTH = Style(BANDWIDTH, (("GB/s", ".2f"), ("MB/s", ".1f", 1e-4), ("kB/s", ".1f"), ("B/s", ".0f")))
# The viewer's columns and ruler: three significant digits, no space ("850ns", "12.3µs", "1.5KiB").
SHORT_TIME = Style(TIME, (("s", ".4g"), ("ms", ".3g"), ("µs", ".3g"), ("ns", ".0f")), sep="", divide=True)
SHORT_BYTES = Style(BYTES, (("TiB", ".3g"), ("GiB", ".3g"), ("MiB", ".3g"), ("KiB", ".3g"), ("B", ".0f")), sep="",
                    divide=True)
# The demos' narrations: durations as a person says them ("850 µs", "1.5 ms", "2.00 s"), sizes in powers of ten as
# the demos' sources (docs/TEACHING.md) count them ("4.19 MB").
PROSE_TIME = Style(TIME, (("s", ".2f"), ("ms", ".1f"), ("µs", ".0f")), missing="?", divide=True)
SI_BYTES = Style(BYTES, (("GB", ".2f"), ("MB", ".2f"), ("kB", ".2f"), ("B", ".0f")), divide=True)


def fmt_ns(ns: float | None) -> str:
    """The report's time: '12.30 ms', '850 ns'; '-' for None."""
    return REPORT_TIME.format(ns)


def fmt_bytes(n: float | None) -> str:
    """The report's size: '1.5 KiB', '12 B'; '-' for None."""
    return REPORT_BYTES.format(n)


def fmt_gbps(g: float | None) -> str:
    """The report's bandwidth, from GB/s: '3.34 GB/s', '188.0 MB/s', '33.4 kB/s'; '-' for None."""
    return REPORT_BANDWIDTH.format(g)


def fmt_ns_short(ns: float) -> str:
    """The viewer's time, for narrow columns: '850ns', '12.3µs', '4.56ms', '1.234s'."""
    return SHORT_TIME.format(ns)


def fmt_bytes_short(n: float) -> str:
    """The viewer's size, for narrow columns: '12B', '1.5KiB', '4MiB'."""
    return SHORT_BYTES.format(n)


def fmt_ns_prose(ns: float | None) -> str:
    """A narration's time: '850 µs', '1.5 ms', '2.00 s'; '?' for None."""
    return PROSE_TIME.format(ns)


def fmt_bytes_si(n: float) -> str:
    """A narration's size, in powers of ten: '4.19 MB', '40.00 MB', '512 B'."""
    return SI_BYTES.format(n)


def in_unit(value: float, unit: str) -> float:
    """value, in the base unit of unit's quantity (ns, bytes, GB/s), as a number of unit: a chart's values."""
    return value / _ANY[unit][0]


def fmt_in(value: float, unit: str, spec: str) -> str:
    """value (in unit's base unit) written in that unit, whatever its size: fmt_in(1.2e11, 'GB', '.0f') is
    '120 GB' (a narration comparing with a source's figures keeps the source's unit)."""
    return f"{in_unit(value, unit):{spec}} {unit}"


def ns_unit(ns: float) -> tuple[str, float]:
    """The unit to show ns nanoseconds in (as fmt_ns does), and the factor from ns to it: one unit for a whole
    chart, from its largest value."""
    name, _ = REPORT_TIME.unit(ns)
    return name, TIME[name][1]


def bytes_unit(n: float) -> tuple[str, float]:
    """The unit to show n bytes in (as fmt_bytes does), and the factor from bytes to it: one unit for a chart."""
    name, _ = REPORT_BYTES.unit(n)
    return name, BYTES[name][1]


def gbps_unit(g: float) -> tuple[str, float]:
    """The unit to show g GB/s in (as fmt_gbps does: MB/s from 0.1 MB/s up), and the factor from GB/s to it."""
    name, _ = REPORT_BANDWIDTH.unit(g)
    return name, BANDWIDTH[name][1]


_TIME_TEXT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s)\s*$")


def parse_ns(text: str) -> int | None:
    """A time typed by a person ('12.5ms', '3 s', '40us') in ns, or None if text is not one."""
    m = _TIME_TEXT.match(text)
    if not m:
        return None
    return int(float(m.group(1)) * TIME["µs" if m.group(2) == "us" else m.group(2)][0])


def fmt_ranks(ranks) -> str:
    """'rank 3', 'ranks 0, 1, 2', or the first 8 and how many: the ranks a sentence names."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + fmt_list(ranks, 8, more=" … ({n} ranks)")


def fmt_ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st, 112th."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def fmt_list(xs, most: int | None = 12, sep: str = ", ", more: str = ", … ({n} in all)", spans: bool = False,
             first: int | None = None) -> str:
    """The one writer of a list of numbers (ranks, steps): '4, 9, 14, 19'. Past `most` of them (None: no limit),
    the first `first` (default `most`) and then `more`, where {n} is how many in all and {last} the last one
    ('0…31 (32)': first=1, more="…{last} ({n})"). `spans`: a run of consecutive numbers as one item, '0-3, 5'."""
    xs = list(xs)
    items = _spans(xs) if spans else list(map(str, xs))
    if most is None or len(items) <= most:
        return sep.join(items)
    return sep.join(items[:most if first is None else first]) + more.format(n=len(xs), last=xs[-1])


def _spans(xs: list[int]) -> list[str]:
    """'3', '5-8', ... of sorted numbers: each run of consecutive ones as its first and last."""
    parts, k = [], 0
    while k < len(xs):
        j = k
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[k]) if j == k else f"{xs[k]}-{xs[j]}")
        k = j + 1
    return parts
