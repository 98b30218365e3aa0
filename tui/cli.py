"""`disttrace view TRACE...`: open traces in the terminal viewer."""

from __future__ import annotations

import argparse

from disttrace.tracer.commands.run_choice import add_run_argument
from disttrace.tracer.commands.trace_help import TRACE_HELP


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traces", nargs="+", metavar="TRACE", help=TRACE_HELP)
    parser.add_argument("--step", action="store_true",
                        help="start in step-through mode at the first event (n/N step, space plays)")
    add_run_argument(parser, all_too=False)  # R in the viewer goes to the next run
    parser.add_argument("--follow", action="store_true",
                        help="keep reading a trace that is still being written: new events appear as the job runs; "
                             "F moves the playhead to the newest event and keeps it there")


def main(args: argparse.Namespace) -> int:
    from .app import open_viewer

    return open_viewer(list(args.traces), step_mode=args.step, follow=args.follow, run=args.run)
