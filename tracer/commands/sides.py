"""One side of a comparison (`disttrace diff A B`, `disttrace view B --baseline A`) in one argument: the one home of
its spelling.

    PATH                 a trace: a trace dir, an events file, profiler traces, Flight Recorder dumps
    PATH@N               run N of it (`disttrace runs PATH` lists them): two runs of one dir are DIR@1 DIR@2
    PATH1,PATH2[,...]    several nodes' trace dirs, merged as one trace (as `report PATH1 PATH2` reads them)
    PATH1,PATH2@N        run N of those

A path that exists is taken as it is, whatever it holds ("trace@2" names a dir of that name when there is one)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import TraceError

SIDE_HELP = ("a trace as `report` takes it (a trace dir, an events file, profiler traces, Flight Recorder dumps); "
             "DIR@N: run N of it (two runs of one dir: DIR@1 DIR@2); DIR1,DIR2: several nodes' dirs as one trace "
             "(DIR1,DIR2@N: their run N)")

_RUN = re.compile(r"^(.*)@([1-9][0-9]*)$")


@dataclass(frozen=True)
class SideSpec:
    paths: list[str]
    run: int | None   # None: the reader's default (the only run, else the last)
    text: str         # as the user wrote it

    def __str__(self) -> str:
        return self.text


def parse_side(text: str) -> SideSpec:
    """The paths and run that one argument names (TraceError: one line, exit 2, when it names nothing)."""
    if not text.strip():
        raise TraceError("an empty trace argument")
    if os.path.exists(text):
        return SideSpec([text], None, text)
    run = None
    rest = text
    m = _RUN.match(text)
    if m:
        rest, run = m.group(1), int(m.group(2))
    paths = [p for p in rest.split(",")] if not os.path.exists(rest) else [rest]
    if any(not p for p in paths):
        raise TraceError(f"{text}: an empty path between commas (several nodes' dirs: DIR1,DIR2)")
    for p in paths:
        if not os.path.exists(p):
            raise TraceError(f"{p}: no such file or directory" + (f" (in {text!r})" if p != text else ""))
    return SideSpec(paths, run, text)


def load_side(spec: SideSpec, progress=None):
    """The side's EventTable, as every command reads a trace (data/load.py)."""
    from ..data.load import load_trace

    return load_trace(spec.paths, progress, run=spec.run)


__all__ = ["SIDE_HELP", "SideSpec", "parse_side", "load_side"]
