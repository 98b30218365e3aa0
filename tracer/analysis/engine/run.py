"""analyze(table): the whole analysis as a list of stages (STAGES), one pass each, data flowing one way:
matching -> collectives (waits, bandwidth) and P2P -> the alpha-beta models -> steps -> each event's wait -> the
critical path (beside) -> pipeline -> waits per rank and step, stragglers -> problems -> links -> overlap -> the
replay, the attribution and the what-ifs (docs/ARCHITECTURE.md, "The stages", maps each to its module).

A stage is a function of the table and of earlier stages' results, named in its `reads` and passed in that order;
it returns the results named in its `adds` (a tuple when it adds more than one). The Analysis is built by keyword
from the results that are its fields; the others (each instance's rows, culprits, suspects, the wait records) are
intermediate. Adding an analysis: its module, its result's field in core/results.py (the --json follows from it), and
one line in STAGES."""

from __future__ import annotations

import gc
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from time import perf_counter
from typing import Callable

import numpy as np

from ...data.table.columns import as_int64, distinct, release
from ...data.table import NONE, EventTable, gc_paused, give_back_freed_memory, part_of
from ..core import jit, saved_analysis
from ..causal.attribution import attribute
from ..comms.bandwidth import links_of
from ..comms.collectives import build_collectives
from ..causal.critical_path import critical_paths, step_windows
from ..core.matching import ends_kept, group_collectives
from ..core.results import Analysis
from ..core.window import live_read_sentence, window_sentence, window_summary
from ..causal.overlap import overlaps
from ..comms.p2p import build_p2p
from ..pipeline.stages import pipeline_stats
from ..problems.checks import find_problems, nonfinite_rows
from ..waits.steps import build_steps, find_steps
from ..waits.stragglers import fill_steps, stragglers_of, verdict, wait_records, wait_totals
from ..comms.alpha_beta import fit_models, flag_slow
from ..waits.wait_states import event_waits
from ..causal.what_if import ChangeSpec, replay_steps, what_ifs


FREEZE_FROM = 100_000
"""From this many events, what the analysis made is moved out of the garbage collector's sight (gc.freeze) before
the collector resumes. Made while it was paused, ~10^6 tracked objects at 1M events would all sit in its youngest
generation, and its first collection, set off by whichever thread allocates next (the viewer's UI thread), would
walk them all (~120 ms). They live as long as the trace is looked at (the viewer freezes the loaded trace too); a
cycle among them is never collected."""

BESIDE_MAX_EVENTS = 3_000_000
"""Beyond this many events the stages run one after another: two at once hold both's intermediate results (10M
events: 5.1 GB of anonymous memory at the peak, against 4.0 GB one after another; such a trace is to be read on a
machine of 4 GB)."""


@dataclass(frozen=True)
class Stage:
    run: Callable
    reads: tuple[str, ...]     # "table", earlier stages' adds, "changes" (analyze's), or "progress": a
    #                            callback(fraction, label) for the stretch up to the next labelled stage (None when
    #                            nobody listens)
    adds: tuple[str, ...]      # empty: it only fills in earlier results (columns, fields of the steps)
    label: str = ""            # said to the progress callback when the stage starts ("": it goes on the last one)
    at: float = 0.0            # with a label: the fraction of the analysis done when it starts
    fills: tuple[str, ...] = ()  # earlier results it fills in (their fields, in place)
    beside: bool = False       # runs in a thread beside the stages after it, until one reads what it adds (none
    #                            of those may fill what it reads: _check); for one that waits mostly in numpy and
    #                            compiled code, which let the other thread run; on tables up to BESIDE_MAX_EVENTS


def _ranks(t: EventTable) -> tuple[set[int], list[int]]:
    """The ranks with a file or an event (a rank of a group with neither is absent, left out of matching)."""
    traced = set(t.ranks) | set(distinct(np.frombuffer(t.rank, np.int32)).tolist())
    return traced, sorted(traced)


def _span_and_notes(t: EventTable, traced: set[int], steps_notes: list[str], instance_of, p2p_of, steps,
                    steps_source: str) -> tuple[tuple[int, int], list[str]]:
    span = ((int(as_int64(t.start_ns).min()), int(max(as_int64(t.end_ns).max(), as_int64(t.wait_end_ns).max())))
            if len(t) else (0, 0))  # (in numpy: not a Python int per row)
    if span[1] == NONE:
        span = (span[0], span[0])
    notes = list(t.notes)
    window = window_summary(t, instance_of, p2p_of, steps, steps_source == "marker")
    if window is not None:  # a black-box trace: what its rings' windows hold is said first
        notes.insert(0, window_sentence(window))
    read_live = [r for r, info in sorted(t.ranks.items()) if info.live_ns != NONE and not (info.ring or {}).get("live")]
    if read_live:
        notes.insert(0, live_read_sentence(read_live))
    absent = sorted({r for g in t.groups for r in g.ranks} - traced)
    if absent:
        notes.append(f"no events from ranks {absent}: their files are missing, so they are left out of matching")
    return span, notes + steps_notes


