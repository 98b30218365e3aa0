"""`disttrace report TRACE...`: the analysis as a person-readable terminal report, or --json for scripts and CI.

Exit code 0 when no problems were found, 1 when there are problems (a mismatch, a rank that died, a hang, an op
that ended in an error, non-finite values, divergence, unmatched P2P, clock violations), 2 for bad input (cli.py
turns a TraceError into one line on stderr). Damage in the input (skipped records, a torn file) is said first,
right under the title line; `--json` lists it in `summary.warnings` (docs/FORMAT.md describes the JSON).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import defaultdict
from statistics import median

import orjson

from ..analysis import analyze, memory_report, to_json, whole_run, widened
from ..analysis.text.sentences import (attribution_lines, micro_batches, run_straggler_sentence, startup_sentence,
                                  straggler_verdict, what_if_sentence)
from ..analysis.core.results import NULL, Analysis
from ..analysis.comms.alpha_beta import typical_spread
from ..analysis.causal.what_if import ChangeSpec, parse_change
from ..units import fmt_bytes, fmt_gbps, fmt_list, fmt_ns, fmt_ranks, gbps_unit, in_unit, ns_unit
from ..data.table.columns import typecode
from ..errors import TraceError
from ..data.load import load_trace, trace_size
from ..data.load import read_aggregates, read_memory, run_info, snapshots_note
from .run_choice import add_run_argument, chosen_runs
from .trace_help import TRACE_HELP

PROBLEM_STYLE = {"hang": "bold red", "mismatch": "bold red", "died": "bold red", "error": "red",
                 "divergence": "bold magenta", "nonfinite": "bold magenta", "unmatched": "yellow", "clock": "yellow", "leak": "bold red"}


def _change(spec: str) -> ChangeSpec:
    try:
        return parse_change(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix(f"--what-if {spec!r}: ")) from None


def add_arguments(p) -> None:
    p.add_argument("trace", nargs="+", metavar="TRACE", help=TRACE_HELP)
    p.add_argument("--json", action="store_true", help="print the analysis as one JSON object (for scripts and CI)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows per table (default 10)")
    p.add_argument("--what-if", action="append", type=_change, default=[], metavar="CHANGE", dest="what_if",
                   help="re-time the steps with a change and say the step time it predicts, first (repeatable): "
                        "rank:R (rank R at its peers' pace: its compute as the ranks doing the same work do it), "
                        "ranks (every rank so), stage:S (every rank of pipeline stage S at the typical other "
                        "stage's pace), op:KIND (every all_reduce, send/recv, ... at its typical time), ideal "
                        "(everything typical), span:FILE.py:LINE=N%% (the compute before ops at that line N%% "
                        "faster; or span:'A.py:1 → B.py:2'=N%%), bandwidth=Kx or bandwidth:OP=Kx. Default: the "
                        "straggler or the slow stage on pace, the span most on the critical path 50%% faster, 2x "
                        "bandwidth, the ideal step")
    add_run_argument(p)
    p.add_argument("--follow", action="store_true",
                   help="keep reading a trace that is still being written: a fresh report every --interval "
                        "seconds until the job ends (its run.json appears) or Ctrl-C")
    p.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds between reports with --follow")


def main(args) -> int:
    if args.top < 1:
        raise TraceError("--top must be at least 1")
    if args.follow:
        if args.run == "all":
            raise TraceError("--follow reads one run: the one being written (leave out --run)")
        return follow(args)
    runs = chosen_runs(args.run, args.trace)
    found = False
    for k, run in enumerate(runs):
        with progress_bar() as progress:
            table = load_trace(args.trace, progress and (lambda f, label: progress(f * 0.5, f"loading: {label}")),
                               run=run)
            a = analyze(table, progress and (lambda f, label: progress(0.5 + f * 0.5, f"analyzing: {label}")),
                        args.what_if)
        whole, memory = read_beside(args.trace, a, run)
        found = found or bool(a.problems)
        if args.json:
            sys.stdout.buffer.write(orjson.dumps(to_json(a, whole, memory), option=orjson.OPT_APPEND_NEWLINE))
            sys.stdout.flush()
        else:
            console = make_console()
            if len(runs) > 1:
                console.rule(f"run {run} of {len(runs)}")
            render(a, args.top, console, asked=bool(args.what_if), whole=whole, memory=memory)
    return 1 if found else 0


def read_beside(paths: list[str], a: Analysis, run: int | None):
    """What is read beside the analysis, now, as it grows while the job runs (--follow too): (a black-box trace's
    whole run over its aggregates, a --memory trace's memory; each None where the trace has none). A black box's
    snapshots' note joins the analysis' notes, the memory's leaks its problems."""
    snapshots = snapshots_note(paths)
    if snapshots and snapshots not in a.notes:
        a.notes.append(snapshots)
    memory = memory_report(read_memory(a.table), a)
    if memory is not None:
        a.problems.extend(p for p in memory.problems if p not in a.problems)
    return run_of(paths, a.table.run or run), memory


def run_of(paths: list[str], run: int | None):
    """The whole run over the black box's aggregates of these trace dirs (None: they hold none)."""
    agg = read_aggregates(paths, run)
    return None if agg is None else whole_run(agg)


def make_console(**kwargs):
    """rich's Console, but a reader that closed the pipe ends the command as a closed pipe (cli.py: exit 141):
    rich's own handling exits with 1, this command's code for "problems found"."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    if "width" not in kwargs and not (sys.stdout.isatty() or os.environ.get("COLUMNS")):
        kwargs["width"] = 120  # piped or captured output: a width that fits the tables (rich's default is 80)
    return PipeConsole(**kwargs)


def follow(args) -> int:
    """Report on a live trace again and again: in a terminal the screen is redrawn, otherwise each new report
    (or JSON line) is printed when the trace has grown. Ends when every trace dir holds the launcher's run.json."""
    if args.interval <= 0:
        raise TraceError("--interval must be a positive number of seconds")
    tty = sys.stdout.isatty()
    console = make_console() if tty else make_console(width=120)
    last_size, rc, waiting_said = None, 0, False
    try:
        while True:
            ended = all(not os.path.isdir(p) or run_info(p) is not None for p in args.trace)
            size = trace_size(args.trace)
            if size != last_size or ended:
                try:
                    a = analyze(load_trace(args.trace, run=args.run, cache=False), changes=args.what_if)  # live: no store
                except TraceError as e:
                    if ended or not ("no events" in str(e) or "no rank-" in str(e) or "no readable" in str(e)):
                        raise
                    if not waiting_said:
                        sys.stderr.write(f"disttrace report: waiting for the job to write its trace ({e})\n")
                        waiting_said = True
                else:
                    whole, memory = read_beside(args.trace, a, args.run)
                    last_size, rc = size, (1 if a.problems else 0)
                    if args.json:
                        sys.stdout.buffer.write(orjson.dumps(to_json(a, whole, memory),
                                                             option=orjson.OPT_APPEND_NEWLINE))
                        sys.stdout.flush()
                    else:
                        if tty:
                            console.clear()
                        state = "the job has ended" if ended else "following; Ctrl-C to stop"
                        console.rule(f"disttrace report — {time.strftime('%H:%M:%S')} — {state}")
                        render(a, args.top, console, whole=whole, memory=memory)
            if ended:
                return rc
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return rc


class progress_bar:
    """A rich progress bar on stderr, only when stderr is a terminal; yields callable(fraction, label) or None."""

    def __enter__(self):
        self.bar = None
        if not sys.stderr.isatty():
            return None
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description:<28}"), BarColumn(), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
        self.bar.start()
        task = self.bar.add_task("loading", total=1.0)
        return lambda f, label: self.bar.update(task, completed=min(1.0, f), description=label)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


