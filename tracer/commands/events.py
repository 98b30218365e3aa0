"""`disttrace events TRACE... [--run N|all]`: the merged, aligned events as JSON Lines on stdout, sorted by start
time; with `--run all`, each run's events after the previous run's (each event says its `run`)."""

from __future__ import annotations

import sys

from ..data.load import iter_jsonl
from ..data.load import load_trace
from .run_choice import add_run_argument, chosen_runs
from .trace_help import TRACE_HELP


def add_arguments(p) -> None:
    p.add_argument("traces", nargs="+", metavar="TRACE", help=TRACE_HELP)
    add_run_argument(p)


def main(args) -> int:
    out = sys.stdout.buffer
    for run in chosen_runs(args.run, args.traces):
        table = load_trace(args.traces, run=run)
        for w in table.warnings:
            sys.stderr.write(f"disttrace: warning: {w}\n")
        for line in iter_jsonl(table):
            out.write(line)
    out.flush()
    return 0
