"""`disttrace view TRACE...`: open traces in the terminal viewer."""

from __future__ import annotations

import argparse

from disttrace.tracer.commands.run_choice import add_run_argument
from disttrace.tracer.commands.sides import SIDE_HELP
from disttrace.tracer.commands.trace_help import TRACE_HELP


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traces", nargs="+", metavar="TRACE", help=TRACE_HELP)
    parser.add_argument("--step", action="store_true",
                        help="start in step-through mode at the first event (n/N step, space plays)")
    add_run_argument(parser, all_too=False)  # R in the viewer goes to the next run
    parser.add_argument("--follow", action="store_true",
                        help="keep reading a trace that is still being written: new events appear as the job runs; "
                             "F moves the playhead to the newest event and keeps it there")
    parser.add_argument("--baseline", metavar="A",
                        help="compare the trace with run A, as `disttrace diff A TRACE` does: the steps and ops that "
                             "moved beyond the noise are listed in the Diff tab (9) with the explanations, and the "
                             "detail pane shows A's figures beside the trace's. A: " + SIDE_HELP)


def main(args: argparse.Namespace) -> int:
    import gc

    if args.baseline is None:
        # the viewer's imports and first screen make some million objects and no garbage: the collector walking
        # them again and again was a share of the start's CPU time (docs/PERFORMANCE.md). On again once the viewer
        # is on screen, or once a load has taken 0.5 s (app.DisttraceApp._show, _show_loading)
        gc.disable()
    from .loading import StoredAhead

    # a stored trace's store is opened beside the viewer's imports (loading.StoredAhead); not a followed one (it
    # is read live, never through its store)
    ahead = StoredAhead(list(args.traces), args.run) if not args.follow and StoredAhead.worth(args.traces) else None
    from .app import open_viewer

    if args.baseline is not None:
        _compare(args)
    return open_viewer(list(args.traces), step_mode=args.step, follow=args.follow, run=args.run, ahead=ahead)


def _compare(args: argparse.Namespace) -> None:
    """The comparison with the baseline, made before the viewer starts (bad input: one line, exit 2), for the diff
    view and the detail pane (widgets/diff.py)."""
    import sys

    from disttrace.tracer.analysis import analysed, compare
    from disttrace.tracer.commands.sides import SideSpec, load_side, parse_side
    from disttrace.tracer.errors import TraceError

    from .model.baseline import set_baseline

    if args.follow:
        raise TraceError("--baseline compares a finished run: leave out --follow")
    a = parse_side(args.baseline)
    b = SideSpec(list(args.traces), args.run, " ".join(args.traces))
    if sys.stderr.isatty():
        sys.stderr.write(f"disttrace view: comparing with the baseline {a}…\n")
    set_baseline(compare(analysed(load_side(a), str(a)), analysed(load_side(b), str(b))))