# -- the person-readable report -----------------------------------------------------------------------------

def render(a: Analysis, top: int = 10, console=None, asked: bool = False, whole=None, memory=None) -> None:
    """The report; `asked`: the what-ifs are the user's (--what-if), answered first, before the report; `whole`:
    the whole run over the black box's aggregates (its own section, when the trace has them); `memory`: the memory
    analysis of a trace recorded with --memory (report_memory.py's section)."""
    from rich.markup import escape
    from rich.text import Text

    if console is None:
        console = make_console()
    if asked:
        for w in a.what_if:
            console.print(Text(what_if_sentence(w, "step" if a.steps else "run"), style="bold"))
        console.print()
    t = a.table
    span = a.span_ns[1] - a.span_ns[0]
    hosts = sorted({info.host for info in t.ranks.values() if info.host})
    console.print(f"[bold]disttrace report[/]: {len(t):,} events, {len(t.ranks)} ranks"
                  f"{f' on {len(hosts)} host(s)' if hosts else ''}, {len(t.groups)} group(s), {fmt_ns(span)}; "
                  f"{len(a.collectives):,} collectives, {len(a.p2p):,} P2P messages",
                  soft_wrap=True)  # one line, however narrow: the damage is the next line
    # what the input lost comes first: every finding below must be read knowing it
    damaged = t.damage_line()
    if damaged:
        console.print(Text(damaged, style="bold yellow"))
    for w in t.warnings:
        console.print(f"[bold yellow]warning:[/] {escape(w)}")
    for w in a.notes:
        console.print(f"[yellow]note:[/] {escape(w)}")
    _problems(console, a, top)
    _steps(console, a, top)
    _waits(console, a, top, span)
    _critical_path(console, a, top, asked)
    _collectives(console, a, top)
    _links(console, a, top)
    _pipeline(console, a)
    _models(console, a)
    if whole is not None:
        _whole_run(console, whole, top)
    if memory is not None:
        from .report_memory import render as render_memory

        render_memory(console, memory, top, rich_table)
    if a.problems:
        console.print(f"[bold red]{len(a.problems)} problem(s) found.[/]")
    else:
        console.print("[green]No problems found.[/]")


