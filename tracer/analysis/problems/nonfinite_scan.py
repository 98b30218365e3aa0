"""Scans of the trace's JSON texts (the tensor summaries) as loops over their bytes, compiled by numba for large
traces (core/jit.py): where a regular expression would hold the GIL over all of them (the viewer's keys waiting
meanwhile), the compiled scan lets the other stages run beside it (engine/run.py).

Written as numba compiles them (core/jit.py): one function each, no helpers, arrays that never grow (causal/backward_walk.py)."""

from __future__ import annotations

import re

import numpy as np

from ..core import jit

# Where a summary's JSON text may count a NaN or an Inf (every "nan" or "inf" key not followed by a plain 0): the
# rows to decode and look at (a superset of the rows that count one is harmless)
NONFINITE_TEXT = re.compile(rb'"(?:nan|inf)"\s*:\s*(?!0\s*[,}])')


FIRST_ROOM = 1024  # places the scan makes room for first (eight times more each time they are too few)


def nonfinite(n_events: int):
    """What finds the summaries that may count a NaN or an Inf in a trace of n_events (JsonColumn.rows_with's
    `maybe`): the compiled scan, or for small traces the regular expression."""
    if not jit.compiled(nonfinite_loop, n_events):  # (as Python, the scan is the regular expression)
        return NONFINITE_TEXT
    return lambda text: jit.run_in_room(nonfinite_loop, n_events, [FIRST_ROOM], text, grow=8)[0]


def nonfinite_loop(text, room):
    """Where in text (uint8) a "nan" or "inf" key's value is not a plain 0 (the start of the key): every match of
    NONFINITE_TEXT, and the keys followed by white space, which it may match too. Returns (-1, where), or (0, ...)
    where room[0] places were too few."""
    at = np.empty(room[0], np.int64)
    m = 0
    n = len(text)
    for i in range(n - 5):
        if text[i] != 34 or text[i + 4] != 34:  # '"' ... '"'
            continue
        a, b, c = text[i + 1], text[i + 2], text[i + 3]
        if not ((a == 110 and b == 97 and c == 110) or (a == 105 and b == 110 and c == 102)):  # nan, inf
            continue
        j = i + 5
        plain = j + 2 < n and text[j] == 58 and text[j + 1] == 48 and (text[j + 2] == 44 or text[j + 2] == 125)
        if plain:  # ':0,' or ':0}'
            continue
        k = j
        while k < n and (text[k] == 32 or 9 <= text[k] <= 13):  # (white space: \s of a bytes pattern)
            k += 1
        if k == n or text[k] != 58:  # no ':': not a key
            continue
        if m == len(at):
            return 0, at[:0]
        at[m] = i
        m += 1
    return -1, at[:m]
