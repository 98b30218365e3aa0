"""`--run N|all`, for the commands that read a trace (report, events, export, view): which runs to read."""

from __future__ import annotations

import argparse
import os

from ..data.load import find_rank_files, find_runs
from ..errors import TraceError


def _run_number(value: str) -> int:
    if value.isdigit() and int(value) > 0:
        return int(value)
    raise argparse.ArgumentTypeError(f"expected a run number (1, 2, ...), got {value!r}")


def _run(value: str):
    if value == "all":
        return value
    try:
        return _run_number(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a run number (1, 2, ...) or 'all', got {value!r}") from None


def add_run_argument(p, all_too: bool = True) -> None:
    p.add_argument("--run", type=_run if all_too else _run_number, metavar="N|all" if all_too else "N",
                   help="which run of the trace (see `disttrace runs`): its number"
                        + (", or all of them, one after another" if all_too else "")
                        + " (default: the only one, else the last)")


def chosen_runs(run, traces: list[str]) -> list[int | None]:
    """The run numbers to read, one after another: [None] for the default (the reader picks and says so)."""
    if run != "all":
        return [run]
    files = [f for p in traces if os.path.isdir(p) for f in find_rank_files(p)]
    runs, _ = find_runs(files)
    if not runs:
        raise TraceError("--run all: runs are in trace dirs; this holds none")
    return [r.number for r in runs]