_WORD_MAX = 24  # a column is never made narrower than its longest word, up to this (then words fold)


def rich_table(title: str, *columns: str):
    from rich.table import Table

    class WholeWords(Table):
        """A table whose columns wrap between words, not inside them, when the terminal is narrow (at 80 columns
        rich made `all_r|educe` and `volum|e/ran|k` of them): each column at least as wide as its longest word."""

        def __rich_console__(self, console, options):
            for col in self.columns:
                words = [w for cell in [col.header, *col._cells] for w in str(getattr(cell, "plain", cell)).split()]
                col.min_width = min(_WORD_MAX, max((len(w) for w in words), default=1))
            return super().__rich_console__(console, options)

    table = WholeWords(title=title, title_justify="left", title_style="bold")
    for c in columns:
        table.add_column(c, justify="left" if c in ("kind", "where", "message", "op", "group", "site") else "right",
                         overflow="fold")
    return table


def _group(a: Analysis, gid: int) -> str:
    return a.table.groups[gid].name


def _problems(console, a: Analysis, top: int) -> None:
    from rich.markup import escape

    if not a.problems:
        return
    table = rich_table(f"Problems ({len(a.problems)})", "kind", "where", "ranks", "message")
    for p in a.problems[:top]:
        where = p.op or ""
        if p.group_seq is not None:
            where += f" #{p.group_seq}"
        if p.group_ranks:
            where += f" {list(p.group_ranks)}"
        if p.step is not None:
            where += f", step {p.step}"
        table.add_row(f"[{PROBLEM_STYLE.get(p.kind, 'red')}]{p.kind}[/]", where, ",".join(map(str, p.ranks)),
                      escape(p.message))  # error texts and paths hold brackets that are not markup
    console.print(table)
    if len(a.problems) > top:
        console.print(f"… and {len(a.problems) - top} more (--top N, or --json for all)")


