"""A black-box rank's ring (`rank-….ring`, beside its rank file): its op records' lines, oldest first.

The ring is a file of fixed size (format.py's black-box constants; docs/FORMAT.md "The black box"): a header
(RING_HEADER: magic, `pos` the offset of the next write, `wraps`, `size`) at offset 0, then JSON lines from
RING_DATA_AT. The newest part is data[RING_DATA_AT:pos]; once the writer has wrapped, the oldest part is
data[pos:] without its first line (cut by the writes after it) and without the zeros the writer left at the end.
A line that does not parse at the seams (the header's `pos` may lag one line behind the data) is the ring's
nature, not damage: dropped here, never counted as a malformed record.

Imports neither torch nor textual.
"""

from __future__ import annotations

import os
import struct

import orjson

from ...format import RANK_FILE_SUFFIX, RING_DATA_AT, RING_HEADER, RING_MAGIC, RING_SUFFIX

_HEADER = struct.Struct(RING_HEADER)


def ring_path(rank_file: str) -> str:
    """The ring beside a rank file (the same stem)."""
    stem = rank_file[:-len(RANK_FILE_SUFFIX)] if rank_file.endswith(RANK_FILE_SUFFIX) else rank_file
    return stem + RING_SUFFIX


def has_ring(rank_file: str) -> bool:
    return os.path.isfile(ring_path(rank_file))


def read_ring(path: str) -> list[bytes]:
    """The ring's whole lines, oldest first ([] for a file that is not a ring: too short, another magic)."""
    return read_ring_wraps(path)[0]


def read_ring_wraps(path: str) -> tuple[list[bytes], int]:
    """(read_ring's lines, how many times the writer wrapped)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return [], 0
    if len(data) < RING_DATA_AT:
        return [], 0
    magic, pos, wraps, _ = _HEADER.unpack_from(data)
    if magic != RING_MAGIC:
        return [], 0
    pos = min(max(pos, RING_DATA_AT), len(data))
    if not wraps:  # (up to the first zero: a lagging `pos` may not count the last line yet)
        return _whole(data[RING_DATA_AT:].split(b"\0", 1)[0].split(b"\n"), 0), 0
    newest = data[RING_DATA_AT:pos].split(b"\n")
    oldest = data[pos:].rstrip(b"\0").split(b"\n")[1:]  # (its first line: cut by the newer writes before it)
    return _whole(oldest, 2) + _whole(newest, 1), wraps


def ring_written(path: str) -> int:
    """The bytes the ring's writer has written in all (its header's wraps and pos): they grow while the rank
    writes, as a rank file's size does, where the ring's own size does not (a followed trace: has it grown?)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
        magic, pos, wraps, size = _HEADER.unpack(head)
    except (OSError, struct.error):
        return 0
    if magic != RING_MAGIC:
        return 0
    return wraps * max(size - RING_DATA_AT, 0) + max(pos - RING_DATA_AT, 0)


def _whole(lines: list[bytes], edge: int) -> list[bytes]:
    """The lines without the empty ones, and without those of the first `edge` and the last that do not parse (the
    seams, where a lagging header or the last write may leave a line in part)."""
    lines = [line for line in lines if line]
    head = [line for line in lines[:edge] if _parses(line)]
    rest = lines[edge:]
    if rest and not _parses(rest[-1]):
        rest.pop()
    return head + rest


def _parses(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


__all__ = ["has_ring", "read_ring", "read_ring_wraps", "ring_path", "ring_written"]
