"""`disttrace events TRACE...`: the merged, aligned events as JSON Lines on stdout, sorted by start time."""

from __future__ import annotations

import sys

from ..data.events import iter_jsonl
from ..data.reader import load_trace


def add_arguments(p) -> None:
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace dirs (one per node) or a normalized events file")


def main(args) -> int:
    table = load_trace(args.traces)
    for w in table.warnings:
        sys.stderr.write(f"disttrace: warning: {w}\n")
    out = sys.stdout.buffer
    for line in iter_jsonl(table):
        out.write(line)
    out.flush()
    return 0
