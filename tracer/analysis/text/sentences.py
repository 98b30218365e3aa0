"""Sentences on the analysis for people: describe(a, row) on what happened at an event (the viewer's step-through
replay), straggler_verdict(a) on the straggler verdict (the report and the viewer's waits view), micro_batches(p)
on a pipeline's work (the report and the viewer's pipeline view), what_if_sentence(w, per) on a re-timed change,
startup_sentence(a) on the ranks' start-up (the report and the viewer's critical path view)
and attribution_lines(a) on why the steps are slow (the report; attribution_summary(a), shorter, the viewer's
waits and critical path views).
Plain text: each renderer styles it."""

from __future__ import annotations

from ...data.table import NONE
from ..core.results import EARLY_REDUCE, LATE_BROADCAST, Analysis, Attribution, PipelineStats, WhatIf
from ..problems.checks import where
from ...units import fmt_bytes, fmt_gbps, fmt_list, fmt_ns, fmt_ordinal, fmt_ranks


def describe(a: Analysis, row: int) -> str:
    t = a.table
    r = t.rank[row]
    k = a.instance_of[row] if row < len(a.instance_of) else -1
    if k >= 0:
        return _collective(a, row, r, a.collectives[k])
    k = a.p2p_of[row] if row < len(a.p2p_of) else -1
    if k >= 0:
        return _p2p(a, row, r, a.p2p[k])
    dur = t.duration_ns(row)
    return (f"rank {r} called {where(t, row)} ({fmt_bytes(t.bytes[row])}), "
            + (f"which took {fmt_ns(dur)}" if dur is not None else "which never finished") + ".")


def _collective(a: Analysis, row: int, r: int, c) -> str:
    t = a.table
    name = f"{c.op} #{c.group_seq} of group {t.groups[c.gid].name}"
    size = "" if c.op == "barrier" else f"; {fmt_bytes(c.bytes)}"
    if c.busbw_gbps is not None:
        size += f" at {fmt_gbps(c.busbw_gbps)} busbw"
    if c.missing:
        return f"rank {r} entered {name}, which never completed: {fmt_ranks(c.missing)} never entered it{size}."
    if c.end_ns.get(r) is None:
        return f"rank {r} entered {name} and never finished it{size}."
    w = c.wait_ns.get(r, 0)
    if w > 0:
        if c.wait_kind == LATE_BROADCAST:
            why = f"for the root, rank {c.root}, which arrived late"
        elif c.wait_kind == EARLY_REDUCE:
            latest = max((s, q) for q, s in c.start_ns.items() if q != r)[1]
            why = f"as root, for rank {latest}, the last to send"
        else:
            why = f"for rank {c.last_arrival}, which arrived last"
        return f"rank {r} waited {fmt_ns(w)} in {name} {why}{size}."
    total = sum(c.wait_ns.values())
    if r == c.last_arrival and total > 0:
        return (f"rank {r} arrived last at {name}, {fmt_ns(c.skew_ns)} after the first, making the others wait "
                f"{fmt_ns(total)} in all{size}.")
    took = f", completing in {fmt_ns(c.duration_ns)}" if c.duration_ns is not None else ""
    return f"rank {r} ran {name} without waiting{took}{size}."


def _p2p(a: Analysis, row: int, r: int, m) -> str:
    t = a.table
    msg = f"message #{m.order} of {m.src}→{m.dst}, {fmt_bytes(m.bytes)}"
    if m.send is None or m.recv is None:
        other = "recv" if m.recv is None else "send"
        return f"rank {r}'s {where(t, row)} ({msg}) has no matching {other} on the other side."
    bw = ""
    if m.transfer_ns:
        bw = f"; transfer {fmt_ns(m.transfer_ns)}, {fmt_gbps(m.bytes / m.transfer_ns)}"
    if row == m.recv:
        if m.late_sender_ns:
            return f"rank {r} waited {fmt_ns(m.late_sender_ns)} in recv for rank {m.src}, a late sender ({msg}{bw})."
        return f"rank {r} received {msg} from rank {m.src}{bw}."
    if m.late_receiver_ns:
        return (f"rank {r} waited {fmt_ns(m.late_receiver_ns)} in send for rank {m.dst}, a late receiver "
                f"({msg}{bw}).")
    end = t.end_ns[row]
    state = "" if end != NONE else " (never finished)"
    return f"rank {r} sent {msg} to rank {m.dst}{state}{bw}."


