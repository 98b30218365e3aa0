"""The memory samples of a trace recorded with `disttrace run --memory`: each rank's `.mem` file beside its rank file
(the same stem; docs/FORMAT.md "Memory"; its constants in format.py) -> a `MemoryTrace` of numpy columns per rank.

Read for the ranks of a table already loaded (its RankInfo.source names each rank's file, so the run is the table's),
their times put on the table's timeline by the rank's clock offset (RankInfo.clock_offset_ns). Not events: the
analysis (analysis/memory/) cuts them into the table's steps. What it tolerates, each said in `damage` (never a
crash): a line that does not parse or a sample without its bytes (skipped, counted), a newer version (left out).
Imports neither torch nor textual.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import orjson

from ...format import (MEM_KINDS, MEM_META, MEM_OPT, MEM_SAMPLE, MEM_SUFFIX, MEM_VERSION, MEM_WRAP,
                       RANK_FILE_SUFFIX)


@dataclass
class RankMemory:
    """One rank's samples, in time order: columns of equal length."""

    rank: int
    t: np.ndarray            # int64 ns on the table's timeline
    at: list[str]            # format.MEM_AT_*: "op" (a collective, before it ran), "peak", "opt", "end"
    op: list[str | None]     # the collective ("c10d.allreduce_"), the op at a peak ("aten.mm"), "Adam.step", ...
    site: list[str | None]   # a peak's call site (the user's line), else None
    bytes: np.ndarray        # int64 (n, len(MEM_KINDS)): the bytes held by kind
    rss: np.ndarray          # int64: the process's resident bytes where read (-1: not read: a peak)
    device: list[dict | None]  # on CUDA: the caching allocator's counters (record/memory.py's _cuda_counters)
    wraps: list[dict] = field(default_factory=list)       # "mwrap" records: DDP, FSDP2 as the job made them
    optimizers: list[dict] = field(default_factory=list)  # "mopt" records: each optimizer at its first step
    meta: dict = field(default_factory=dict)

    @property
    def total(self) -> np.ndarray:
        return self.bytes.sum(axis=1)


@dataclass
class MemoryTrace:
    ranks: dict[int, RankMemory]
    kinds: tuple[str, ...] = MEM_KINDS
    step: int | None = None  # the step whose breakdown was asked for (`--memory-step`), None: the first steady
    damage: list[str] = field(default_factory=list)


def mem_path(rank_file: str) -> str:
    return (rank_file[: -len(RANK_FILE_SUFFIX)] if rank_file.endswith(RANK_FILE_SUFFIX) else rank_file) + MEM_SUFFIX


def has_memory(paths: list[str]) -> bool:
    """Whether these trace dirs hold a `.mem` file (a trace recorded with --memory)."""
    return any(n.endswith(MEM_SUFFIX) for p in paths if os.path.isdir(p) for n in os.listdir(p))


def read_memory(table) -> MemoryTrace | None:
    """The memory samples of the table's ranks; None when none of them has a `.mem` file."""
    ranks: dict[int, RankMemory] = {}
    damage: list[str] = []
    step = None
    for r, info in sorted(table.ranks.items()):
        path = mem_path(info.source) if info.source else ""
        if not path or not os.path.exists(path):
            continue
        got = _read_rank(path, r, info.clock_offset_ns, damage)
        if got is not None:
            ranks[r] = got
            if got.meta.get("step") is not None and step is None:
                step = got.meta["step"]
    return MemoryTrace(ranks, MEM_KINDS, step, damage) if ranks else None


def _read_rank(path: str, rank: int, offset: int, damage: list[str]) -> RankMemory | None:
    name = os.path.basename(path)
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        damage.append(f"{name}: cannot read it ({e.strerror or e})")
        return None
    meta: dict = {}
    t, at, op, site, rows, rss, dev, wraps, opts = [], [], [], [], [], [], [], [], []
    bad = 0
    width = len(MEM_KINDS)
    for line in lines:
        line = line.strip(b"\x00 \r")
        if not line:
            continue
        try:
            rec = orjson.loads(line)
            k = rec["k"]
            if k == MEM_SAMPLE:
                b = rec["b"]
                if len(b) != width or not all(type(x) is int for x in b):
                    raise ValueError
                t.append(int(rec["t"]) + offset)
                rows.append(b)
                at.append(rec.get("at", ""))
                op.append(rec.get("op"))
                site.append(rec.get("site"))
                rss.append(rec["rss"] if type(rec.get("rss")) is int else -1)
                dev.append(rec.get("dev"))
            elif k == MEM_META:
                meta = rec
            elif k == MEM_WRAP:
                wraps.append(rec)
            elif k == MEM_OPT:
                opts.append(rec)
        except Exception:  # noqa: BLE001 - a malformed record: counted, the rest is read
            bad += 1
    if meta.get("v", MEM_VERSION) > MEM_VERSION:
        damage.append(f"{name}: version {meta.get('v')} is newer than this disttrace reads ({MEM_VERSION}): left out")
        return None
    if bad:
        damage.append(f"{name}: {bad} malformed record(s) skipped")
    order = np.argsort(np.asarray(t, np.int64), kind="stable")
    pick = order.tolist()
    return RankMemory(rank, np.asarray(t, np.int64)[order],
                      [at[i] for i in pick], [op[i] for i in pick], [site[i] for i in pick],
                      np.asarray(rows, np.int64).reshape(-1, width)[order], np.asarray(rss, np.int64)[order],
                      [dev[i] for i in pick], wraps, opts, meta)