def _waits(console, a: Analysis, top: int, span: int) -> None:
    if not a.waits:
        return
    cost = {s.rank: s for s in a.stragglers}
    table = rich_table("Waits per rank (time spent inside ops waiting for late peers) and the waiting each rank caused",
                   "rank", "waited", "% of trace", "caused others (whole run)", "arrived last")
    ranks = sorted(a.waits, key=lambda r: -a.waits[r])
    shown = sorted(set(ranks[:top]) | {s.rank for s in a.stragglers[:3]})
    for r in shown:
        s = cost.get(r)
        table.add_row(str(r), fmt_ns(a.waits[r]), f"{100 * a.waits[r] / span:.1f}%" if span else "-",
                      fmt_ns(s.delay_cost_ns) if s else "-", str(s.late_count) if s else "-")
    console.print(table)
    from rich.text import Text

    label, rest = straggler_verdict(a)
    console.print(Text.assemble((label, "bold"), rest))
    for line in attribution_lines(a, "step" if a.steps else "run"):
        console.print(line)
    if len(a.waits) > 1 and any(a.waits.values()):
        by_rank = sorted(a.waits)[:64]
        unit, _ = ns_unit(max(a.waits.values()))
        _chart(console, f"waits per rank ({unit})", "bar", [str(r) for r in by_rank],
               [in_unit(a.waits[r], unit) for r in by_rank])


def _steps(console, a: Analysis, top: int) -> None:
    steps = a.steps
    if not steps:
        return
    durations = sorted(s.end_ns - s.start_ns for s in steps if not s.warmup) or [0]
    warm = [s.index for s in steps if s.warmup and not s.outside]
    how = "marked by the job" if a.steps_source == "marker" else "found as the repeating sequence of ops"
    before = sum(s.outside for s in steps)  # (a black-box window's: the steps before it are the job's, not its)
    held = f"{len(steps) - before} in the window, {before}–{len(steps) - 1}" if before else f"{len(steps)}"
    console.print(f"[bold]Steps[/]: {held} ({how}); median {fmt_ns(median(durations))}, slowest "
                  f"{fmt_ns(durations[-1])}" + (f"; warm-up: step{'s' if len(warm) > 1 else ''} {fmt_list(warm)}"
                                                 if warm else ""))
    slow = sorted((s for s in steps if not s.outside), key=lambda s: -(s.end_ns - s.start_ns))[:top]
    table = rich_table("Slowest steps, and who the others waited for in them", "step", "time", "late rank",
                   "it made the others wait", "waits (per rank)")
    for s in sorted(slow, key=lambda s: s.index):
        late = s.late_rank
        table.add_row(str(s.index) + (" (warm-up)" if s.warmup else ""), fmt_ns(s.end_ns - s.start_ns),
                      "-" if late is None else str(late), "-" if late is None else fmt_ns(s.caused_ns.get(late, 0)),
                      ", ".join(f"{r}: {fmt_ns(w)}" for r, w in sorted(s.wait_ns.items(), key=lambda x: -x[1])[:4]
                                if w) or "-")
    console.print(table)


