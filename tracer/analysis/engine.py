"""analyze(table): the whole analysis in one pass per stage, data flowing one way:
matching -> collectives (waits, bandwidth) and P2P -> theory -> steps -> pipeline -> waits per rank and step,
stragglers and the verdict -> links -> problems."""

from __future__ import annotations

from ..data.events import NONE, EventTable, gc_paused
from .bandwidth import links_of
from .collectives import build_collectives
from .matching import group_collectives
from .model import Analysis
from .p2p import build_p2p
from .pipeline import pipeline_stats
from .problems import find_problems
from .steps import build_steps, find_steps
from .stragglers import fill_steps, stragglers_of, verdict, wait_records, wait_totals
from .theory import fit_models, flag_slow


def analyze(table: EventTable, progress=None) -> Analysis:
    # The analysis makes ~10^5-10^6 small acyclic objects; the cyclic collector would rescan the whole table
    # again and again while they are made (half the time on a 1M-event trace), so it pauses meanwhile.
    with gc_paused():
        return _analyze(table, progress)


def _analyze(table: EventTable, progress) -> Analysis:
    def say(f: float, label: str) -> None:
        if progress is not None:
            progress(f, label)

    t = table
    traced = set(t.ranks) | set(t.rank)
    say(0.0, "matching")
    buckets = group_collectives(t)
    say(0.15, "collectives")
    sub = (lambda f, label: say(0.15 + 0.55 * f, label)) if progress is not None else None
    collectives, instance_of, culprits, suspects = build_collectives(t, buckets, traced, sub)
    say(0.7, "point-to-point")
    p2p, p2p_of = build_p2p(t)
    say(0.8, "models")
    models = fit_models(collectives, p2p)
    flag_slow(collectives, models)
    say(0.82, "steps")
    step_of, steps_source = find_steps(t, buckets, zip(p2p.send, p2p.recv))
    steps = build_steps(t, step_of)
    say(0.85, "pipeline")
    pipeline = pipeline_stats(t, p2p, collectives, steps, step_of)
    say(0.87, "waits")
    rec = wait_records(t, collectives, culprits, p2p, [set(p) for p in pipeline.pipelines] if pipeline else [])
    ranks = sorted(traced)
    waits = wait_totals(rec, ranks)
    stragglers = stragglers_of(rec, collectives, culprits, ranks)
    fill_steps(rec, steps, step_of)
    straggler = verdict(t, rec, steps, step_of)
    say(0.9, "problems")
    problems = find_problems(t, collectives, p2p, set(suspects))
    span = (min(t.start_ns), max(max(t.end_ns), max(t.wait_end_ns))) if len(t) else (0, 0)
    notes = []
    absent = sorted({r for g in t.groups for r in g.ranks} - traced)
    if absent:
        notes.append(f"no events from ranks {absent}: their files are missing, so they are left out of matching")
    if span[1] == NONE:
        span = (span[0], span[0])
    say(1.0, "done")
    return Analysis(t, collectives, instance_of, p2p, p2p_of, waits, stragglers, links_of(p2p), pipeline, problems,
                    models, span, notes, steps=steps, step_of=step_of, steps_source=steps_source,
                    straggler=straggler)
