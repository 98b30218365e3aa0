"""Run a benchmark's child process under a memory limit, as a machine with that much memory would: a memory cgroup
of its own (v2, or v1), which the child and its own children (the parallel reader's workers) join.

Why a cgroup and not the peak RSS: the trace store is memory-mapped, and every page of it that the analysis reads
counts in the process's RSS, though the kernel drops such clean file pages when memory runs short (10M events:
5.0 GB of peak RSS, of which the store's file is 2.5 GB). A cgroup counts them too, but reclaims them before it
kills: a run that completes under the limit fits a machine of that size, one killed does not. Anonymous memory
(what the process allocated) cannot be reclaimed (without swap), so it must stay under the limit. Pages of a file
already in the page cache stay charged to whoever read them first, so the cgroup's peak may undercount the
mapped store; they are clean and reclaimable either way, and the verdict is about what is not.

Needs root and a writable cgroup hierarchy; elsewhere `MemoryLimit.make` says why it cannot and the benchmark
prints that the limit was not tested.
"""

from __future__ import annotations

import os

_V2 = "/sys/fs/cgroup"
_V1 = "/sys/fs/cgroup/memory"


def parse_size(text: str) -> int:
    """'4G', '512M', '4096' (bytes) -> bytes."""
    text = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


class MemoryLimit:
    """A fresh memory cgroup limited to `limit` bytes; `join` (a subprocess' preexec_fn) moves the child into it
    before it runs anything."""

    def __init__(self, path: str, v2: bool, limit: int) -> None:
        self.path, self.v2, self.limit = path, v2, limit

    @classmethod
    def make(cls, limit: int) -> "MemoryLimit | str":
        """The cgroup, or why none can be made here (a string)."""
        name = f"disttrace-bench-{os.getpid()}"
        v2 = os.path.exists(os.path.join(_V2, "cgroup.controllers"))
        root = _V2 if v2 else _V1
        path = os.path.join(root, name)
        try:
            if v2:
                with open(os.path.join(_V2, "cgroup.subtree_control"), "w") as f:
                    f.write("+memory")
            os.mkdir(path)
            with open(os.path.join(path, "memory.max" if v2 else "memory.limit_in_bytes"), "w") as f:
                f.write(str(limit))
        except OSError as e:
            try:
                os.rmdir(path)
            except OSError:
                pass
            return f"no memory cgroup can be made here ({e.strerror or e}: needs root and a writable {root})"
        return cls(path, v2, limit)

    def join(self) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def _read(self, name: str) -> str:
        try:
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return ""

    def peak_bytes(self) -> int | None:
        """The most the cgroup held at once, page cache included (what it reclaimed from, near the limit)."""
        text = self._read("memory.peak" if self.v2 else "memory.max_usage_in_bytes").strip()
        return int(text) if text.isdigit() else None

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for want of memory."""
        for line in self._read("memory.events" if self.v2 else "memory.oom_control").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def close(self) -> None:
        try:
            os.rmdir(self.path)
        except OSError:
            pass


__all__ = ["MemoryLimit", "parse_size"]
