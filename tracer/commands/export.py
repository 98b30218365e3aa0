"""`disttrace export TRACE... --format chrome -o out.json`: the trace as Chrome Trace Event JSON.

The file opens in Perfetto (ui.perfetto.dev) and chrome://tracing: a process per rank, a track per kind of op
(collectives, point-to-point; a second track of a kind where async ops overlap) and, for a pipeline stage, a track
of its schedule (each forward and backward named by its micro-batch: F3, B3), one `X` slice per op with
its fields and the analysis' wait and bandwidth in args, flow arrows for matched sends and receives and from
each collective's last-arriving rank to the others, and a `bytes in flight` counter per rank. docs/EXPORT.md
maps every field.

Imports neither torch nor textual.
"""

from __future__ import annotations

import os
import sys
from typing import Iterator

import orjson

from ..analysis import analyze
from ..analysis.core.matching import finished, finished_at
from ..analysis.core.results import NULL, Analysis
from ..data.table import NONE, P2P_OPS
from ..errors import TraceError
from ..data.load import load_trace
from .run_choice import add_run_argument, chosen_runs
from .trace_help import TRACE_HELP

# track (Chrome "thread") families per rank: tid = family base + lane; a pipeline stage's schedule: one track
_COLL_TID, _P2P_TID, _LANES = 0, 1000, 1000
_SCHEDULE_TID = 2000


def add_arguments(p) -> None:
    p.add_argument("traces", nargs="+", metavar="TRACE", help=TRACE_HELP)
    p.add_argument("--format", choices=("chrome",), default="chrome",
                   help="chrome: Chrome Trace Event JSON for Perfetto / chrome://tracing (the default)")
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="file to write (default: TRACE's name + .chrome.json in the current directory; - for "
                        "stdout); with --run all, one file per run, FILE's name + .runN")
    add_run_argument(p)


def main(args) -> int:
    runs = chosen_runs(args.run, args.traces)
    if len(runs) > 1 and args.output == "-":
        raise TraceError("--run all writes one file per run: give -o FILE, not -")
    for run in runs:
        export_run(args, run, len(runs) > 1)
    return 0