def _critical_path(console, a: Analysis, top: int, asked: bool) -> None:
    """The critical paths summed over the (steady) steps: what the step's time is made of, the waits' root causes,
    the communication hidden behind compute, and what the what-ifs would save."""
    if not a.critical_path:
        return
    warm = {s.index for s in a.steps if s.warmup}
    paths = [p for p in a.critical_path if p.index not in warm] or a.critical_path
    total = sum(p.length_ns for p in paths) or 1
    parts: dict[tuple, int] = {}
    for p in paths:
        for part in p.parts:
            # communication summed per op kind and group (the path names each op: "all_reduce world #13")
            key = (part.rank, part.kind, part.span or (part.op or "").split(" #")[0])
            parts[key] = parts.get(key, 0) + part.ns
    per = "step" if a.steps else "run"
    kinds = {k: sum(ns for (_, kind, _), ns in parts.items() if kind == k) for k in ("compute", "comm", "wait")}
    console.print(f"[bold]Critical path[/]: {fmt_ns(total // len(paths))} a {per}"
                  + (f" ({len(paths)} steady steps)" if a.steps else "") + ": "
                  + ", ".join(f"{100 * ns / total:.0f}% {k}" for k, ns in kinds.items() if ns) + ". Its parts:")
    table = rich_table("", "rank", "kind", "span or op", "time", "share")
    for (rank, kind, what), ns in sorted(parts.items(), key=lambda x: -x[1])[:top]:
        table.add_row(str(rank), kind, what, fmt_ns(ns), f"{100 * ns / total:.0f}%")
    console.print(table)
    steady = [c for c in a.causes if not c.startup]  # (each rank's start-up is said apart, below)
    if steady:
        table = rich_table("Root causes of the waiting" + (" in the steady steps" if a.steps else "")
                       + " (what ran on the path while ranks waited)", "rank", "kind", "span or op", "caused",
                       "ranks delayed")
        for c in steady[:top]:
            table.add_row(str(c.rank), c.kind, c.span, fmt_ns(c.caused_wait_ns), fmt_ranks(c.ranks_delayed))
        console.print(table)
    if startup := startup_sentence(a, top):
        console.print(startup, highlight=False)
    hidden = [o for o in a.overlap if o.comm_ns]
    if hidden:
        console.print("Communication hidden behind compute: " + ", ".join(
            f"rank {o.rank} {100 * o.overlapped_ns / o.comm_ns:.0f}% of {fmt_ns(o.comm_ns)}" for o in hidden[:top])
            + (f" (and {len(hidden) - top} more ranks)" if len(hidden) > top else "") + ".")
    for w in [] if asked else a.what_if:  # (the user's own are answered first)
        console.print(what_if_sentence(w, per))


