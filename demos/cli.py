"""`disttrace demo [NAME]`: run a teaching demo under the tracer and step through it in the viewer."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from disttrace.tracer.errors import TraceError

from .registry import DEMOS, START_HERE


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = "disttrace demo [NAME] [--nproc N] [--backend gloo|nccl] [--size N] [--out DIR] [--no-view] [--program-args='...']"
    p.description = ("Run a small torch.distributed program on several processes (gloo on the CPU by default), "
                     "record it, and open it in the viewer one operation at a time, with a narration of what "
                     "each operation did to the real recorded tensors. With no NAME: the list of demos.")
    p.add_argument("name", nargs="?", metavar="NAME", help="the demo to run (see --list)")
    p.add_argument("--list", action="store_true", help="list the demos, one line each")
    p.add_argument("--nproc", type=int, metavar="N", help="number of ranks (default: the demo's)")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                   help="gloo (CPU, default) or nccl (one GPU per rank)")
    p.add_argument("--size", type=int, metavar="N", help="problem size, for the demos where a size matters")
    p.add_argument("--out", metavar="DIR", help="trace directory (default: a new temporary directory)")
    p.add_argument("--no-view", action="store_true", help="run and keep the trace, do not open the viewer")
    p.add_argument("--program-args", default="", metavar="'OPTIONS'",
                   help="options for the demo program itself, in one quoted string, e.g. "
                        "--program-args='--delay-ms 500' (see the program's source for its options)")


def listing() -> str:
    lines, section = [], None
    width = max(len(n) for n in DEMOS)
    for demo in DEMOS.values():
        if demo.section != section:
            section = demo.section
            lines.append(f"\n{section}:")
        lines.append(f"  {demo.name:{width}s}  {demo.summary}")
    return "\n".join(lines).lstrip("\n")


def guide() -> str:
    return (
        "disttrace demo: small torch.distributed programs, recorded and explained step by step.\n\n"
        f"{listing()}\n\n"
        f"Start with:  disttrace demo {START_HERE}\n"
        "Then:        disttrace demo reduce-scatter, disttrace demo ring-allreduce, disttrace demo data-parallel\n"
        "In the viewer, step through the operations one by one; the narration says what each did.\n"
        "Options: --nproc N, --backend nccl, --size N, --out DIR, --no-view (see disttrace demo --help).\n"
        "The programs are in " + str(Path(__file__).resolve().parent / "programs") + ": read them, change them.\n"
    )


def main(args) -> int:
    if args.list:
        print(listing())
        return 0
    if not args.name:
        print(guide())
        return 0
    demo = DEMOS.get(args.name)
    if demo is None:
        close = [n for n in DEMOS if args.name.replace("_", "-") in n or n in args.name]
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise TraceError(f"no demo named {args.name!r}{hint}; disttrace demo --list shows them")
    nproc = args.nproc if args.nproc is not None else demo.nproc
    if not demo.nproc_ok(nproc):
        raise TraceError(f"the {demo.name} demo runs on {demo.nproc_rule} ranks, not {nproc}")
    if args.size is not None:
        if demo.size_help is None:
            raise TraceError(f"--size does not apply to the {demo.name} demo")
        if args.size <= 0:
            raise TraceError("--size must be a positive number")
        if demo.size_per_rank and args.size % nproc:
            raise TraceError(f"--size {args.size} must be a multiple of the number of ranks ({nproc}) for the "
                             f"{demo.name} demo")
    extra = shlex.split(args.program_args or "")

    from disttrace.tui.terminal import no_terminal

    from .progress import say
    from .runner import run_demo

    # without a terminal (a pipe, a script, CI) the demo does what --no-view does, and says why: its job and trace
    # are what it can still give, so it exits 0
    no_viewer = None if args.no_view else no_terminal()
    run = run_demo(demo, nproc, args.backend, Path(args.out) if args.out else None, args.size, extra)
    if args.no_view or no_viewer:
        say(f"disttrace demo {demo.name}: trace and narration in {run.out}\n"
            f"  step through it with: disttrace view {run.out}")
        if no_viewer:
            sys.stderr.write(f"disttrace demo: the viewer was not opened: {no_viewer.replace('the viewer', 'it', 1)}\n")
        return 0
    from disttrace.tui.app import open_viewer

    say(f"disttrace demo {demo.name}: opening the viewer (n: next event, ?: keys, q: quit)")
    return open_viewer([str(run.out)], step_mode=True)