def export_run(args, run: int | None, several: bool) -> None:
    table = load_trace(args.traces, run=run)
    for w in table.warnings:
        sys.stderr.write(f"disttrace: warning: {w}\n")
    a = analyze(table)
    out = args.output
    if out is None:
        out = (os.path.basename(os.path.normpath(args.traces[0])) or "trace") + ".chrome.json"
    if several:
        stem, ext = os.path.splitext(out)
        out = f"{stem}.run{run}{ext}"
    if out == "-":
        write_chrome(a, sys.stdout.buffer, sources=args.traces)
        sys.stdout.flush()
        return
    tmp = f"{out}.tmp{os.getpid()}"
    try:  # 0600 like the trace itself: summaries may hold tensor values
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as e:
        raise TraceError(f"cannot write {out}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            write_chrome(a, fh, sources=args.traces)
        os.replace(tmp, out)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise TraceError(f"cannot write {out}: {e.strerror or e}") from None
    sys.stderr.write(f"disttrace: wrote {out} ({len(table)} ops of {len(table.ranks)} ranks); "
                     "open it in https://ui.perfetto.dev or chrome://tracing\n")


def write_chrome(a: Analysis, fh, sources=()) -> None:
    """Stream the Chrome trace of analysis `a` into binary file `fh` (one event per line, never all in memory)."""
    for chunk in _chunks(a, sources):
        fh.write(chunk)


def _chunks(a: Analysis, sources) -> Iterator[bytes]:
    dumps = _dumps
    yield b'{"displayTimeUnit":"ns","traceEvents":[\n'
    buf: list[bytes] = []
    first = True
    stats: dict = {}
    for ev in chrome_events(a, stats):
        buf.append(dumps(ev))
        if len(buf) >= 4096:
            yield (b"" if first else b",\n") + b",\n".join(buf)
            first = False
            buf.clear()
    yield (b"" if first or not buf else b",\n") + b",\n".join(buf)
    # after the events: it carries what writing them found
    yield b'\n],\n"otherData":' + dumps({**_other_data(a, sources), **stats}) + b"}\n"


def _dumps(obj) -> bytes:
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:  # values copied from a trace: ints past 64 bits, nesting past orjson's limit
        return orjson.dumps(_plain(obj, 0))


def _plain(obj, depth: int):
    """obj with what JSON cannot carry (ints past 64 bits, nesting past 64 levels) turned into short strings."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, float)):
        return obj
    if isinstance(obj, int):
        return obj if -(1 << 63) <= obj < (1 << 64) else str(obj)[:40]
    if depth >= 64:
        return "..."
    if isinstance(obj, dict):
        return {str(k): _plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v, depth + 1) for v in obj]
    return str(obj)[:200]


def to_chrome(a: Analysis, sources=()) -> dict:
    """The Chrome trace as one dict (tests, small traces)."""
    return orjson.loads(b"".join(_chunks(a, sources)))


def _other_data(a: Analysis, sources) -> dict:
    return {"generator": "disttrace export", "t0_ns": a.span_ns[0], "sources": [str(s) for s in sources],
            "warnings": list(a.table.warnings[:50]), "problems": [p.message for p in a.problems[:50]]}


def chrome_events(a: Analysis, stats: dict | None = None) -> Iterator[dict]:
    """Metadata, slices, flows and counters, in that order (ts in µs relative to the trace's first event).

    An arrow whose end would come before its start (the two ranks' clocks disagree; the report calls it a clock
    problem) is left out, as viewers drop it anyway: `stats["flows_left_out"]` counts them."""
    stats = {} if stats is None else stats
    stats["flows_left_out"] = 0
    t = a.table
    n = len(t)
    t0 = a.span_ns[0] if n else 0
    t_end = _trace_end(a)

    def us(ns: int) -> float:
        return (ns - t0) / 1000.0

    done = finished(t)
    ends = [t_end if e == NONE else (e if e >= s else s) for e, s in zip(done, t.start_ns)]
    tids = _lanes(t, ends)

    # -- metadata: names and order of processes (ranks) and threads (tracks)
    ranks = sorted(set(t.ranks) | set(t.rank))
    for r in ranks:
        info = t.ranks.get(r)
        host = info.host if info and info.host else ""
        yield {"ph": "M", "name": "process_name", "pid": r, "tid": 0,
               "args": {"name": f"rank {r} ({host})" if host else f"rank {r}"}}
        yield {"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}}
    for (r, tid) in sorted(set(zip(t.rank, tids))):
        family, lane = ("collectives", tid - _COLL_TID) if tid < _P2P_TID else ("p2p", tid - _P2P_TID)
        name = family if lane == 0 else f"{family} ({lane + 1})"
        yield {"ph": "M", "name": "thread_name", "pid": r, "tid": tid, "args": {"name": name}}
        yield {"ph": "M", "name": "thread_sort_index", "pid": r, "tid": tid, "args": {"sort_index": tid}}
    cells = a.pipeline.schedule if a.pipeline is not None else []
    p = len(a.pipeline.stages) if a.pipeline is not None else 1
    for r, stages in sorted(_stages_of(cells).items()):
        yield {"ph": "M", "name": "thread_name", "pid": r, "tid": _SCHEDULE_TID,
               "args": {"name": f"pipeline schedule (stage {', '.join(map(str, stages))})"}}
        yield {"ph": "M", "name": "thread_sort_index", "pid": r, "tid": _SCHEDULE_TID,
               "args": {"sort_index": _SCHEDULE_TID}}

    # -- slices
    args_of = _Args(a)
    op_c, rank_c, start_c = t.op, t.rank, t.start_ns
    for i in range(n):
        op, start = op_c[i], start_c[i]
        yield {"ph": "X", "name": op, "cat": "p2p" if op in P2P_OPS else "collective", "pid": rank_c[i],
               "tid": tids[i], "ts": (start - t0) / 1000.0, "dur": (ends[i] - start) / 1000.0, "args": args_of(i)}

    # -- the pipeline's schedule: each stage's forwards and backwards, named by micro-batch (F3, B3; F3' on a
    #    rank's second virtual stage), on a track of their own. (An iteration's first forward, packed at its usual
    #    length against the send of its result, may be estimated to start before the trace's first event: it
    #    starts there.)
    for index, rank, stage, kind, mb, start, end, estimated in cells:
        start = min(max(start, t0), end)
        yield {"ph": "X", "name": f"{kind}{mb}" + "'" * (stage // p), "cat": "schedule", "pid": rank,
               "tid": _SCHEDULE_TID, "ts": us(start), "dur": (end - start) / 1000.0,
               "args": {"kind": "forward" if kind == "F" else "backward", "micro_batch": mb, "stage": stage,
                        "iteration": index, "estimated": estimated}}

    # -- flows: send -> recv; last arrival of a collective -> every other rank (one s/f pair per arrow)
    fid = 0
    for m in a.p2p:
        if m.send is None or m.recv is None:
            continue
        s, r = m.send, m.recv
        s_ts = t.start_ns[s]
        f_ts = min(max(t.start_ns[r], s_ts), ends[r])  # where data can first flow: inside the recv slice
        if f_ts < s_ts:
            stats["flows_left_out"] += 1
            continue
        fid += 1
        yield from _flow(fid, "p2p", f"send {m.src}->{m.dst}", t.rank[s], tids[s], us(s_ts),
                         t.rank[r], tids[r], us(f_ts))
    for c in a.collectives:
        last = c.last_arrival
        events = c.events  # made on each read: once here
        if last is None or last not in events or len(events) < 2:
            continue
        src = events[last]
        latest = t.start_ns[src]
        for rank, row in sorted(events.items()):
            if rank == last:
                continue
            f_ts = min(max(latest, t.start_ns[row]), ends[row])
            if f_ts < latest:
                stats["flows_left_out"] += 1
                continue
            fid += 1
            yield from _flow(fid, "collective", f"{c.op} #{c.group_seq}: last arrival", last, tids[src], us(latest),
                             rank, tids[row], us(f_ts))

    # -- counters: bytes this rank has put into ops that have not finished yet
    deltas: dict[int, dict[int, int]] = {}
    for r, b, start, fin, e in zip(t.rank, t.bytes, t.start_ns, done, ends):
        if b <= 0:
            continue
        d = deltas.get(r)
        if d is None:
            d = deltas[r] = {}
        d[start] = d.get(start, 0) + b
        if fin != NONE:
            d[e] = d.get(e, 0) - b
    for r in sorted(deltas):
        level = 0
        for ts in sorted(deltas[r]):
            level += deltas[r][ts]
            yield {"ph": "C", "name": "bytes in flight", "pid": r, "tid": 0, "ts": us(ts), "args": {"bytes": level}}


def _stages_of(cells) -> dict[int, list[int]]:
    """rank -> the pipeline stages its schedule's cells are of."""
    out: dict[int, set[int]] = {}
    for c in cells:
        out.setdefault(c[1], set()).add(c[2])
    return {r: sorted(s) for r, s in out.items()}


def _flow(fid, cat, name, pid_s, tid_s, ts_s, pid_f, tid_f, ts_f) -> Iterator[dict]:
    yield {"ph": "s", "id": fid, "name": name, "cat": cat, "pid": pid_s, "tid": tid_s, "ts": ts_s}
    yield {"ph": "f", "bp": "e", "id": fid, "name": name, "cat": cat, "pid": pid_f, "tid": tid_f, "ts": ts_f}


def _trace_end(a: Analysis) -> int:
    t = a.table
    if not len(t):
        return 0
    return max(a.span_ns[1], max(t.start_ns), max(t.end_ns), max(t.wait_end_ns))


def _lanes(t, ends: list[int]) -> list[int]:
    """A track per rank and family for each op, so that slices on one track never overlap (Perfetto wants
    slices of one thread properly nested; ops of one rank overlap only when async)."""
    tids = [0] * len(t)
    free_at: dict[tuple[int, int], list[int]] = {}  # (rank, family) -> end of the last slice on each lane
    for i in sorted(range(len(t)), key=lambda i: (t.start_ns[i], i)):
        base = _P2P_TID if t.op[i] in P2P_OPS else _COLL_TID
        lanes = free_at.setdefault((t.rank[i], base), [])
        start = t.start_ns[i]
        for k, busy_until in enumerate(lanes):
            if busy_until <= start:
                lanes[k] = ends[i]
                break
        else:
            k = len(lanes)
            lanes.append(ends[i])
        tids[i] = base + min(k, _LANES - 1)
    return tids


class _Args:
    """args of slice i; columns and per-group values bound once (this runs once per event)."""

    def __init__(self, a: Analysis):
        self.a, t = a, a.table
        self.t = t
        self.groups = [(g.name, list(g.ranks)) for g in t.groups]
        self.ints = (("group_seq", t.group_seq), ("seq", t.seq), ("peer", t.peer), ("root", t.root),
                     ("tag", t.tag), ("id", t.id))
        self.objs = (("dtype", t.dtype), ("shape", t.shape), ("site", t.site), ("error", t.error), ("in", t.in_),
                     ("out", t.out))
        self.n_inst, self.n_p2p = len(a.instance_of), len(a.p2p_of)
        # a collective's row's numbers from the instances' columns, where a view of its instance for each of a
        # million rows was a large share of the export's time: each row's own wait (its instance's wait of its rank)
        import numpy as np

        ct = a.collectives
        self.ct = ct
        self.row_wait = np.zeros(len(t), np.int64)
        self.row_wait[np.frombuffer(ct.rows, np.int32)] = np.frombuffer(ct.waits, np.int64)

    def __call__(self, i: int) -> dict:
        a, t = self.a, self.t
        name, ranks = self.groups[t.gid[i]]
        args = {"op": t.op[i], "api": t.api[i], "bytes": t.bytes[i], "group": name, "group_ranks": ranks,
                "status": t.status[i]}
        for key, col in self.ints:
            v = col[i]
            if v != NONE:
                args[key] = v
        for key, col in self.objs:
            v = col[i]
            if v:
                args[key] = v
        if t.async_op[i]:
            args["async_op"] = True
        if t.wait_start_ns[i] != NONE:
            args["wait_call_ns"] = [t.wait_start_ns[i], t.wait_end_ns[i] if t.wait_end_ns[i] != NONE else None]
        if finished_at(t, i) == NONE and args["status"] == "ok":
            args["status"] = "unfinished"
        k = a.instance_of[i] if i < self.n_inst else -1
        if k >= 0:
            ct = self.ct
            args["wait_ns"] = int(self.row_wait[i])
            args["wait_kind"] = ct.wait_kind[k]
            args["last_arrival"] = ct.last_arrival[k]
            if ct.duration_ns[k] != NULL:
                args["duration_after_last_arrival_ns"] = ct.duration_ns[k]
            algbw, busbw = ct.algbw_gbps[k], ct.busbw_gbps[k]
            if algbw == algbw:  # (NaN: none)
                args["algbw_GBps"] = round(algbw, 4)
                args["busbw_GBps"] = round(busbw, 4) if busbw == busbw else None
            missing = ct.missing.get(k)
            if missing:
                args["missing_ranks"] = list(missing)
        k = a.p2p_of[i] if i < self.n_p2p else -1
        if k >= 0:
            m = a.p2p[k]
            is_send = m.send == i
            args["wait_ns"] = m.late_receiver_ns if is_send else m.late_sender_ns
            args["wait_kind"] = "late_receiver" if is_send else "late_sender"
            args["matched"] = m.send is not None and m.recv is not None
            if m.transfer_ns:
                args["transfer_ns"] = m.transfer_ns
                args["GBps"] = round(m.bytes / m.transfer_ns, 4)
        extra = t.extra[i]
        if extra:
            for key, val in extra.items():
                args.setdefault(key, val)
        return args


__all__ = ["add_arguments", "main", "chrome_events", "to_chrome", "write_chrome"]