def _collectives(console, a: Analysis, top: int) -> None:
    """The collectives' tables and chart, from the instances' columns (not a view of each of the ~10^5 collectives of a
    million events): the groups by op, group and size, the instances that made ranks
    wait most, those far slower than the model, and the bandwidth by size."""
    import numpy as np

    ct = a.collectives
    if not len(ct):
        return
    dur, model, busbw = ct.column("duration_ns"), ct.column("model_ns"), ct.column("busbw_gbps")
    table = rich_table("Collectives by op, group and size (volume: what each rank must move, ring algorithms)", "op",
                   "group", "size", "volume/rank", "count", "skew (median)", "time (median)", "busbw (median)",
                   "model", "slow")
    groups = ct.groups_by(("op", "gid", "bytes"))
    spent = [int(np.where(dur[g] != NULL, dur[g], 0).sum()) for g in groups]
    for i in sorted(range(len(groups)), key=lambda i: -spent[i])[:top]:  # (equal times: in order of appearance)
        g = groups[i]
        c = ct[int(g[0])]
        durs, bws, models = dur[g][dur[g] != NULL], busbw[g][~np.isnan(busbw[g])], model[g][~np.isnan(model[g])]
        table.add_row(c.op, _group(a, c.gid), fmt_bytes(c.bytes), fmt_bytes(c.volume_bytes), str(len(g)),
                      fmt_ns(median(ct.column("skew_ns")[g].tolist())),
                      fmt_ns(median(durs.tolist())) if len(durs) else "-",
                      fmt_gbps(median(bws.tolist())) if len(bws) else "-",
                      fmt_ns(median(models.tolist())) if len(models) else "-", str(int(ct.column("slow")[g].sum())))
    console.print(table)
    waited = [ct[k] for k in ct.most_waited(top)]
    if waited:
        table = rich_table("Collectives that made ranks wait most", "op", "group", "size", "skew", "last to arrive",
                       "total wait", "time", "busbw")
        for c in waited:
            table.add_row(f"{c.op} #{c.group_seq}", _group(a, c.gid), fmt_bytes(c.bytes), fmt_ns(c.skew_ns),
                          f"rank {c.last_arrival}", fmt_ns(sum(c.wait_ns.values())), fmt_ns(c.duration_ns),
                          fmt_gbps(c.busbw_gbps))
        console.print(table)
    slow = np.flatnonzero(ct.column("slow"))  # (a slow one has its time and its model's)
    if len(slow):
        key = ct.column("op").astype(np.int64) * (1 << 48) + ct.column("volume_bytes")
        typical = typical_spread(key, dur)
        # (where a key has too few samples both are +inf: no spread known, and inf - inf would warn on stderr)
        spread = np.full(len(typical), np.inf)
        known = np.isfinite(typical)
        spread[known] = typical_spread(key, dur, 1.0)[known] - typical[known]
        table = rich_table(f"Collectives far slower than the model and beyond the job's own spread ({len(slow)})", "op",
                       "group", "size", "time", "typical ± spread", "model", "x model", "busbw")
        for k in slow[np.argsort(-(dur[slow] / model[slow]), kind="stable")][:top].tolist():
            c = ct[k]
            table.add_row(f"{c.op} #{c.group_seq}", _group(a, c.gid), fmt_bytes(c.bytes), fmt_ns(c.duration_ns),
                          f"{fmt_ns(typical[k])} ± {fmt_ns(spread[k])}", fmt_ns(c.model_ns),
                          f"{c.duration_ns / c.model_ns:.1f}", fmt_gbps(c.busbw_gbps))
        console.print(table)
    by_size = ct.groups_by(("bytes",), ~np.isnan(busbw) & (ct.column("bytes") > 0))
    if len(by_size) >= 2:
        by_size.sort(key=lambda g: ct.bytes[int(g[0])])
        sizes = [ct.bytes[int(g[0])] for g in by_size]
        ys = [median(busbw[g].tolist()) for g in by_size]
        unit, _ = gbps_unit(max(ys))
        _chart(console, f"collective busbw ({unit}, median) against message size", "scatter",
               sizes, [in_unit(y, unit) for y in ys], log_x=True)


def _links(console, a: Analysis, top: int) -> None:
    import numpy as np

    if not a.links:
        return
    table = rich_table("Point-to-point links (communication matrix)", "src → dst", "bytes", "messages", "transfer time",
                   "bandwidth")
    for link in sorted(a.links, key=lambda k: -k.bytes)[:top]:
        table.add_row(f"{link.src} → {link.dst}", fmt_bytes(link.bytes), str(link.messages), fmt_ns(link.transfer_ns),
                      fmt_gbps(link.gbps))
    console.print(table)
    ls, lr = (int(np.frombuffer(col, typecode(col)).sum()) for col in (a.p2p.late_sender_ns, a.p2p.late_receiver_ns))
    if ls or lr:
        console.print(f"Late sender (receivers waited): {fmt_ns(ls)}; late receiver (senders waited): {fmt_ns(lr)}.")


