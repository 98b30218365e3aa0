"""`disttrace runs TRACE... [--json]`: the runs a trace holds (process-group worlds: restarts, successive jobs),
oldest first; `report`, `events`, `export` and `view` take `--run N` to pick one."""

from __future__ import annotations

import sys
from datetime import datetime

import orjson

from ..units import fmt_ns
from ..data.load import find_rank_files, find_runs, find_snapshots, unreadable
from ..errors import TraceError


def add_arguments(p) -> None:
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace dirs (one per node)")
    p.add_argument("--json", action="store_true", help="one JSON object per run, one per line")


def main(args) -> int:
    files = []
    for path in args.traces:
        mine = find_rank_files(path)
        if not mine:
            raise TraceError(f"{path}: no rank files in it (runs are in trace dirs, not events files)")
        files += mine
    runs, skipped = find_runs(files)
    for path in skipped:
        sys.stderr.write(f"disttrace: warning: {unreadable(path)}\n")
    if not runs:
        raise TraceError(f"{', '.join(args.traces)}: no readable rank files")
    out = sys.stdout
    if args.json:
        for run in runs:
            out.write(orjson.dumps(run.to_json()).decode() + "\n")
        return 0
    rows = [("run", "attempt", "started", "duration", "ranks", "ops", "outcome", "command")]
    for run in runs:
        rows.append((str(run.number), str(run.attempt),
                     datetime.fromtimestamp(run.start_wall_ns / 1e9).strftime("%Y-%m-%d %H:%M:%S"),
                     fmt_ns(max(run.end_wall_ns - run.start_wall_ns, 0)),
                     f"{_span(run.ranks)} of {run.world_size}", str(run.ops), run.outcome(),
                     " ".join(run.argv)[:60]))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]) - 1)]
    for r in rows:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths)) + "  " + r[-1] + "\n")
    _snapshots(out, args.traces)
    return 0


def _snapshots(out, traces: list[str]) -> None:
    """A black-box trace's snapshots, each a trace dir of its own (its path opens it)."""
    snaps = [s for p in traces for s in find_snapshots(p)]
    if snaps:
        out.write(f"\nsnapshots ({len(snaps)}): each a trace dir, open it by its path\n")
    for s in snaps:
        when = (datetime.fromtimestamp(s["wall_ns"] / 1e9).strftime("%Y-%m-%d %H:%M:%S")
                if type(s["wall_ns"]) is int else "?")
        by = f" by rank {s['by_rank']}" if type(s["by_rank"]) is int else ""
        out.write(f"  {when}  {s['reason']}{by}  {s['path']}\n")


def _span(ranks: list[int]) -> str:
    """0-7 for a contiguous set, else the list (shortened)."""
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    text = ",".join(map(str, ranks[:16]))
    return text + (",…" if len(ranks) > 16 else "")
