"""The black box's aggregates: per window and key, what a rank's ops cost over the whole run (the `.agg` file).

Kept as integers by the recorder itself, not parsed from the ring: each op's end (Completion.lean_end, complete)
adds its duration and bytes to its key's row of the window in progress (add: a dict lookup and four integer
updates), where the key's slot (key id, bytes) was found once per begin record's fixed part (slot). The watchdog
thread only closes the windows of time and writes the closed windows' rows (tick, twice a second). Rows are binary
(format.AGG_ROW, 48 bytes), appended when a window is written; the keys' definitions are "aggkey" records in the rank
file. docs/FORMAT.md, "The black box", defines both.

Windows: where the job marks steps, a window ends at each step marker whose number is a multiple of `every` (step,
on the thread that marks it). Once the file holds AGG_ALLOWANCE bytes of rows, where windows of `every` steps at a
closing window's pace (its rows, its time a step) would write more than AGG_HEADROOM of AGG_DAY_BUDGET in a day (a
job of short steps), `every` doubles until they would not, on this rank alone: windows end at multiples of every
rank's `every`, so that a wider rank's window is whole windows of a narrower one's, which the analysis merges
(waits/whole_run.py). Before its first marker, and in a job
that marks none (or with `--window Ns`), every `every` seconds of monotonic time (an op that ends past the window's
end closes it first, so that it counts in the window where it ended; the watchdog's tick closes the windows in which
no op ends).

Threads: ops end on the job's threads and on gloo's (async ops' callbacks). add() changes a row only with steps the
GIL does not interrupt (no call between a row's read and its write), and a new row is made with dict.setdefault; a
window is closed by swapping in a new dict, and written one tick later, so that an add() that took the old dict
just before the swap is in it by then.
"""

from __future__ import annotations

import os
import struct
import threading
import time

from ..format import (AGG_ALLOWANCE, AGG_DATA_AT, AGG_DAY_BUDGET, AGG_HEADROOM, AGG_MAGIC, AGG_ROW,
                      AGG_ROW_BYTES, AGG_WINDOW_KEY, AGGKEY)

LOST = 1  # a row's flags: ops were not counted (more keys than a row can name)
_NEVER = 1 << 63  # a deadline that never comes (windows of steps)
_DAY_NS = 86_400 * 10**9


def size_bucket(nbytes: int) -> tuple[int, int]:
    """The power-of-two bucket [lo, hi) that holds nbytes: [0, 1), [1, 2), [2, 4), ..."""
    if nbytes <= 0:
        return 0, 1
    lo = 1 << (nbytes.bit_length() - 1)
    return lo, lo * 2