def straggler_sentence(a: Analysis) -> str:
    """The straggler verdict in one sentence: the rank, its steps, their period, its cost and where it was; or why
    no rank is named."""
    return "".join(straggler_verdict(a))


def straggler_verdict(a: Analysis) -> tuple[str, str]:
    """The straggler sentence as (label, the rest): the label ("Straggler:" or "No straggler:") is what a renderer
    sets apart (the report and the viewer in bold); label + rest is straggler_sentence."""
    v = a.straggler
    if v is None:
        at = a.attribution
        if at.kind == "stage":
            return "No straggler:", f" one stage is slow, not one worker: stage {at.stage}, the verdict below."
        if at.kind == "spread":
            return "No straggler:", " ranks are late by turns, no single culprit: the verdict below."
        worst = a.stragglers[0] if a.stragglers else None
        if worst is None or worst.delay_cost_ns == 0:
            return "No straggler:", " no rank made the others wait."
        return ("No straggler:", f" no rank's late arrivals stand out from the job's own jitter (the most: rank "
                f"{worst.rank} made the others wait {fmt_ns(worst.delay_cost_ns)} in all).")
    if v.steps:
        steady = sum(not s.warmup for s in a.steps)
        if v.period == 1 and len(v.steps) == steady:
            when = "in every step"
        else:
            when = f"in step{'s' if len(v.steps) > 1 else ''} {fmt_list(v.steps)}"
            if v.period:
                when += f" (every {fmt_ordinal(v.period)} step)" if v.period > 1 else " (every step)"
        if v.minor_steps:
            n = len(v.minor_steps)
            others = ("every other step" if n + len(v.steps) == steady else
                      f"step{'s' if n > 1 else ''} {fmt_list(v.minor_steps, spans=True)}")
            when += f", and by less in {others} ({fmt_ns(v.minor_ns)} a step)"
        per = f"{fmt_ns(v.per_step_ns)} a late step"
    elif v.late_count == 1:
        when, per = "once", "at one collective or message"
    else:
        when = f"{v.late_count} times"
        per = f"{fmt_ns(v.per_step_ns)} each"
    if v.to_site and v.from_site == v.to_site:  # (a loop's one call: its compute between two calls of that line)
        which = "" if v.site_nth is None else (
            " (before the step's first of them)" if v.site_nth == 0 else f" (before the step's {fmt_ordinal(v.site_nth + 1)})")
        where = f"; it was late in its compute between two calls at {v.to_site}{which}"
    else:
        came = "its start" if v.from_site in (None, "its start") else f"its op at {v.from_site}"
        where = f"; it arrived late at {v.to_site}, coming from {came}" if v.to_site else ""
    return ("Straggler:", f" rank {v.rank} was late {when}, making the others wait {fmt_ns(v.delay_cost_ns)} "
            f"{'over the steady steps' if v.steps else 'in all'} "
            f"({per}; {v.share:.0%} of all the waiting, the job's jitter is under {fmt_ns(v.noise_ns)}){where}.")


def micro_batches(p: PipelineStats) -> str:
    """A pipeline's work in words: "8 micro-batches", or "3 iterations of 8 micro-batches"."""
    its = f"{p.iterations} iterations of " if p.iterations > 1 else ""
    return f"{its}{p.micro_batches} micro-batches"


def _verdict_kind(at: Attribution) -> str:
    return {"worker": f"one worker, rank {at.rank}", "stage": f"one stage, stage {at.stage}",
            "spread": "spread across workers", "none": "nothing beyond the noise"}[at.kind]


def _largest_shares(at: Attribution, most: int) -> list[tuple[str, float]]:
    """The `most` largest shares of the slowdown (ranks, stages, ops, spans) from half a percent, largest first."""
    shares = [(f"rank {r}", x) for r, x in at.ranks.items()] + [(f"stage {s}", x) for s, x in at.stages.items()] \
        + [(f"{op} ops", x) for op, x in at.ops.items()] + [(f"span {sp}", x) for sp, x in at.spans.items()]
    return sorted((x for x in shares if x[1] >= 0.005), key=lambda x: -x[1])[:most]


