"""Hand-built black-box aggregates (docs/FORMAT.md, "The black box"; format.py's constants), for the reader's and
the whole-run analysis' tests: a rank file with its meta, group, clock and aggkey records, and its `.agg` file of
rows written as the spec says. `simulate` makes a job's windows from a training loop's arithmetic (each rank
computes, then an all_reduce that ends when the last rank arrives)."""

from __future__ import annotations

import os
import random
import struct

import orjson

from disttrace.tracer.format import (AGG_DATA_AT, AGG_MAGIC, AGG_ROW, AGG_SUFFIX, AGG_WINDOW_KEY, AGGKEY,
                                     RANK_FILE_SUFFIX, rank_file_stem)

MS = 1_000_000
GRAD_BYTES = 4 << 20  # the gradients' all_reduce: the key [4 MiB, 8 MiB)
LOSS_BYTES = 4        # the loss' all_reduce: [4, 8)
KEYS = {1: ("all_reduce", GRAD_BYTES, 2 * GRAD_BYTES), 2: ("all_reduce", LOSS_BYTES, 2 * LOSS_BYTES),
        3: ("send", 1024, 2048)}


def row(window: int, key: int, count: int = 0, total: int = 0, most: int = 0, nbytes: int = 0, t_end: int = 0,
        flags: int = 0) -> bytes:
    return struct.pack(AGG_ROW, window, key, flags, count, 0, total, most, nbytes, t_end)


def window_row(window: int, start: int, end: int, ops: int, first: int = -1, last: int = -1, lost: bool = False):
    """The window's own row: count = ops, total = its start, max = its last step marker, bytes = its first."""
    return row(window, AGG_WINDOW_KEY, ops, start, last, first, end, 1 if lost else 0)


def write_rank(out: str, rank: int, world: int, rows: list[bytes], keys=KEYS, offset_ns: int = 0,
               by: str = "steps", every: float = 10, magic: bytes = AGG_MAGIC, pid: int | None = None,
               ops: int = 2) -> str:
    """A rank's rank file (meta, the world group, a clock record, its aggkey records, `ops` all_reduces: what the
    ring's reader would add) and `.agg` file; the stem."""
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, rank_file_stem(rank, "node", pid or 1000 + rank))
    records = [
        {"k": "meta", "v": 2, "rank": rank, "world_size": world, "local_rank": rank, "host": "node",
         "pid": pid or 1000 + rank, "backend": "gloo", "mono_ns": 0, "wall_ns": 1_700_000_000 * 10 ** 9,
         "argv": ["train.py"], "init": 1, "run_id": "job",
         "black_box": {"ring_bytes": 1 << 21, "ring_ops": 4000, "window": {"by": by, "every": every},
                       "keep_snapshots": 8}},
        {"k": "group", "g": 0, "name": "0", "desc": "default_pg", "ranks": list(range(world)), "backend": "gloo"},
        {"k": "clock", "phase": "start", "offset_ns": offset_ns, "uncertainty_ns": 1000, "mono_ns": 0, "window": 0},
        *({"k": AGGKEY, "id": kid, "g": 0, "op": op, "lo": lo, "hi": hi} for kid, (op, lo, hi) in keys.items()),
        *(r for i in range(ops) for r in (
            {"k": "b", "i": i, "op": "all_reduce", "api": "all_reduce", "g": 0, "gs": i, "bytes": 16,
             "dtype": "float32", "shape": [4], "t": 10 * MS * (i + 1) - offset_ns, "site": "train.py:20"},
            {"k": "e", "i": i, "t": 10 * MS * (i + 1) + MS - offset_ns}))]
    with open(stem + RANK_FILE_SUFFIX, "wb") as f:
        f.write(b"".join(orjson.dumps(r) + b"\n" for r in records))
    with open(stem + AGG_SUFFIX, "wb") as f:
        f.write(magic + bytes(AGG_DATA_AT - len(magic)) + b"".join(rows))
    return stem


