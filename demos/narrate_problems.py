"""Narrations of the demos where something goes wrong: a straggler and a hang."""

from __future__ import annotations

import re

from disttrace.tracer.units import fmt_ns_prose

from .narrate_common import DemoRun, Narration, duration


def plain_error(error: str) -> str:
    """The first line of an error, without gloo's '[/path/to/source.cc:78] ' prefix."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return re.sub(r"\[/[^\]]*\]\s*", "", first)[:160]


def straggler(run: DemoRun) -> dict:
    res = next(iter(run.results.values()), {})
    late_rank, late_step, delay = res.get("late_rank"), res.get("late_step"), res.get("delay_ms")
    a = run.analysis
    n = Narration(run, "a straggler: one late rank, everyone waits",
                  f"{run.nproc} ranks run one all-reduce per step. Before step {late_step}, rank {late_rank} is busy "
                  f"for {delay} ms more than the others. A collective cannot complete before every rank has entered "
                  "it: watch where each rank enters the all-reduce of that step, and how long the others stay in it.")
    for row, ev in run.events("all_reduce"):
        ci = a.instance_of[row]
        inst = a.collectives[ci] if ci >= 0 else None
        r = ev["rank"]
        if inst is None:
            n.say(row, f"Step {ev['group_seq']}: rank {r} in the all-reduce for {fmt_ns_prose(duration(ev))}.")
            continue
        first = min(inst.start_ns.values())
        if r == inst.last_arrival and r == late_rank and ev["group_seq"] == late_step:
            text = (f"Step {ev['group_seq']}: rank {r} arrives last, {fmt_ns_prose(inst.skew_ns)} after the first "
                    f"rank - the demo kept it busy for {delay} ms. Once it is in, the all-reduce completes in "
                    f"{fmt_ns_prose(duration(ev))}; everyone else spent that time waiting.")
        elif r == inst.last_arrival:
            text = (f"Step {ev['group_seq']}: rank {r} arrives last, {fmt_ns_prose(inst.skew_ns)} after the first "
                    f"rank (ranks never run exactly in step: start-up, scheduling). It spends "
                    f"{fmt_ns_prose(duration(ev))} in the call.")
        else:
            text = (f"Step {ev['group_seq']}: rank {r} enters the all-reduce at "
                    f"+{fmt_ns_prose(ev['start_ns'] - first)} and spends {fmt_ns_prose(duration(ev))} in it, "
                    f"{fmt_ns_prose(inst.wait_ns.get(r, 0))} of them waiting for rank {inst.last_arrival}, the last "
                    "to arrive.")
        n.say(row, text)
    if a.stragglers:
        s = a.stragglers[0]
        found = (f"The analysis names rank {s.rank} as the straggler: it arrived last {s.late_count} time(s) and "
                 f"cost the others {fmt_ns_prose(s.delay_cost_ns)} of waiting in all.")
    else:
        found = "The analysis found no straggler."
    return n.write(f"{found} The program made rank {late_rank} late by {delay} ms at step {late_step}. In a real job, "
                   "look at what the straggler did just before the collective: data loading, a slow GPU, a "
                   "checkpoint, garbage collection.")


def hang(run: DemoRun) -> dict:
    res = next(iter(run.results.values()), {})
    hang_rank, hang_step, timeout = res.get("hang_rank"), res.get("hang_step"), res.get("timeout_s")
    a = run.analysis
    n = Narration(run, "a hang: one rank never arrives",
                  f"{run.nproc} ranks run one all-reduce per step. At step {hang_step}, rank {hang_rank} skips the "
                  f"all-reduce (a bug: a collective inside an `if` that not every rank takes). The others enter it "
                  f"and wait. The process group's timeout is {timeout} s here (NCCL's default is 10 minutes), so "
                  "the demo ends by itself.")
    for row, ev in run.events("all_reduce"):
        r, step = ev["rank"], ev["group_seq"]
        if ev["status"] == "ok":
            n.say(row, f"Step {step}: rank {r} in the all-reduce for {fmt_ns_prose(duration(ev))}; every rank came, "
                       "it completed.")
        else:
            err = plain_error(ev["error"]) if ev["error"] else "none recorded"
            waited = f"{fmt_ns_prose(duration(ev))}" if duration(ev) is not None else "until the end of the trace"
            n.say(row, f"Step {step}: rank {r} enters the all-reduce and waits for rank {hang_rank}, which never "
                       f"comes. It waits {waited}; status: {ev['status']}; error: {err}.")
    problems = [p.message for p in a.problems if p.kind == "hang"] or [p.message for p in a.problems]
    found = ("The analysis reports: " + " ".join(problems)) if problems else "The analysis reported no problem."
    return n.write(f"{found} In a real hang, the debugger's question is always the same: which rank is missing from "
                   "the collective the others are stuck in, and what was it doing instead?")
