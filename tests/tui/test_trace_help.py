"""The TRACE argument has one help text (tracer/commands/trace_help.py), which names every kind of input."""

from __future__ import annotations

import importlib

import pytest

from disttrace.tracer.cli import SUBCOMMANDS, build_parser
from disttrace.tracer.commands.trace_help import TRACE_HELP


def trace_help_of(command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "subcommand").choices[command]
    importlib.import_module(SUBCOMMANDS[command][0]).add_arguments(sub)
    return next(a.help for a in sub._actions if a.metavar == "TRACE")


@pytest.mark.parametrize("command", ["view", "events", "export"])
def test_the_commands_that_read_a_trace_share_its_help(command):
    assert trace_help_of(command) == TRACE_HELP


def test_the_help_names_every_kind_of_input(capsys):
    from disttrace.tracer.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["view", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for kind in ("trace dir written by `disttrace run`", "normalized events .jsonl file", "PyTorch profiler traces",
                 "*.pt.trace.json[.gz]", "Flight Recorder dumps"):
        assert kind in text, (kind, text)