STAGES: tuple[Stage, ...] = (
    Stage(_ranks, ("table",), ("traced", "ranks")),
    # the summaries that may count a NaN or an Inf, found beside the stages up to the problems (a compiled scan)
    Stage(nonfinite_rows, ("table",), ("nonfinite",), beside=True),
    Stage(group_collectives, ("table",), ("buckets",), "matching", 0.0),
    Stage(build_collectives, ("table", "buckets", "traced", "progress"),
          ("collectives", "instance_of", "culprits", "suspects"), "collectives", 0.15),
    Stage(build_p2p, ("table",), ("p2p", "p2p_of"), "point-to-point", 0.7),
    Stage(fit_models, ("collectives", "p2p"), ("models",), "models", 0.8),
    Stage(flag_slow, ("collectives", "models"), (), fills=("collectives",)),  # their model_ns and slow
    Stage(find_steps, ("table", "buckets", "p2p"), ("step_of", "steps_source", "steps_notes"), "steps", 0.82),
    Stage(build_steps, ("table", "step_of"), ("steps",)),
    Stage(event_waits, ("table", "collectives", "p2p"), ("event_wait_ns",)),
    Stage(step_windows, ("table", "steps", "step_of"), ("windows",)),
    # the critical path (a compiled walk, a large share of the analysis) beside the waits and the problems
    Stage(critical_paths, ("table", "collectives", "instance_of", "culprits", "p2p", "p2p_of", "event_wait_ns",
                           "windows", "step_of"), ("critical_path", "causes", "walker"), "critical path", 0.84,
          beside=True),
    Stage(pipeline_stats, ("table", "p2p", "collectives", "steps", "step_of"), ("pipeline",), "pipeline", 0.85),
    Stage(wait_records, ("table", "collectives", "culprits", "p2p", "pipeline"), ("wait_records",), "waits", 0.87),
    Stage(wait_totals, ("wait_records", "ranks"), ("waits",)),
    Stage(stragglers_of, ("wait_records", "culprits", "ranks"), ("stragglers",)),
    Stage(fill_steps, ("wait_records", "steps", "step_of"), (), fills=("steps",)),  # each one's wait_ns, caused_ns
    # the stragglers rule's candidate (the verdict is the attribution's, below); each step's late_rank
    Stage(verdict, ("table", "wait_records", "steps", "step_of"), ("candidate",), fills=("steps",)),
    Stage(find_problems, ("table", "collectives", "p2p", "suspects", "nonfinite", "step_of"), ("problems",), "problems",
          0.88),
    Stage(links_of, ("p2p",), ("links",)),
    Stage(_span_and_notes, ("table", "traced", "steps_notes", "instance_of", "p2p_of", "steps", "steps_source"),
          ("span_ns", "notes")),
    Stage(overlaps, ("table", "walker", "event_wait_ns"), ("event_overlap_ns", "overlap")),
    Stage(replay_steps, ("table", "walker", "collectives", "instance_of", "p2p", "p2p_of", "event_wait_ns",
                         "models", "steps", "step_of", "critical_path"), ("replay",), "what if", 0.9),
    # the ideal step and the slowdown's attribution; the straggler verdict and the slow stage follow from it
    Stage(attribute, ("table", "replay", "pipeline", "steps", "candidate", "stragglers"),
          ("attribution", "pacing", "straggler"), fills=("pipeline",)),
    Stage(what_ifs, ("replay", "pacing", "attribution", "critical_path", "steps", "models", "straggler", "changes"),
          ("what_if",)),
)


def _check(stages: tuple[Stage, ...]) -> list[tuple[float, float]]:
    """That every stage reads only what earlier ones add and that every field of Analysis is added (a wiring
    mistake fails at import, not in the middle of a trace). Returns each stage's stretch of the progress: from its
    labelled stage's start to the next labelled stage's."""
    have = {"table", "progress", "changes"}
    for k, s in enumerate(stages):
        if missing := [name for name in s.reads if name not in have]:
            raise TypeError(f"stage {s.run.__name__} reads {missing}, which no earlier stage adds")
        have.update(s.adds)
        if s.beside:
            if "progress" in s.reads or not s.adds:
                raise TypeError(f"stage {s.run.__name__} runs beside others: it can neither report progress nor "
                                "only fill")
            for later in stages[k + 1:]:
                if set(later.fills) & set(s.reads):
                    raise TypeError(f"stage {later.run.__name__} fills what {s.run.__name__}, running beside it, "
                                    "reads")
                if set(later.reads) & set(s.adds):
                    break
    if missing := [f.name for f in fields(Analysis) if f.name not in have]:
        raise TypeError(f"no stage adds the Analysis fields {missing}")
    ats = [s.at for s in stages if s.label] + [1.0]
    lo, k, out = 0.0, -1, []
    for s in stages:
        if s.label:
            lo, k = s.at, k + 1
        out.append((lo, ats[k + 1]))
    return out


