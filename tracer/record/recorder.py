"""The per-rank recorder: an append-only JSON Lines file written through a shared memory map.

Why a memory map: the moment a rank enters a collective, the begin record must survive the rank's death
(SIGKILL, a C++ abort, torchrun's SIGTERM). Bytes copied into a MAP_SHARED mapping are in the kernel's page
cache at once, so they reach the file even if the process dies the next instant, and a copy costs a fraction of
a write() system call. The file grows in chunks; unused space past the last record stays zero bytes, which the
reader skips (a torn last line is tolerated too). close() truncates the file to what was written.

Thread-safe: records are appended with mmap.write, one C call under the GIL (ops complete on gloo's and NCCL's
worker threads); growing the map takes a lock. The hot path calls that C method itself (`raw`), with write_raw as
its fallback when the map is full. This module never
raises into the traced program: on any I/O failure it disables itself with one warning on stderr.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading

import orjson

# bytes the file grows by: a few MB covers tens of thousands of events (DISTTRACE_CHUNK_BYTES overrides it)
CHUNK = max(int(os.environ.get("DISTTRACE_CHUNK_BYTES", 4 << 20)), 4096)


class Recorder:
    """Appends one JSON object per line to `path`. `write(obj)` is the hot path."""

    def __init__(self, path: str, mode: int = 0o600):
        self.path = path
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
        self._size = 0          # mapped (and file) size
        self._end = 0           # bytes written, once the map is closed (while open: its position)
        self._map: mmap.mmap | None = None
        self.enabled = True
        # the hot path's write: the map's own C method while recording (it raises ValueError when the map is full
        # or closed: the caller then hands the line to write_raw, which grows the map or drops it); write_raw once
        # recording stopped
        self.raw = self.write_raw
        self._grow(CHUNK)
        self.raw = self._map.write

    def _grow(self, need: int) -> None:
        # Reserve the blocks before mapping them: writing into a mapped hole on a full disk would kill the
        # process with SIGBUS; posix_fallocate fails cleanly with ENOSPC instead.
        old, new_size = self._size, self._size + max(CHUNK, need)
        os.ftruncate(self._fd, new_size)
        if hasattr(os, "posix_fallocate"):
            try:
                os.posix_fallocate(self._fd, old, new_size - old)
            except OSError as e:
                os.ftruncate(self._fd, max(old, self._pos()))
                raise OSError(e.errno, f"no space left for the trace ({e.strerror})") from None
        if self._map is None:
            self._map = mmap.mmap(self._fd, new_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        else:
            # one call (mremap) that keeps the map's position: a writer on another thread, which takes no lock,
            # sees the old size or the new one, never a map without its records
            self._map.resize(new_size)
        self._size = new_size

    def _pos(self) -> int:
        """Bytes written: the map's own position."""
        return self._map.tell() if self._map is not None and not self._map.closed else self._end

    def write(self, obj) -> None:
        """Append obj as one JSON line. Never raises."""
        if not self.enabled:
            return
        try:
            line = orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE, default=str)
        except Exception as e:  # noqa: BLE001 - tracing must never break the job
            self.disable(f"cannot encode a record: {e}")
            return
        self.write_raw(line)

    def write_raw(self, line: bytes) -> None:
        """Append a line that is already JSON with its newline (the hot path's small end records)."""
        if not self.enabled:
            return
        try:
            # mmap.write copies at the map's position and advances it in one call that holds the GIL: records
            # from several threads never interleave, without a lock of ours on the hot path.
            self._map.write(line)
        except (ValueError, AttributeError):  # the map is full (or was just replaced, or is closed)
            self._write_growing(line)
        except Exception as e:  # noqa: BLE001 - tracing must never break the job
            self.disable(f"cannot write {self.path}: {e}")

    def _write_growing(self, line: bytes) -> None:
        try:
            with self._lock:
                while self._map is not None and not self._map.closed:
                    try:
                        self._map.write(line)
                        return
                    except ValueError:  # full: another thread's write may have just taken the room we saw
                        self._grow(len(line))
        except Exception as e:  # noqa: BLE001 - tracing must never break the job
            self.disable(f"cannot write {self.path}: {e}")

    def copy(self) -> bytes:
        """The records written so far (a snapshot's copy): one slice of the map, under the GIL."""
        with self._lock:  # (not while the map grows)
            m = self._map
            return m[:m.tell()] if m is not None and not m.closed else b""

    def close(self) -> None:
        """Unmap and cut the file to the bytes written. Safe to call twice."""
        with self._lock:
            if self._map is None:
                return
            self.raw = self.write_raw
            try:
                self._end = self._map.tell()
                self._map.close()
                os.ftruncate(self._fd, self._end)
                os.close(self._fd)
            except OSError:
                pass
            self._map = None
            self.enabled = False

    def fail(self, e: BaseException) -> None:
        """The tracer failed inside: tracing stops here, with one warning; the job goes on."""
        self.disable(f"internal error: {type(e).__name__}: {e}")

    def disable(self, reason: str) -> None:
        if self.enabled:
            self.raw = self.write_raw
            self.enabled = False
            warn_once(os.path.dirname(self.path), f"disttrace: tracing disabled: {reason}; the job goes on "
                                                   f"untraced from here (what was recorded so far is kept)")


def warn_once(out_dir: str, message: str) -> None:
    """Print `message` on stderr, once for the whole job: the first rank to fail claims a marker file in the
    trace dir (if even that fails, every rank says it)."""
    try:
        fd = os.open(os.path.join(out_dir, ".disttrace-warned"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
    except FileExistsError:
        return
    except OSError:
        pass
    try:
        sys.stderr.write(message + "\n")
    except Exception:  # noqa: BLE001
        pass