def _pipeline(console, a: Analysis) -> None:
    p = a.pipeline
    if p is None:
        return
    console.print(f"[bold]Pipeline[/]: {len(p.stages)} stages ({' → '.join(map(str, p.stages))}), "
                  f"{micro_batches(p)}; bubble {p.bubble_fraction:.1%} "
                  f"(GPipe's (P-1)/(M+P-1) = {p.expected_fraction:.1%} with M = {p.micro_batches})")
    if p.slow_stage is not None:
        ranks = [s.rank for s in p.per_stage if s.stage == p.slow_stage]
        console.print(f"Slow stage: [bold]stage {p.slow_stage}[/] ({fmt_ranks(ranks)}) computes {p.slow_factor:.1f}x "
                      f"what the other stages do: it sets the pipeline's pace, and the others' waits for it are "
                      f"bubble, not straggling. Balance the layers between the stages.")
    by_stage: dict[int, list] = defaultdict(list)
    for s in p.per_stage:
        by_stage[s.stage].append(s)
    if all(len(v) == 1 for v in by_stage.values()):
        table = rich_table("Pipeline bubble per stage", "stage", "rank", "window", "blocked", "bubble")
        for stage, (s,) in sorted(by_stage.items()):
            table.add_row(str(stage), str(s.rank), fmt_ns(s.window_ns), fmt_ns(s.blocked_ns),
                          f"{s.bubble_fraction:.1%}")
    else:  # several pipelines (data or tensor parallel replicas): one row per stage
        table = rich_table(f"Pipeline bubble per stage over {len(by_stage[0])} pipelines", "stage", "ranks", "blocked",
                       "bubble (mean)", "min", "max")
        for stage, ss in sorted(by_stage.items()):
            fr = [s.bubble_fraction for s in ss]
            table.add_row(str(stage), fmt_ranks(s.rank for s in ss).removeprefix("ranks "),
                          fmt_ns(sum(s.blocked_ns for s in ss) / len(ss)), f"{sum(fr) / len(fr):.1%}",
                          f"{min(fr):.1%}", f"{max(fr):.1%}")
    console.print(table)
    _schedule(console, p)


def _schedule(console, p) -> None:
    """The schedule read from the trace: each iteration's bubble from its first forward to its last backward."""
    its = p.schedule_iterations
    if not its:
        if p.schedule_note:
            console.print(f"Schedule: not read ({p.schedule_note}).")
        return
    kinds = sorted({it[2] for it in its}, key=[it[2] for it in its].index)
    warm = [it for it in its if it[11]]
    fr = [it[7] for it in its if not it[11]] or [it[7] for it in its]
    apart = ""
    if warm and len(warm) < len(its):  # (Schedule.fraction: the steady iterations' mean)
        apart = (f"; warm-up iteration{'s' if len(warm) > 1 else ''} {fmt_list([it[1] for it in warm])} left out: "
                 + ", ".join(f"{it[7]:.1%} over {fmt_ns(it[5] - it[4])}" for it in warm[:4]))
    console.print(f"Schedule read from the trace: {', '.join(kinds)}, {len(its)} iteration(s); bubble from the first "
                  f"forward to the last backward, start-up waits apart: [bold]{p.schedule_fraction:.1%}[/] (mean"
                  f"{' of the steady iterations' if apart else ''}; {min(fr):.1%} to {max(fr):.1%}{apart}), the "
                  f"textbook's {its[0][8]:.1%}" + (f"; {p.schedule_note}" if p.schedule_note else ""))
    if len(its) > 12:
        return
    table = rich_table("Bubble per iteration", "pipeline", "iteration", "schedule", "M", "span", "start-up", "bubble",
                   "textbook", "ideal grid")
    for k, index, kind, m, t0, t1, startup, bubble, expected, ideal, _, warmup in its:
        table.add_row(str(k), f"{index}{' (warm-up)' if warmup else ''}", kind, str(m), fmt_ns(t1 - t0),
                      fmt_ns(startup), f"{bubble:.1%}", f"{expected:.1%}", f"{ideal:.1%}")
    console.print(table)


