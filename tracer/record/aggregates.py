"""The black box's aggregates: per window and key, what a rank's ops cost over the whole run (the `.agg` file).

Computed off the job's thread: the watchdog thread (watchdog.py) calls tick() every half second; it reads the lines
the ring (ring.py) got since its last read, pairs each op's begin with its end by id, and adds the op to its key's
row of the current window. Rows are binary (format.AGG_ROW, 48 bytes) and appended when a window closes; the keys'
definitions are "aggkey" records in the rank file. docs/FORMAT.md, "The black box", defines both.

Windows: where the job marks steps, a window ends at each step marker whose number is a multiple of `every`; before
its first marker, and in a job that marks none (or with `--window Ns`), every `every` seconds of monotonic time.
If the ring overran between two reads (its writer lapped the reader), the window's flags say so (bit 0): its
counts are then a lower bound.
"""

from __future__ import annotations

import os
import re
import struct
import time

import orjson

from ..format import AGG_DATA_AT, AGG_MAGIC, AGG_ROW, AGG_WINDOW_KEY, AGGKEY, RING_DATA_AT, RING_HEADER

# The records the aggregates need, found in the ring's bytes by regular expressions (C: several times cheaper per op
# than a loop over the lines in Python): a begin's head (its key's fields: "op", "g", "bytes", ...), id and time;
# an end's id and time. Records are compact JSON with "k" first (op_records.py's templates, or orjson in the same
# order); "t" is a begin's last key, "i" its last before "gs" and the summary (whose keys are never "i"), and "t"
# follows "i" in an end. A line torn at the ring's edge does not match: no pattern crosses a newline.
_BEGINS = re.compile(rb'\n\{"k":"b",([^\n]*"i":)(\d+)[^\n]*"t":(\d+)\}')
_ENDS = re.compile(rb'\n\{"k":"e","i":(\d+),"t":(\d+)')
_STEP = b'\n{"k":"step",'
OPEN_LIMIT = 100_000  # ops begun and not yet ended that are kept (an op's begin whose end never comes is dropped)
LOST = 1  # a row's flags: ops were lost (the ring overran between two reads)


def size_bucket(nbytes: int) -> tuple[int, int]:
    """The power-of-two bucket [lo, hi) that holds nbytes: [0, 1), [1, 2), [2, 4), ..."""
    if nbytes <= 0:
        return 0, 1
    lo = 1 << (nbytes.bit_length() - 1)
    return lo, lo * 2


