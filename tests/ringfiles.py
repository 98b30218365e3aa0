"""Black-box rings written as the recorder writes them (docs/FORMAT.md "The black box"), for the reader's and the
analysis' tests: `write_ring` plays the ring's writer over a rank file's op lines, `to_black_box` turns a recorded
trace dir (or a synthetic trace) into a black-box one: each rank file holding its few records, its op records and
step markers in a ring beside it. An honest stand-in for `disttrace run --black-box` where a test needs a ring of
a job's real records cut at a chosen size."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from disttrace.tracer.format import (BEGIN, END, RANK_FILE_SUFFIX, RING_DATA_AT, RING_HEADER, RING_MAGIC,
                                     RING_SUFFIX, STEP, SUMMARY, WAIT, is_rank_file)

RING_KINDS = (BEGIN, END, WAIT, SUMMARY, STEP)  # the records a black-box rank writes into its ring


def write_ring(path, lines: list[bytes], size: int, lag: bool = False) -> int:
    """Write `lines` (each ending in a newline) into a ring file of `size` bytes as the writer does: appended at
    `pos`; a line that does not fit before the end zeroes the rest, counts a wrap and goes to RING_DATA_AT.
    `lag`: the header's `pos` one line behind (a thread race the reader tolerates). Returns the wraps."""
    buf = bytearray(size)
    pos, wraps, before = RING_DATA_AT, 0, RING_DATA_AT
    for line in lines:
        if pos + len(line) > size:
            buf[pos:] = bytes(size - pos)
            wraps, pos = wraps + 1, RING_DATA_AT
        buf[pos:pos + len(line)] = line
        before, pos = pos, pos + len(line)
    struct.pack_into(RING_HEADER, buf, 0, RING_MAGIC, before if lag else pos, wraps, size)
    Path(path).write_bytes(bytes(buf))
    return wraps


def split_rank_file(data: bytes) -> tuple[list[bytes], list[bytes]]:
    """(the rank file's own lines, the ring's lines) of a recorded rank file's lines, each with its newline."""
    head, ring = [], []
    for line in data.splitlines(keepends=True):
        try:
            kind = json.loads(line).get("k")
        except ValueError:
            kind = None
        (ring if kind in RING_KINDS else head).append(line)
    return head, ring


def to_black_box(src, dst, ring_bytes: int | dict, lag: bool = False) -> dict[str, int]:
    """Turn the trace dir `src` into a black-box one in `dst`: each rank file's op records and step markers into
    a ring of `ring_bytes` (an int, or per rank), its meta marked black_box; other files (run.json) copied.
    Returns each rank file's name -> its ring's wraps."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    wraps = {}
    for f in sorted(src.iterdir()):
        if not f.is_file():
            continue
        if not is_rank_file(f.name):
            (dst / f.name).write_bytes(f.read_bytes())
            continue
        head, ring = split_rank_file(f.read_bytes().rstrip(b"\0"))
        meta = json.loads(head[0])
        size = ring_bytes[meta["rank"]] if isinstance(ring_bytes, dict) else ring_bytes
        meta["black_box"] = {"ring_bytes": size, "ring_ops": size // 512, "window": {"by": "steps", "every": 10},
                             "keep_snapshots": 8}
        head[0] = json.dumps(meta, separators=(",", ":")).encode() + b"\n"
        (dst / f.name).write_bytes(b"".join(head))
        wraps[f.name] = write_ring(dst / (f.name[:-len(RANK_FILE_SUFFIX)] + RING_SUFFIX), ring, size, lag)
    return wraps


def rank_files_of(trace, out, step_ends=()) -> Path:
    """A synthetic trace (tests/synthetic.py's Trace) written as a trace dir of rank files in `out`: a meta, a
    group record per group, each event's begin and end, in time order (the recorder's order); `step_ends`: the
    times every rank marks a step's end (mark_step())."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    groups: dict[str, int] = {}
    per_rank: dict[int, list[tuple[int, dict]]] = {r: [] for r in trace.world}
    for ev in trace.events:
        r = ev["rank"]
        g = groups.setdefault(ev["group"], len(groups))
        b = {"k": BEGIN, "i": ev["id"], "op": ev["op"], "t": ev["start_ns"], "g": g, "bytes": ev.get("bytes", 0),
             "site": ev.get("site") or "train.py:10 in main"}
        for key, field in (("group_seq", "gs"), ("pair_seq", "ps"), ("peer", "peer"), ("root", "root"), ("tag", "tag")):
            if ev.get(key) is not None:
                b[field] = ev[key]
        per_rank[r].append((ev["start_ns"], b))
        if ev.get("end_ns") is not None:
            per_rank[r].append((ev["end_ns"], {"k": END, "i": ev["id"], "t": ev["end_ns"]}))
    ranks_of = {ev["group"]: ev["group_ranks"] for ev in trace.events}
    for r in per_rank:
        per_rank[r] += [(t, {"k": STEP, "t": t, "n": n, "src": "api"}) for n, t in enumerate(step_ends, 1)]
    for r, recs in per_rank.items():
        lines = [{"k": "meta", "v": 2, "rank": r, "world_size": len(trace.world), "host": "h", "pid": 100 + r,
                  "backend": "gloo", "mono_ns": 0, "wall_ns": 0}]
        lines += [{"k": "group", "g": g, "name": name, "ranks": ranks_of[name]} for name, g in groups.items()]
        lines += [rec for _, rec in sorted(recs, key=lambda x: (x[0], x[1]["k"] != END))]
        (out / f"rank-{r:05d}-h-{100 + r}{RANK_FILE_SUFFIX}").write_bytes(
            b"".join(json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in lines))
    return out


def ring_lines_of(path) -> list[bytes]:
    """A rank file's op lines, as its ring would be written."""
    return split_rank_file(Path(path).read_bytes())[1]


__all__ = ["RING_KINDS", "rank_files_of", "ring_lines_of", "split_rank_file", "to_black_box", "write_ring"]
