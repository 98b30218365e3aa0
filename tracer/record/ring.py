"""The black box's ring: a rank's last op records in a file of fixed size (docs/FORMAT.md, "The black box").

Preallocated and mapped MAP_SHARED, as the recorder's file is (recorder.py): what is written is in the page cache at
once, so the launcher and `disttrace snapshot` find it on disk while the rank runs, is stuck in C++, or after it
died (a SIGKILL included). The header (format.RING_HEADER) holds the next write's offset and the number of wraps;
the data are JSON lines, exactly as a rank file's. The reader: data/importers/ring.py.

Writer's rule (the contract's): append at `pos` with mmap.write (one C call under the GIL: lines of several threads
never interleave), then store the map's position in the header (under a race of threads it may lag one line: the
reader tolerates it). A line that does not fit before the end: zero the rest, count a wrap, write it at the data's
start. Same interface as Recorder: write(obj), write_raw(line), close(), enabled, fail(e), disable(reason).

Where the recorder's compiled part is built (compiled.py), write_raw is _hotpath.RingWriter's write instead: the same
bytes, copied into the map in C (the lean path's records too, without a Python call: docs/ARCHITECTURE.md, "The
compiled part"); there the header's pos is the only position (the map's own is unused) and a wrap happens within the
same C call. The writer holds the map's buffer: stop() and close() let go of it before the map is closed.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import threading
from array import array

import orjson

from ..format import RING_DATA_AT, RING_HEADER, RING_MAGIC, RING_OP_BYTES, RING_ROUND
from .compiled import offers

_Writer = offers("RingWriter")


def ring_size(ops: int) -> int:
    """The ring's file size for `--ring ops`: ops x RING_OP_BYTES, rounded up to RING_ROUND."""
    need = max(int(ops), 1) * RING_OP_BYTES + RING_DATA_AT
    return -(-need // RING_ROUND) * RING_ROUND


class Ring:
    """The ring file at `path`, `size` bytes, created (0600) and mapped at once."""

    def __init__(self, path: str, size: int, on_disable=None, mode: int = 0o600):
        self.path, self.size = path, size
        self.enabled = True
        self._lost = 0  # lines longer than the whole ring (never written), by the Python code
        self._on_disable = on_disable
        self._lock = threading.Lock()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.ftruncate(fd, size)
            if hasattr(os, "posix_fallocate"):  # blocks reserved now: a full disk fails here, not as a SIGBUS later
                os.posix_fallocate(fd, 0, size)
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        struct.pack_into(RING_HEADER, self._map, 0, RING_MAGIC, RING_DATA_AT, 0, size)
        # pos and wraps as two native integers: one item store per line (the header is little-endian; so are the
        # machines torch runs on: elsewhere every store goes through struct)
        self._hdr = memoryview(self._map)[8:24].cast("Q") if sys.byteorder == "little" else None
        self._map.seek(RING_DATA_AT)
        self._c = None  # the compiled writer, where it is built (little-endian: it stores the header natively)
        if _Writer is not None and self._hdr is not None:
            self._c = _Writer(self._map, RING_DATA_AT, self)
            self.write_raw = self._c.write

    @property
    def lost(self) -> int:
        return self._lost + (self._c.lost if self._c is not None else 0)

    # -- the hot path ------------------------------------------------------------------------------
    def write_raw(self, line: bytes) -> None:
        """Append a JSON line (with its newline). Never raises. (The compiled writer's write where it is built.)"""
        if not self.enabled:
            return
        m = self._map
        try:
            m.write(line)
            self._hdr[0] = m.tell()
        except ValueError:  # no room before the end (or the map is closed)
            self._wrap(line)
        except Exception as e:  # noqa: BLE001 - tracing must never break the job
            self.disable(f"cannot write {self.path}: {e}")

    def write(self, obj) -> None:
        if not self.enabled:
            return
        try:
            line = orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE, default=str)
        except Exception as e:  # noqa: BLE001
            self.disable(f"cannot encode a record: {e}")
            return
        self.write_raw(line)

    def _wrap(self, line: bytes) -> None:
        try:
            with self._lock:
                m = self._map
                if m.closed:
                    return
                try:  # another thread may have wrapped meanwhile: then it fits
                    m.write(line)
                    self._store(m.tell(), None)
                    return
                except ValueError:
                    pass
                if len(line) > self.size - RING_DATA_AT:
                    self._lost += 1
                    return
                pos = m.tell()
                m[pos:] = bytes(self.size - pos)  # the reader reads the old lines up to these zeros
                m.seek(RING_DATA_AT)
                m.write(line)
                self._store(m.tell(), self.wraps() + 1)
        except Exception as e:  # noqa: BLE001
            self.disable(f"cannot write {self.path}: {e}")

    def _store(self, pos: int, wraps: int | None) -> None:
        """The header's pos (and wraps) in one store: a reader in this process never sees one without the other."""
        if self._hdr is not None:
            if wraps is None:
                self._hdr[0] = pos
            else:
                self._hdr[0:2] = memoryview(array("Q", [pos, wraps]))
        elif wraps is None:
            struct.pack_into("<Q", self._map, 8, pos)
        else:
            struct.pack_into("<QQ", self._map, 8, pos, wraps)

    # -- readers in this process (the aggregator, snapshots) -----------------------------------------
    def wraps(self) -> int:
        return struct.unpack_from("<Q", self._map, 16)[0]

    def _write_raw_py(self, line) -> None:
        """The compiled writer's odd input (a line that is not bytes): as mmap.write takes it, or the Python write's
        error."""
        try:
            data = bytes(memoryview(line))
        except Exception as e:  # noqa: BLE001
            self.disable(f"cannot write {self.path}: {e}")
            return
        self._c.write(data)

    def copy(self) -> bytes:
        """The whole ring as it is now: one copy under the GIL, so no writer of this process is half-way."""
        return self._map[:]

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Unmap; the file stays as it is (its size is fixed): the rank's last ops."""
        with self._lock:
            if self._map.closed:
                return
            self.stop()
            if self._hdr is not None:
                self._hdr.release()
                self._hdr = None
            try:
                self._map.close()
            except Exception:  # noqa: BLE001
                pass

    def fail(self, e: BaseException) -> None:
        self.disable(f"internal error: {type(e).__name__}: {e}")

    def stop(self) -> None:
        """No more writes (the compiled writer lets go of the map's buffer)."""
        self.enabled = False
        if self._c is not None:
            self._c.release()

    def disable(self, reason: str) -> None:
        if self.enabled:
            self.stop()
            if self._on_disable is not None:
                self._on_disable(reason)
