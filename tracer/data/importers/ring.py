"""A black-box ring (`rank-....ring`, docs/FORMAT.md "The black box"): its lines, oldest first.

The ring is a fixed-size file: a header (format.RING_HEADER: magic, the next write's offset `pos`, how many times
the writer wrapped, the file's size), then JSON lines from RING_DATA_AT. The newest lines are data[RING_DATA_AT:pos];
once the writer has wrapped, the lines after pos are older ones (the first of them torn by the wrap's overwrite,
zero bytes after the last). A line that does not parse at those two edges is the ring's nature, not damage: the
caller skips it.
"""

from __future__ import annotations

import struct

from ...format import RING_DATA_AT, RING_HEADER, RING_MAGIC


def ring_lines(data: bytes) -> list[bytes]:
    """The lines of a ring's bytes (a file's or a copy's), oldest first ([] if they are not a ring: too short,
    another magic)."""
    if len(data) < RING_DATA_AT:
        return []
    magic, pos, wraps, _size = struct.unpack_from(RING_HEADER, data, 0)
    if magic != RING_MAGIC:
        return []
    pos = min(max(pos, RING_DATA_AT), len(data))
    lines: list[bytes] = []
    if wraps:
        oldest = data[pos:].rstrip(b"\0")
        cut = oldest.find(b"\n")  # the first line was (maybe) overwritten in part by the wrap
        lines = oldest[cut + 1:].split(b"\n") if cut >= 0 else []
    lines += data[RING_DATA_AT:pos].split(b"\n")
    return [line for line in lines if line]


def read_ring(path) -> list[bytes]:
    """The lines of the ring file at `path`, oldest first."""
    with open(path, "rb") as f:
        return ring_lines(f.read())