def simulate(out: str, world: int = 4, steps: int = 60, every: int = 10, compute_ms: float = 100.0,
             slow: tuple[int, int, float] | None = None, jitter_ms: float = 2.0, marked: bool = True,
             seconds: float = 1.0, offsets: dict[int, int] | None = None, seed: int = 0,
             first: tuple[int, float] | None = None, widen: dict[int, tuple[int, int]] | None = None) -> None:
    """A data-parallel loop's aggregates: each step every rank computes (compute_ms ± jitter; `slow` = (rank, from
    step, extra ms): that rank computes longer from that step on), then all_reduces its gradients (ends 5 ms after
    the last arrival) and its loss (1 ms); `first` = (rank, ms): that rank arrives so late at the first all_reduce
    (gloo connecting its pairs). Windows: every `every` steps where `marked`, else every `seconds` of each rank's own
    clock (raw = rank 0's - its offset); `widen` = {rank: (marker, width)}: that rank's windows end at multiples of
    `width` after that marker (as the recorder widens them: record/aggregates.py)."""
    rnd = random.Random(seed)
    offsets = offsets or {}
    t = 1_000 * MS  # rank 0's clock
    ops: dict[int, list] = {r: [] for r in range(world)}  # (end on rank 0's clock, key, duration, bytes, step)
    starts = {r: t for r in range(world)}
    for step in range(steps):
        arrive = {}
        for r in range(world):
            c = compute_ms + rnd.uniform(-jitter_ms, jitter_ms)
            if slow and r == slow[0] and step >= slow[1]:
                c += slow[2]
            if first and r == first[0] and step == 0:
                c += first[1]
            arrive[r] = t + int(c * MS)
        end = max(arrive.values()) + 5 * MS
        for r in range(world):
            ops[r].append((end, 1, end - arrive[r], GRAD_BYTES, step))
            ops[r].append((end + MS, 2, MS, LOSS_BYTES, step))
        t = end + MS
    for r in range(world):
        off = offsets.get(r, 0)
        rows = _marked_rows(ops[r], every, starts[r] - off, off, (widen or {}).get(r)) if marked else \
            _timed_rows(ops[r], int(seconds * 1e9), starts[r] - off, t - off, off)
        write_rank(out, r, world, rows, offset_ns=off, by="steps" if marked else "seconds",
                   every=every if marked else seconds)


def _marked_rows(ops: list, every: int, start: int, off: int, widen: tuple[int, int] | None = None) -> list[bytes]:
    rows, window = [], 0
    by_window: dict[int, list] = {}
    for op in ops:  # (step s ends at marker s + 1; a window ends at a marker that is a multiple of its width)
        marker = op[4] + 1
        width = widen[1] if widen and marker > widen[0] else every
        end = -(-marker // width) * width
        by_window.setdefault(end, []).append(op)
    for w, (_, mine) in enumerate(sorted(by_window.items())):
        end = max(o[0] for o in mine) - off
        steps = sorted({o[4] for o in mine})
        rows += _key_rows(w, mine)
        rows.append(window_row(w, start, end, len(mine), first=steps[0] + 1, last=steps[-1] + 1))
        start = end
        window = w
    return rows


def _timed_rows(ops: list, every_ns: int, start: int, stop: int, off: int) -> list[bytes]:
    rows = []
    for w in range((stop - start) // every_ns + 1):
        lo, hi = start + w * every_ns, start + (w + 1) * every_ns
        mine = [o for o in ops if lo <= o[0] - off < hi]
        rows += _key_rows(w, mine)
        rows.append(window_row(w, lo, min(hi, stop), len(mine)))
    return rows


def _key_rows(w: int, ops: list) -> list[bytes]:
    out = []
    for key in sorted({o[1] for o in ops}):
        mine = [o for o in ops if o[1] == key]
        out.append(row(w, key, len(mine), sum(o[2] for o in mine), max(o[2] for o in mine), sum(o[3] for o in mine)))
    return out