_STRETCH = _check(STAGES)


def _dropped_after(stages: tuple[Stage, ...]) -> list[tuple[str, ...]]:
    """Per stage, the intermediate results (not fields of Analysis) that no later stage reads: dropped once it
    ran, so that the analysis' peak memory holds only what is still to be read (the instances' rows by bucket
    and the wait records are large next to the table's own columns)."""
    kept = {f.name for f in fields(Analysis)} | {"table", "progress", "changes"}
    last = {name: k for k, s in enumerate(stages) for name in s.reads}
    return [tuple(name for name, at in last.items() if at == k and name not in kept) for k in range(len(stages))]


_DROPPED = _dropped_after(STAGES)


def analyze(table: EventTable, progress=None, changes: tuple[ChangeSpec, ...] = (),
            timings: dict[str, float] | None = None) -> Analysis:
    """The analysis of a table; `changes` are the what-ifs to re-time (causal/what_if.py; none: its defaults). `timings`,
    when given, gets each stage's seconds by its function's name (benchmarks/bench_analysis.py).

    A table opened from the trace store (its `origin`) gets the analysis saved there by an earlier run of the same
    code (core/saved_analysis.py), and the one computed here is saved for the next (not with `changes` nor `timings`)."""
    keep = not changes and timings is None and table.origin is not None
    if keep and (a := saved_analysis.load(table)) is not None:
        if progress is not None:
            progress(1.0, "opened the saved analysis")
        return a
    # The analysis makes ~10^5-10^6 small acyclic objects; the cyclic collector would rescan the whole table
    # again and again while they are made (much of a large trace's analysis), so it pauses meanwhile.
    with gc_paused(), ends_kept(table):
        jit.warm(len(table))  # numba starts beside the first stages (its loops come later: the critical path)
        a = _analyze(table, progress, tuple(changes), timings)
        if len(table) >= FREEZE_FROM:
            gc.freeze()
    if keep:
        saved_analysis.save(a)
    if len(table) >= 100_000:
        give_back_freed_memory()  # (its intermediate results, and the saved one's encoding)
    return a


def _analyze(table: EventTable, progress, changes: tuple[ChangeSpec, ...], timings) -> Analysis:
    results = {"table": table, "progress": None, "changes": changes}
    running: dict[str, tuple[Stage, Future]] = {}  # what a stage running beside the others will add

    def take(stage: Stage, out) -> None:
        if len(stage.adds) == 1:
            results[stage.adds[0]] = out
        elif stage.adds:
            results.update(zip(stage.adds, out))

    def timed(stage: Stage, args: list):
        t0 = perf_counter()
        out = stage.run(*args)
        if timings is not None:
            timings[stage.run.__name__] = perf_counter() - t0
        return out

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="disttrace-analysis") as beside:
        try:
            for stage, (lo, hi), dropped in zip(STAGES, _STRETCH, _DROPPED):
                for name in stage.reads:
                    if name in running:
                        _join(running, name, take)
                if progress is not None:
                    if stage.label:
                        progress(stage.at, stage.label)
                    if "progress" in stage.reads:
                        results["progress"] = part_of(progress, lo, hi)
                args = list(map(results.__getitem__, stage.reads))
                if stage.beside and len(table) <= BESIDE_MAX_EVENTS:
                    future = beside.submit(timed, stage, args)
                    running.update((name, (stage, future)) for name in stage.adds)
                else:
                    take(stage, timed(stage, args))
                del args
                for name in dropped:
                    _drop(results.pop(name))
            while running:
                _join(running, next(iter(running)), take)
        finally:
            for _, future in running.values():
                future.cancel()
    if progress is not None:
        progress(1.0, "done")
    return Analysis(**{f.name: results[f.name] for f in fields(Analysis)})


def _drop(result) -> None:
    """Let go of an intermediate result; a list held nowhere else (the instances' rows by bucket: millions of
    objects on a large trace) is emptied a slice at a time, not freed in one C loop under the GIL."""
    if type(result) is list and sys.getrefcount(result) == 2:  # (here and getrefcount's argument)
        release(result)


def _join(running: dict, name: str, take) -> None:
    """Wait for the stage that adds `name`, running beside, and take all it adds (its exception, raised here)."""
    stage, future = running[name]
    out = future.result()
    for added in stage.adds:
        del running[added]
    take(stage, out)