class Aggregates:
    """The .agg file at `path`, fed from `ring`; new keys' records go through `write_head`."""

    def __init__(self, path: str, ring, write_head, by: str = "steps", every: int = 10, seconds: float = 10.0):
        self.path, self.ring, self.write_head = path, ring, write_head
        self.by, self.every, self.seconds_ns = by, int(every), int(seconds * 1e9)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        os.write(self._fd, AGG_MAGIC.ljust(AGG_DATA_AT, b"\0"))
        self._heads: dict[bytes, tuple[int, int]] = {}  # a begin record's head -> (key id, bytes)
        self._keys: dict[tuple, int] = {}  # (group, op, bucket's lo) -> key id
        self._open: dict[bytes, tuple] = {}  # op id (its digits) -> ((key id, bytes), begin time)
        self._acc: dict[int, list] = {}  # key id -> [count, total ns, max ns, bytes] of the current window
        self._wraps, self._pos = 0, RING_DATA_AT  # where the last read of the ring ended
        self.window, self.start = 0, time.monotonic_ns()
        self.count, self.flags, self.first_step, self.last_step = 0, 0, -1, -1
        self.steps_seen = False
        self.consumed = 0  # bytes of the ring the last tick read (the watchdog looks sooner when it is large)
        self.rows = 0  # rows written

    # -- reading the ring ----------------------------------------------------------------------------
    def tick(self, now: int | None = None) -> None:
        """Add the ring's new lines, then close the windows of time that have passed."""
        data = self._new_data()
        if data:
            self._add(data)
        if self._by_time():
            self._roll(time.monotonic_ns() if now is None else now)

    def _new_data(self) -> bytes:
        """The ring's lines written since the last read. Only the new part is copied (each slice in one call under
        the GIL); if the writer lapped the reader meanwhile, what it overwrote is lost, and the window says so."""
        m = self.ring._map
        if m.closed:
            return b""
        _, pos, wraps, size = struct.unpack_from(RING_HEADER, m, 0)
        lw, lp = self._wraps, self._pos
        if wraps == lw:
            if pos <= lp:  # nothing new (or a position stored late by a racing thread: the next read)
                self.consumed = 0
                return b""
            data, oldest = m[lp:pos], (wraps, lp)
        elif wraps == lw + 1 and pos <= lp:  # one wrap, nothing unread overwritten
            data, oldest = m[lp:size].rstrip(b"\0") + m[RING_DATA_AT:pos], (wraps - 1, lp)
        else:  # the writer lapped us: the lines after pos are the oldest the ring still holds
            self.flags |= LOST
            old = m[pos:size].rstrip(b"\0")
            data, oldest = old[old.find(b"\n") + 1:] + m[RING_DATA_AT:pos], (wraps - 1, pos)
        _, pos_after, wraps_after, _ = struct.unpack_from(RING_HEADER, m, 0)
        if (wraps_after, pos_after) > (oldest[0] + 1, oldest[1]):
            self.flags |= LOST  # the writer overwrote the oldest of it while it was copied (a lap in a GIL switch)
        self._wraps, self._pos = wraps, pos
        self.consumed = len(data)
        return data

    def _add(self, data: bytes) -> None:
        """Pair the begins and ends of `data` (whole lines, in the ring's order) into the windows: between two step
        markers, the begins first (an op's end never comes before its begin), then the ends."""
        data = b"\n" + data
        at = 0
        while True:
            marker = data.find(_STEP, at)
            end = marker if marker >= 0 else len(data)
            self._begins(data, at, end)
            self._ends(data, at, end)
            if marker < 0:
                return
            at = data.find(b"\n", marker + 1)
            if at < 0:
                return
            try:
                rec = orjson.loads(data[marker + 1:at])
                self._step(int(rec["n"]), int(rec["t"]))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                pass

    def _begins(self, data: bytes, at: int, end: int) -> None:
        heads, opened = self._heads, self._open
        for head, i, t in _BEGINS.findall(data, at, end):
            key = heads.get(head)
            if key is None:
                key = self._key_of(head)
            opened[i] = (key, int(t))  # (ids as written: an end's are the same bytes, no int() needed)
        if len(opened) > OPEN_LIMIT:  # begins whose end never came (or fell out of the ring): forget them
            opened.clear()
            self.flags |= LOST

    def _ends(self, data: bytes, at: int, end: int) -> None:
        opened, acc = self._open, self._acc
        by_time = self._by_time()
        count = 0
        for i, t in _ENDS.findall(data, at, end):
            begun = opened.pop(i, None)
            if begun is None:
                continue  # its begin is not in the ring any more (or was before tracing)
            t = int(t)
            if by_time and t >= self.start + self.seconds_ns:
                self.count += count
                count = 0
                self._roll(t)
                acc = self._acc
            (kid, nbytes), t0 = begun
            if kid < 0:
                continue
            d = t - t0
            a = acc.get(kid)
            if a is None:
                acc[kid] = [1, d, d, nbytes]
            else:
                a[0] += 1
                a[1] += d
                if d > a[2]:
                    a[2] = d
                a[3] += nbytes
            count += 1
        self.count += count

    def _step(self, n: int, t: int) -> None:
        if self.first_step < 0:
            self.first_step = n
        self.last_step = n
        self.steps_seen = True
        if self.by == "steps" and n % self.every == 0:
            self._close(t)

    def _key_of(self, head: bytes) -> tuple[int, int]:
        """(key id, bytes) of a begin record's head seen for the first time; a new key gets its "aggkey" record."""
        try:
            rec = orjson.loads(b'{"k":"b",' + head + b"0}")
        except orjson.JSONDecodeError:
            rec = {}
        nbytes = int(rec.get("bytes") or 0)
        lo, hi = size_bucket(nbytes)
        ident = (rec.get("g"), rec.get("op"), lo)
        kid = self._keys.get(ident)
        if kid is None:
            kid = len(self._keys)
            if kid >= AGG_WINDOW_KEY:
                kid = -1  # (more keys than a row can name: not counted)
                self.flags |= LOST
            else:
                self._keys[ident] = kid
                self.write_head({"k": AGGKEY, "id": kid, "g": rec.get("g"), "op": rec.get("op"), "lo": lo, "hi": hi})
        key = (kid, nbytes)
        if rec:
            self._heads[head] = key
        return key

    # -- windows -------------------------------------------------------------------------------------
    def _by_time(self) -> bool:
        return self.by == "seconds" or not self.steps_seen

    def _roll(self, t: int) -> None:
        """Close the windows of time that end at or before t."""
        while t >= self.start + self.seconds_ns:
            self._close(self.start + self.seconds_ns)

    def _close(self, end: int) -> None:
        if not self.count and self.first_step < 0 and not self.flags:
            self.start = end  # a window in which nothing happened is not written (the next starts where it ends)
            return
        w = self.window
        rows = [struct.pack(AGG_ROW, w, kid, 0, c, 0, tot, mx, b, end) for kid, (c, tot, mx, b) in self._acc.items()]
        rows.append(struct.pack(AGG_ROW, w, AGG_WINDOW_KEY, self.flags, self.count, 0, self.start, self.last_step,
                                self.first_step, end))
        os.write(self._fd, b"".join(rows))
        self.rows += len(rows)
        self._acc = {}
        self.window, self.start = w + 1, end
        self.count, self.flags, self.first_step, self.last_step = 0, 0, -1, -1

    def finish(self) -> None:
        """The rank's end: read the ring's last lines and close the window in progress (at now)."""
        if self._fd < 0:
            return
        try:
            self.tick()
            now = time.monotonic_ns()
            if self.count or self.first_step >= 0:  # (an empty last window says nothing)
                self._close(now)
        finally:
            os.close(self._fd)
            self._fd = -1
