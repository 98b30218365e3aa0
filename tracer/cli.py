"""The `disttrace` command: a thin dispatcher to the subcommands' own modules.

Each subcommand lives in a module with `add_arguments(parser)` and `main(args) -> int`; it is imported only
when chosen, so `disttrace view` never pays for importing torch and `disttrace run` never for textual.
Bad input anywhere ends as one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .errors import TraceError

# name -> (module, one-line help)
SUBCOMMANDS = {
    "run": ("disttrace.tracer.commands.run", "trace a job: disttrace run [options] torchrun ... | python script.py ..."),
    "view": ("disttrace.tui.cli", "open a trace in the terminal viewer"),
    "report": ("disttrace.tracer.commands.report", "analyse a trace: waits, stragglers, bandwidth, bubbles, problems"),
    "runs": ("disttrace.tracer.commands.runs", "list the runs a trace holds (restarts, successive jobs)"),
    "diff": ("disttrace.tracer.commands.diff", "compare two runs: what changed, and why B's step is longer or shorter"),
    "snapshot": ("disttrace.tracer.commands.snapshot", "ask a running black-box job for a snapshot of every rank"),
    "events": ("disttrace.tracer.commands.events", "print the merged, aligned events as JSON Lines"),
    "export": ("disttrace.tracer.commands.export", "export a trace for Perfetto / chrome://tracing"),
    "demo": ("disttrace.demos.cli", "run a teaching demo and open it in the viewer"),
}


class _Parser(argparse.ArgumentParser):
    """argparse that exits with code 2 and one line, without the usage dump."""

    def error(self, message: str):  # noqa: D401
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="disttrace", description="A visual debugger and trace viewer for distributed PyTorch jobs.")
    parser.add_argument("--version", action="version", version=f"disttrace {_version()}")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        p._disttrace_module = module  # type: ignore[attr-defined]
    return parser


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("disttrace")
    except Exception:  # noqa: BLE001
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    # disttrace keeps its modules' bytecode even where PYTHONDONTWRITEBYTECODE is set (tests/conftest.py does the
    # same): an editable install (the README's) has none, and every command would compile the package's sources
    # again, a large share of a re-open's time (docs/PERFORMANCE.md)
    sys.dont_write_bytecode = False
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    # Only the chosen subcommand's module is imported: find it before parsing.
    chosen = next((a for a in argv if not a.startswith("-")), None)
    subparser = None
    if chosen in SUBCOMMANDS:
        sub_action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        subparser = sub_action.choices[chosen]
        importlib.import_module(SUBCOMMANDS[chosen][0]).add_arguments(subparser)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the subcommand's parser, so that the message names it
        (subparser or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2 if argv else 0
    module = importlib.import_module(args._module)
    try:
        rc = int(module.main(args) or 0)
        sys.stdout.flush()  # here, not at exit: a reader that went away must not read as the command's answer
        return rc
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `disttrace report T | head -1`: the reader closed the pipe. Exit as a process killed by SIGPIPE would
        # (128 + 13, what the shell shows for `yes | head -1`), not with a code that means "problems found"
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's last flush fails too
        return 141
    except TraceError as e:
        sys.stderr.write(f"disttrace {args.subcommand}: error: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