class Aggregates:
    """The .agg file at `path`; new keys' records go through `write_head`."""

    def __init__(self, path: str, write_head, by: str = "steps", every: int = 10, seconds: float = 10.0,
                 allowance: int = AGG_ALLOWANCE):
        self.path, self.write_head, self.allowance = path, write_head, allowance
        self.by, self.every, self.seconds_ns = by, int(every), int(seconds * 1e9)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        os.write(self._fd, AGG_MAGIC.ljust(AGG_DATA_AT, b"\0"))
        self._keys: dict[tuple, int] = {}  # (group, op, bucket's lo) -> key id
        self._lock = threading.Lock()  # closing a window (the job's threads and the watchdog's may both)
        self.acc: dict[int, list] = {}  # key id -> [count, total ns, max ns, bytes] of the window in progress
        self.start = time.monotonic_ns()
        self.deadline = self.start + self.seconds_ns  # the end of the window of time in progress (_NEVER: steps)
        self.first_step, self.last_step, self.flags = -1, -1, 0
        self.steps_seen = False
        self._closed: list[tuple] = []  # windows closed since the last tick: (start, end, first, last, flags, acc)
        self._ready: list[tuple] = []  # ... and before it: written at the next tick
        self.window = 0  # the next written window's number
        self.rows = 0  # rows written

    # -- the recorder's side (any thread) ------------------------------------------------------------
    def slot(self, g: int, op: str, nbytes: int) -> tuple[int, int]:
        """(key id, bytes) of an op of group g, op name and size; a new key gets its "aggkey" record. Called once per
        begin record's fixed part, which keeps it."""
        lo, hi = size_bucket(nbytes)
        ident = (g, op, lo)
        with self._lock:
            kid = self._keys.get(ident)
            if kid is None:
                kid = len(self._keys)
                if kid >= AGG_WINDOW_KEY:
                    return -1, nbytes  # (more keys than a row can name: counted in the window's row only)
                self._keys[ident] = kid
                self.write_head({"k": AGGKEY, "id": kid, "g": g, "op": op, "lo": lo, "hi": hi})
        return kid, nbytes

    def add(self, slot: tuple[int, int], t0: int, t: int) -> None:
        """An op of `slot` began at t0 and ended at t: into its key's row of the window where it ended."""
        if t >= self.deadline:
            self._roll(t)
        kid, nbytes = slot
        d = t - t0
        a = self.acc.get(kid)
        if a is None:
            a = self.acc.setdefault(kid, [0, 0, 0, 0])
        a[0] += 1
        a[1] += d
        if d > a[2]:
            a[2] = d
        a[3] += nbytes

    def step(self, n: int, t: int) -> None:
        """The job's step marker number n at t."""
        with self._lock:
            if self.first_step < 0:
                self.first_step = n
            self.last_step = n
            if not self.steps_seen:
                self.steps_seen = True
                if self.by != "seconds":
                    self.deadline = _NEVER
            if self.by != "seconds" and n % self.every == 0:
                span, rows, steps = t - self.start, len(self.acc) + 1, n - self.first_step + 1
                self._close(t)
                # windows of `every` steps at this window's pace, over a day; wider until they keep to the budget
                # (the next window ends at a multiple of the new width: nested in a narrower rank's)
                day = rows * AGG_ROW_BYTES * _DAY_NS * steps
                while span > 0 and self.rows * AGG_ROW_BYTES >= self.allowance and \
                        day > AGG_HEADROOM * AGG_DAY_BUDGET * span * self.every:
                    self.every *= 2

    # -- windows ---------------------------------------------------------------------------------------
    def _roll(self, t: int) -> None:
        """Close the windows of time that end at or before t."""
        with self._lock:
            while t >= self.deadline:
                self._close(self.deadline)
                self.deadline = self.start + self.seconds_ns

    def _close(self, end: int) -> None:
        """(Under the lock.) The window in progress ends at `end`: it is written at the tick after next."""
        acc, self.acc = self.acc, {}
        self._closed.append((self.start, end, self.first_step, self.last_step, self.flags, acc))
        self.start = end
        self.first_step, self.last_step, self.flags = -1, -1, 0

    # -- the watchdog's side ---------------------------------------------------------------------------
    def tick(self, now: int | None = None) -> None:
        """Close the windows of time that have passed, write those closed before the last tick."""
        now = time.monotonic_ns() if now is None else now
        if now >= self.deadline:
            self._roll(now)
        with self._lock:
            ready, self._ready, self._closed = self._ready, self._closed, []
        self._write(ready)

    def _write(self, windows: list[tuple]) -> None:
        rows = []
        for start, end, first, last, flags, acc in windows:
            counts = [(kid, a) for kid, a in list(acc.items())]
            count = sum(a[0] for _, a in counts)
            if not count and first < 0 and not flags:
                continue  # a window in which nothing happened is not written
            if any(kid < 0 for kid, _ in counts):
                flags |= LOST
            w = self.window
            rows += [struct.pack(AGG_ROW, w, kid, 0, c, 0, tot, mx, b, end) for kid, (c, tot, mx, b) in counts
                     if kid >= 0]
            rows.append(struct.pack(AGG_ROW, w, AGG_WINDOW_KEY, flags, count, 0, start, last, first, end))
            self.window = w + 1
        if rows:
            os.write(self._fd, b"".join(rows))
            self.rows += len(rows)

    def finish(self) -> None:
        """The rank's end: close the window in progress (at now) and write every closed window."""
        if self._fd < 0:
            return
        try:
            now = time.monotonic_ns()
            self._roll(now)
            with self._lock:
                self._close(now)
                windows, self._ready, self._closed = self._ready + self._closed, [], []
            self._write(windows)
        finally:
            os.close(self._fd)
            self._fd = -1
