"""The process groups a tracer has seen: each gets an index (the op records' "g") and one "group" record the
first time one of its ops is recorded, which maps its group-local ranks to global ones."""

from __future__ import annotations

import itertools

import torch
import torch.distributed as dist

from ..format import GROUP
from . import ncclhook


class Group:
    __slots__ = ("gidx", "name", "ranks", "next_seq", "pg", "gloo", "hook")

    def __init__(self, gidx, name, ranks, pg, gloo, hook=None):
        self.gidx, self.name, self.ranks, self.pg = gidx, name, ranks, pg
        self.next_seq = 0
        self.gloo = gloo  # the CPU backend whose methods fastpath.py calls for this group's CPU ops, or None
        self.hook = hook  # ncclhook.DeviceEnds: its CUDA collectives end through NCCL's completion hook, or None

    def global_rank(self, local: int) -> int:
        """A group-local rank as a global one."""
        return self.ranks[local] if 0 <= local < len(self.ranks) else local


def _gloo_backend(pg):
    """The group's CPU backend if it is exactly ProcessGroupGloo (a subclass may override the methods that
    fastpath.py calls), else None."""
    try:
        backend = pg._get_backend(torch.device("cpu"))
    except Exception:  # noqa: BLE001 - no CPU backend, or an older torch
        return None
    gloo = getattr(dist, "ProcessGroupGloo", None)
    return backend if gloo is not None and type(backend) is gloo else None


def _backend_name(pg) -> str:
    try:
        return str(dist.get_backend(pg))
    except Exception:  # noqa: BLE001
        return ""


class Groups(dict):
    """id(ProcessGroup) -> its Group. A plain dict to look into (fastpath.py's wrapper does, once per op);
    of() adds a group the first time, with its record (`write`: the recorder's)."""

    def __init__(self, write):
        super().__init__()
        self._write = write
        self._gidx = itertools.count()

    def of(self, pg) -> Group:
        """The Group of a Python ProcessGroup object."""
        g = self.get(id(pg))
        return g if g is not None else self._new(pg)

    def _new(self, pg) -> Group:
        try:
            ranks = tuple(dist.get_process_group_ranks(pg))
        except Exception:  # noqa: BLE001 - a group torch does not know by that handle: use its size
            ranks = tuple(range(pg.size()))
        name = str(getattr(pg, "group_name", "") or "")
        desc = str(getattr(pg, "group_desc", "") or "")
        # pg is kept alive while it is ours (its id() is our key) and let go when the job destroys it (release)
        g = Group(next(self._gidx), name, ranks, pg, _gloo_backend(pg), ncclhook.attach(pg))
        self[id(pg)] = g
        self._write({"k": GROUP, "g": g.gidx, "name": name, "desc": desc, "ranks": list(ranks),
                     "backend": _backend_name(pg)})
        return g