def attribution_lines(a: Analysis, per: str = "step") -> list[str]:
    """Why the steps are slow, in a few sentences: the measured and the ideal step, the verdict's kind and why, and
    what putting each candidate on pace removes of the slowdown (the report and the viewer's waits and path views).
    Empty when no step was replayed."""
    at = a.attribution
    if not at.steps:
        return []
    kind = _verdict_kind(at)
    out = [f"Slowdown {at.slowdown:.2f}x: {fmt_ns(at.step_ns)} a {per} measured, {fmt_ns(at.ideal_step_ns)} ideal "
           f"(every compute span and op at its peers' typical duration; {at.steps} "
           f"{'step' if at.steps == 1 else 'steps'} replayed). Verdict: {kind} ({at.reason}).",
           f"Each rank is measured against its peers: {at.roles}."]
    shares = _largest_shares(at, 8)
    if shares:
        out.append("Share of the slowdown each removes, put on pace alone: "
                   + ", ".join(f"{name} {x:.0%}" for name, x in shares) + ".")
    if at.note:
        out.append(f"({at.note}.)")
    return out


def attribution_summary(a: Analysis, per: str = "step") -> list[str]:
    """attribution_lines in two short lines, for the viewer's waits and path views: the verdict's kind with the
    measured and ideal step, and the largest shares. Empty when no step was replayed."""
    at = a.attribution
    if not at.steps:
        return []
    kind = _verdict_kind(at)
    out = [f"Verdict: {kind} · {fmt_ns(at.step_ns)} a {per} measured, {fmt_ns(at.ideal_step_ns)} ideal "
           f"({at.slowdown:.2f}x)"]
    shares = _largest_shares(at, 5)
    if shares:
        out.append("On pace alone, each removes of the slowdown: " + " · ".join(f"{n} {x:.0%}" for n, x in shares))
    return out


def what_if_sentence(w: WhatIf, per: str = "step") -> str:
    """ "What if rank 1 at its peers' pace: 41.2 ms → 36.0 ms a step (−13%; 11 steps replayed)." """
    if w.step_ns_after is None:
        return f"What if {w.change}: {w.note or 'cannot be predicted'}."
    saved = w.step_ns_before - w.step_ns_after
    return (f"What if {w.change}: {fmt_ns(w.step_ns_before)} → {fmt_ns(w.step_ns_after)} a {per} "
            f"({'−' if saved >= 0 else '+'}{100 * abs(saved) / max(w.step_ns_before, 1):.0f}%; "
            f"{w.steps} {'step' if w.steps == 1 else 'steps'} replayed)" + (f": {w.note}" if w.note else "") + ".")


def startup_sentence(a: Analysis, top: int = 4) -> str:
    """Each rank's start-up, said apart from the steps' causes (the causes marked `startup`); "" when every rank's
    first op was the trace's first. "Start-up, apart from the steps' causes (each rank's first op after the
    trace's first): rank 0 511.45 ms (start → train.py:32), which made rank 1 wait 511.45 ms; rank 1 first." """
    late = [c for c in a.causes if c.startup]
    if not late:
        return ""
    said = [f"rank {c.rank} {fmt_ns(c.startup_ns)} ({c.span})" + (
        f", which made {fmt_ranks(c.ranks_delayed)} wait {fmt_ns(c.caused_wait_ns)}" if c.caused_wait_ns else "")
        for c in late[:top]]
    if len(late) > top:
        said.append(f"and {len(late) - top} more ranks, up to {fmt_ns(max(c.startup_ns for c in late[top:]))}")
    first = sorted(set(a.waits) - {c.rank for c in late if c.startup_ns})  # (a.waits: every traced rank)
    if first:
        said.append(f"{fmt_ranks(first)} first to start")
    return "Start-up, apart from the steps' causes (each rank's first op after the trace's first): " + "; ".join(
        said) + "."


def run_straggler_sentence(run) -> str:
    """The whole run's straggler over the black box's aggregates (waits/whole_run.py), in one sentence."""
    s = run.straggler
    if s is None:
        return ("No straggler over the whole run: no rank spent persistently less time in collectives than its "
                "peers, past their jitter.")
    if s.onset_step is not None:
        when = f"from step {s.onset_step:,} on"
    else:
        when = f"from {fmt_ns(s.onset_ns - min(run.aligned_start_ns, default=s.onset_ns))} into the run on"
    return (f"Straggler over the whole run: rank {s.rank} {when}, +{fmt_ns(s.extra_ns)} a {s.unit} (its peers' "
            f"time in collectives beyond its own, in {s.led} of the {s.windows} windows since).")
