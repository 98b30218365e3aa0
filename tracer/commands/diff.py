"""`disttrace diff A B`: what changed from run A (the baseline) to run B, and why B's step is as long as it is.

Exit code (for CI): 0 when B's step is not slower than A's beyond the noise (its mean, median or p90 moved up
beyond its own noise, and its mean is longer: diff.Diff.slower), or with --fail-above N when its mean is not longer
by more than N% of A's, 1 when it is, 2 for bad input (cli.py turns a TraceError into one line). A difference in structure
alone (an op added, a group changed) says `changed` and exits 0; problems in either trace are `report`'s business,
noted only. docs/FORMAT.md describes the --json ("The diff's JSON").
"""

from __future__ import annotations

import argparse
import sys

import orjson

from ..analysis.diff.compare import Diff, compare, headline, signed, to_json, verdict
from ..analysis.diff.sides import analysed
from ..units import fmt_ns
from ..errors import TraceError
from .report import make_console, progress_bar, rich_table
from .sides import SIDE_HELP, load_side, parse_side


def _percent(text: str) -> float:
    try:
        v = float(text.strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage (5 or 5%), got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a percentage of at least 0, got {text!r}")
    return v


def add_arguments(p) -> None:
    p.add_argument("a", metavar="A", help="the baseline: " + SIDE_HELP)
    p.add_argument("b", metavar="B", help="the run compared with it, spelt as A")
    p.add_argument("--json", action="store_true", help="print the diff as one JSON object (for scripts and CI)")
    p.add_argument("--fail-above", type=_percent, default=None, metavar="N%", dest="fail_above",
                   help="exit 1 only when B's step is slower than A's beyond the noise and its mean by more than "
                        "N%% of A's (default: beyond the noise)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows per table (default 10)")


def main(args) -> int:
    if args.top < 1:
        raise TraceError("--top must be at least 1")
    sides = [parse_side(args.a), parse_side(args.b)]  # (both spelt right before either is read)
    with progress_bar() as progress:
        runs = []
        for k, spec in enumerate(sides):
            step = (lambda f, label, k=k: progress((k + f * 0.5) / 2, f"{'AB'[k]}: loading {label}")) if progress \
                else None
            table = load_side(spec, step)
            if progress:
                progress((k + 0.5) / 2, f"{'AB'[k]}: analysing")
            runs.append(analysed(table, str(spec)))
        d = compare(*runs)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(to_json(d), option=orjson.OPT_APPEND_NEWLINE))
    else:
        render(d, args.top, args.fail_above)
    return exit_code(d, args.fail_above)


def exit_code(d: Diff, fail_above: float | None) -> int:
    """1 when B's step is slower than A's beyond the noise (Diff.slower) and, when fail_above is given, its mean by
    more than fail_above percent of A's mean (what the user pays), else 0."""
    if not d.slower:
        return 0
    if fail_above is not None and d.mean_delta_ns <= fail_above / 100 * d.a.mean_ns:
        return 0
    return 1


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _left(table, n: int):
    """The table with its first n columns (words) left-justified."""
    for col in table.columns[:n]:
        col.justify = "left"
    return table


def render(d: Diff, top: int = 10, fail_above: float | None = None, console=None) -> None:
    from rich.markup import escape
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    console = console or make_console()
    a, b = d.a, d.b
    console.print(f"[bold]disttrace diff[/]: {_count(len(d.matched), 'step')} compared by index")
    for name, label, s in (("A", d.a_label, a), ("B", d.b_label, b)):  # (a path on a line of its own: it wraps alone)
        console.print(f"  {name} = {escape(label)} ({_count(s.step_count, 'steady step')})", soft_wrap=True)
    for n in d.notes:
        console.print(f"[yellow]note:[/] {escape(n)}")
    style = "bold red" if d.slower else "bold green" if d.faster else "bold"
    console.print(Text(verdict(d), style=style))
    for name, s in (("A", a), ("B", b)):
        console.print(f"  {name}: median {fmt_ns(s.median_ns)}, p90 {fmt_ns(s.p90_ns)}, mean {fmt_ns(s.mean_ns)}, "
                      f"spread {fmt_ns(s.spread_ns)}")
    if d.structure:
        console.print(f"[bold]Structure[/] ({len(d.structure)} difference{'s' if len(d.structure) > 1 else ''}):")
        rows = Table.grid(padding=(0, 1))  # (a detail that wraps goes on under its own start, not the kind's)
        rows.add_column(no_wrap=True)
        rows.add_column(overflow="fold")
        for c in d.structure[:top]:
            rows.add_row(c.kind, c.detail)
        console.print(Padding(rows, (0, 0, 0, 2)))
        if len(d.structure) > top:
            console.print(f"  … and {len(d.structure) - top} more (--top N, or --json for all)")
    else:
        console.print("[bold]Structure[/]: the same ops, sizes, groups and order in every step compared.")
    if d.matched:
        console.print(Text.assemble(("Why", "bold"), " (B's steps replayed with one thing set to A's, cumulatively): ",
                                    headline(d)))
        if d.explanations:
            table = _left(rich_table("", "explanation", "a step", "noise"), 1)
            for e in d.explanations[:top]:
                table.add_row(escape(e.what), signed(e.delta_ns), f"±{fmt_ns(e.noise_ns)}" if e.noise_ns else "-")
            table.add_row("unexplained", signed(d.unexplained_ns), "")
            console.print(table)
    changed = [r for r in d.timing if r.changed]
    if changed:
        table = _left(rich_table("Time a step that changed beyond its noise (medians, or the mean or p90 where only it "
                             "moved)", "what", "name", "A", "B", "B - A", "noise"), 2)
        for r in sorted(changed, key=lambda r: -abs(r.shown.delta_ns))[:top]:
            # (a rank's compute and wait are named "rank R"; a span says its rank: 80 columns hold no rank column)
            name = f"rank {r.rank}'s {r.name}" if r.what == "span" and r.rank is not None else r.name
            x = r.shown
            stat = "" if x.stat == "median" else f" ({x.stat})"
            table.add_row(r.what, escape(name) + stat, fmt_ns(x.a_ns), fmt_ns(x.b_ns), signed(x.delta_ns),
                          f"±{fmt_ns(x.noise_ns)}")
        console.print(table)
    else:
        console.print("Time a step by op kind, group, rank and span: nothing changed beyond its noise.")
    code = exit_code(d, fail_above)
    if d.slower and not code:
        console.print(f"B is slower, but by no more than --fail-above {fail_above:g}%: exit 0.")