def _whole_run(console, run, top: int) -> None:
    """The whole run over the black box's aggregates: its windows, its straggler, the time and bytes per op kind,
    and each rank's time in collectives per window as a chart."""
    from rich.markup import escape
    from rich.text import Text

    n = sum(len(w.start_ns) for w in run.windows.values())
    every = f"every {run.every:g} {run.by}" if run.every else f"by {run.by}"
    wide = widened(run.windows, run.every) if run.by == "steps" else {}
    if wide:
        every += f", widened to up to {max(wide.values())}"
    span = max((max(w.end_ns, default=0) for w in run.windows.values()), default=0) - \
        min(run.aligned_start_ns, default=0)
    console.print(f"[bold]Whole run[/] (the black box's aggregates): {len(run.ranks)} ranks, {n:,} windows ({every}), "
                  f"{len(run.aligned_start_ns):,} aligned across the ranks, {fmt_ns(max(span, 0))}", soft_wrap=True)
    for w in run.warnings:
        console.print(f"[bold yellow]warning:[/] {escape(w)}")
    for w in run.notes:
        console.print(f"[yellow]note:[/] {escape(w)}")
    console.print(Text(run_straggler_sentence(run), style="bold" if run.straggler else ""))
    table = rich_table("Time and bytes per op kind over the whole run (every rank)", "op", "count", "time", "max",
                       "bytes")
    for o in run.ops[:top]:
        table.add_row(o.op, f"{o.count:,}", fmt_ns(o.total_ns), fmt_ns(o.max_ns), fmt_bytes(o.bytes))
    console.print(table)
    ranks = run.ranks[:8]
    if len(run.aligned_start_ns) >= 2 and ranks:
        cols = [(i, [run.per_unit_ns[r][i] for r in ranks]) for i in range(len(run.aligned_start_ns))]
        peak = max((v for _, vs in cols for v in vs if v is not None), default=0)
        unit, _ = ns_unit(max(peak, 1))
        per = "step" if run.unit == "step" else "second"
        x = run.aligned_first_step if run.unit == "step" else [
            (t - run.aligned_start_ns[0]) / 1e9 for t in run.aligned_start_ns]
        _chart(console, f"time in collectives a {per} ({unit}) per window, ranks {fmt_list(ranks)}, against the "
               f"window's first {'step' if run.unit == 'step' else 'second'}", "lines", x,
               [[in_unit(v, unit) if v is not None else None for v in (vs[k] for _, vs in cols)]
                for k in range(len(ranks))], labels=[f"rank {r}" for r in ranks])


def _models(console, a: Analysis) -> None:
    if not a.models:
        return
    table = rich_table("Alpha-beta model fitted from this trace (t = alpha + volume x beta)", "op", "alpha (latency)",
                   "1/beta (bandwidth)", "samples")
    for op, m in sorted(a.models.items()):
        table.add_row(op, fmt_ns(m.alpha_ns), fmt_gbps(1 / m.beta_ns_per_byte) if m.beta_ns_per_byte > 0 else "-",
                      str(m.samples))
    console.print(table)


def _chart(console, title: str, kind: str, xs, ys, log_x: bool = False, labels=None) -> None:
    """A plotext chart printed as plain text (colour would not survive pipes and logs); "lines": ys is a list of
    series (None: no value there), each labelled."""
    if console.width < 40:
        return
    import plotext as plt
    from rich.text import Text

    f = plt.figure
    f.clear()
    plt.terminal.limit(False, False)
    width = min(console.width, 100)
    f.plot_size(width, 14)
    if kind == "bar":
        f.draw(f.bar(xs, ys))
    elif kind == "lines":
        for series, label in zip(ys, labels):
            have = [(x, y) for x, y in zip(xs, series) if y is not None]
            line = f.signal([x for x, _ in have], [y for _, y in have], marker="braille")
            line.lines()
            line.label(label)
            f.draw(line)
        labelled = xs[::max(1, -(-len(xs) // 8))]  # (at most 8 labels: the windows' first steps, or seconds)
        f.ruler(0).ticks(labelled, [f"{x:,.0f}" for x in labelled])
    else:
        if log_x:  # log2 by hand: plotext's log scale loses the points
            labels = [fmt_bytes(x) for x in xs]
            xs = [math.log2(x) for x in xs]
        f.draw(f.signal(xs, ys, marker="dot"))
        if log_x:
            f.ruler(0).ticks(xs, labels)
    if len(title) <= width:
        f.title(title)
    else:  # plotext leaves out a title wider than the plot (at 80 columns, most): it is printed here, wrapped
        console.print(Text(title, justify="center"), width=width)
    console.print(Text(plt.uncolorize(f.build())))
    f.clear()
