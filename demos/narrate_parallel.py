"""Narrations of the parallelism demos: data, tensor and pipeline parallelism, ZeRO-1 and FSDP2 (ZeRO-3).
What a learner reads names no source document nor lecture: those are where the programs come from
(docs/TEACHING.md), not what they show."""

from __future__ import annotations

import os

from disttrace.tracer.units import fmt_bytes_si, fmt_in, fmt_ns_prose

from .narrate_common import DemoRun, Narration, duration, show, values


def _check(run: DemoRun) -> str:
    diffs = [res.get("max_difference") for res in run.results.values() if res.get("max_difference") is not None]
    if not diffs:
        return "The program's check against a single-process reference did not report."
    return (f"Every rank checked its result against a single-process reference computed in the same program: "
            f"largest difference {max(diffs):.1e} (the program asserts it is below 1e-5).")


def _mean(rows: list) -> list | None:
    if any(r is None for r in rows) or not rows:
        return None
    if isinstance(rows[0], list):
        return [_mean([r[i] for r in rows]) for i in range(len(rows[0]))]
    return sum(rows) / len(rows)


def _close(a, b, tol: float = 1e-6) -> bool:
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b))
    return abs(a - b) <= tol * max(1.0, abs(a))


def data_parallel(run: DemoRun) -> dict:
    res = next(iter(run.results.values()), {})
    layers, local = res.get("num_layers", 2), res.get("local_batch_size", "?")
    n = Narration(run, "data parallelism: same model everywhere, gradients averaged",
                  f"A small training program: each of the {run.nproc} ranks holds the whole {layers}-layer MLP "
                  f"and {local} of the batch's samples. After each backward pass it all-reduces (AVG) the gradient of "
                  "every layer, so that all ranks take the same optimizer step and stay identical.")
    for row, ev in run.events("all_reduce"):
        seq = ev["group_seq"]
        step, layer = divmod(seq, layers)
        inst = run.instance(ev)
        mean = _mean([values(e["in"]) for _, e in sorted(inst.items())])
        others = "ranks'" if run.nproc > 2 else "rank's"
        out = values(ev["out"])
        is_mean = mean is not None and out is not None and _close(mean, out)
        n.say(row, f"Step {step}, layer {layer}: rank {ev['rank']}'s gradient, computed from its own {local} samples, "
                   f"is {show(values(ev['in']))}. The all-reduce (AVG) averages it with the other {others}, and rank "
                   f"{ev['rank']} leaves with {show(out)} - "
                   + ("the mean of the ranks' gradients, the same on every rank." if is_mean else
                      "(the recorded values do not show the mean: see the trace).")
                   + f" {fmt_ns_prose(duration(ev))} in the call.")
    return n.write(f"{_check(run)} Averaging the gradients of equal shares of the batch gives the gradient of the "
                   "whole batch: that is why data parallelism computes exactly what one process would. The cost: one "
                   "all-reduce of every gradient per step, 2(N-1)/N of the model's size per rank.")


def tensor_parallel(run: DemoRun) -> dict:
    gathers = run.events("all_gather")
    layers = len({e["group_seq"] for _, e in gathers})
    n = Narration(run, "tensor parallelism: weight columns sharded, activations all-gathered",
                  f"A small MLP split across ranks: every rank has all the data and column shard r of each of the "
                  f"{layers} weight matrices. Forward: each rank computes its columns of the activation and the "
                  "all-gather puts the columns side by side on every rank. Backward (written out by hand): each "
                  "rank keeps the gradient columns of its shard, gets its weight gradient locally, and the ranks all-reduce "
                  "their parts of the gradient of the layer's input.")
    for row, ev in gathers:
        layer = ev["group_seq"]
        pieces = values(ev["out"]) or []
        n.say(row, f"Forward, layer {layer}: rank {ev['rank']} computed gelu(x @ W_{ev['rank']}), its "
                   f"{len(values(ev['in']) or [])} x {len((values(ev['in']) or [[0]])[0])} shard of the activation: "
                   f"{show(values(ev['in']))}. The all-gather gives it every rank's shard - "
                   + ", ".join(f"rank {k}: {show(p)}" for k, p in enumerate(pieces))
                   + " - which it concatenates along the columns into the full activation.")
    for rank in sorted(run.table.ranks):
        reduces = run.events("all_reduce", rank)
        for k, (row, ev) in enumerate(reduces):
            layer = len(reduces) - k   # backward runs from the last layer down to layer 1 (the data needs no gradient)
            n.say(row, f"Backward, layer {layer}: rank {rank}'s shard contributes (g_{rank} * gelu') W_{rank}^T = "
                       f"{show(values(ev['in']))} to the gradient of layer {layer}'s input. The all-reduce (SUM) adds "
                       f"the {run.nproc} contributions: {show(values(ev['out']))}, the gradient flowing into layer "
                       f"{layer - 1}, the same on every rank.")
    return n.write(f"{_check(run)} The pattern: all-gather in the forward pass, all-reduce in the backward pass; "
                   "the weight gradients themselves never travel - each rank owns its shard's. Communication grows "
                   "with the activations (batch x hidden), not with the weights, and happens at every layer: that "
                   "is why tensor parallelism stays within a node's fast links.")


SCHEDULE_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved 1F1B"}


def pipeline_parallel(run: DemoRun) -> dict:
    """Each message of each schedule's iteration, told in causal order: a receive posted before its send waits for
    it (the send, later, delivers it); one posted after receives what was sent. The summary compares the
    schedules' bubbles, measured and the textbook's, and the micro-batches each stage held at once."""
    from disttrace.tracer.analysis.pipeline.schedule import actions_of

    res = next((r for r in run.results.values() if r.get("schedules")), {})
    m = res.get("micro_batches") or 4
    schedules = list(res.get("schedules") or {"gpipe": {}})
    p = run.nproc
    v = 2 if schedules == ["interleaved"] else 1
    names = [SCHEDULE_NAMES.get(s, s) for s in schedules]
    n = Narration(run, "pipeline parallelism: layers in stages, micro-batches in flight",
                  f"A small MLP split into stages: {p * v} stages on {p} ranks"
                  + (" (each rank holds two chunks of layers: stages r and r + P)" if v > 1 else ", one per rank")
                  + f"; the batch is cut into {m} micro-batches. Forward: activations go stage to stage with "
                  "send/recv; backward: gradients come back stage by stage. One training iteration per schedule: "
                  f"{' then '.join(names)}. The grid below draws each stage's forwards (F) and backwards (B) in "
                  "time; n steps through the messages, the playhead's micro-batch in yellow on every stage. Each "
                  "stage sleeps a little per micro-batch to stand for compute, so that the schedule is visible.")
    n.view = "pipeline"
    t = run.table
    matched = {}
    for msg in run.analysis.p2p:
        if msg.send is not None and msg.recv is not None:
            matched[msg.send], matched[msg.recv] = msg.recv, msg.send
    step_name = dict(enumerate(names))
    for rank in range(p):
        nxt, prev = (rank + 1) % p, (rank - 1) % p
        for step, name in step_name.items():
            mine = [(i, ev) for i, ev in run.events(rank=rank) if ev["op"] in ("send", "recv") and ev.get("step") == step]
            for kind in ("F", "B"):
                acts = actions_of(p, v, m, rank, kind)
                ins = [x for x in acts if x[2]]
                outs = [x for x in acts if x[3]]
                if kind == "F":
                    got = [x for x in mine if x[1]["op"] == "recv" and x[1]["peer"] == prev and (rank > 0 or v > 1)]
                    sent = [x for x in mine if x[1]["op"] == "send" and x[1]["peer"] == nxt and (rank < p - 1 or v > 1)]
                else:
                    got = [x for x in mine if x[1]["op"] == "recv" and x[1]["peer"] == nxt and (rank < p - 1 or v > 1)]
                    sent = [x for x in mine if x[1]["op"] == "send" and x[1]["peer"] == prev and (rank > 0 or v > 1)]
                for (row, ev), (chunk, mb, _, _) in zip(sent, outs):
                    n.say(row, _sent(run, name, kind, rank + chunk * p, mb, ev, matched.get(row)))
                for k, ((row, ev), (chunk, mb, _, _)) in enumerate(zip(got, ins)):
                    n.say(row, _received(run, name, kind, rank + chunk * p, mb, ev, matched.get(row), k == 0))
    return n.write(_pipeline_summary(run, schedules, names, p, m, v))


def _sent(run: DemoRun, name: str, kind: str, stage: int, mb: int, ev: dict, recv: int | None) -> str:
    to = stage + 1 if kind == "F" else stage - 1
    what = (f"the activation {show(values(ev['in']))} to stage {to}" if kind == "F" else
            f"d loss / d input = {show(values(ev['in']))} to stage {to}")
    text = (f"{name}, {'forward' if kind == 'F' else 'backward'} of micro-batch {mb}: stage {stage} ran "
            f"{'its layers' if kind == 'F' else 'the backward of its layers'} and sends {what}.")
    if ev.get("async_op"):
        text += " (isend: it does not wait for the receiver; the iteration waits for its sends at its end.)"
    if recv is not None:
        r = run.rows[recv]
        if r["start_ns"] <= ev["start_ns"]:
            text += (f" Stage {to} has been waiting for it for {fmt_ns_prose(ev['start_ns'] - r['start_ns'])} and "
                     "receives it now.")
        else:
            text += (f" Stage {to} is busy: it will ask for it {fmt_ns_prose(r['start_ns'] - ev['start_ns'])} "
                     "later" + (", and the blocking send waits until then." if not ev.get("async_op") else "."))
    return text


def _received(run: DemoRun, name: str, kind: str, stage: int, mb: int, ev: dict, send: int | None,
              first: bool) -> str:
    frm = stage - 1 if kind == "F" else stage + 1
    what = "its input activation" if kind == "F" else "the gradient of its output"
    head = f"{name}, {'forward' if kind == 'F' else 'backward'} of micro-batch {mb}: stage {stage} "
    if send is not None and run.rows[send]["start_ns"] > ev["start_ns"]:
        s = run.rows[send]
        later = fmt_ns_prose(s["start_ns"] - ev["start_ns"])
        cell = _cells(run).get((ev.get("step"), frm, kind, mb))
        if cell is not None and cell[0] > ev["start_ns"]:
            doing = (f"Stage {frm} has not started on it yet: it starts {fmt_ns_prose(cell[0] - ev['start_ns'])} "
                     f"later, computes for {fmt_ns_prose(cell[1] - cell[0])} and sends it {later} from now")
        else:
            doing = f"Stage {frm} is still computing it (it sends it {later} later)"
        text = head + f"is ready for {what} and waits for it. {doing}."
        if first and kind == "F":
            if cell is not None and cell[0] > ev["start_ns"]:
                text += (f" Until stage {frm} starts, this wait is not counted as bubble (the bubble counts from the "
                         "iteration's first forward); after that it is: this stage has nothing to do until the data "
                         "comes.")
            else:
                text += " The wait is the bubble: this stage has nothing to do until the data comes."
        return text
    ago = f", sent {fmt_ns_prose(ev['start_ns'] - run.rows[send]['start_ns'])} ago by stage {frm}" if send is not None \
        else f" from stage {frm}"
    return (head + f"receives {what} {show(values(ev['out']))}{ago}, and runs "
            f"{'its layers' if kind == 'F' else 'the backward of its layers'} on it.")


def _cells(run: DemoRun) -> dict:
    """(iteration, stage, "F" or "B", micro-batch) -> (start, end) of each computation the analysis read."""
    cached = run.__dict__.get("_schedule_cells")
    if cached is None:
        stats = run.analysis.pipeline
        cached = {(c[0], c[2], c[3], c[4]): (c[5], c[6]) for c in (stats.schedule if stats else ())}
        run.__dict__["_schedule_cells"] = cached
    return cached


def _ideal_idle(cells: list, span: int) -> tuple[int, int]:
    """A textbook grid's idle time over its stages: before their first computation or after their last, and
    between their computations."""
    ends = between = 0
    for row in {c[0] for c in cells}:
        mine = [c for c in cells if c[0] == row]
        first, last = min(c[4] for c in mine), max(c[5] for c in mine)
        ends += first + span - last
        between += last - first - sum(c[5] - c[4] for c in mine)
    return ends, between


def _pipeline_summary(run: DemoRun, schedules: list[str], names: list[str], p: int, m: int, v: int) -> str:
    """The schedules' bubbles, measured (start-up waits apart) and the textbook's, where the idle time came from,
    and the micro-batches each stage held at once."""
    stats = run.analysis.pipeline
    formula = (f"(P-1)/(M+P-1) = ({p}-1)/({m}+{p}-1) = {(p - 1) / (m + p - 1):.0%}" if v == 1 else
               f"(P-1)/(vM+P-1) = ({p}-1)/({v}*{m}+{p}-1) = {(p - 1) / (v * m + p - 1):.0%}")
    by_step = {it[1]: it for it in stats.schedule_iterations} if stats else {}
    lines = []
    for step, (schedule, name) in enumerate(zip(schedules, names)):
        it = by_step.get(step)
        held = [r.get("schedules", {}).get(schedule, {}).get("in_flight") for _, r in sorted(run.results.items())]
        mem = ", ".join(f"stage {k}: {h}" for k, h in enumerate(held) if h is not None)
        if it is None:
            lines.append(f"  {name}: the trace's schedule was not read ({stats.schedule_note if stats else 'no pipeline'})"
                         f"; micro-batches held at once: {mem}.")
            continue
        idle = [s for s in stats.stage_idle if s[0] == step]
        ends, between, host = (sum(s[2] + s[3] for s in idle), sum(s[4] + s[5] for s in idle),
                               sum(s[6] for s in idle))
        ideal = stats.ideal_schedules[it[10]] if it[10] >= 0 else []
        ideal_span = max((c[5] for c in ideal), default=0)
        ideal_ends, ideal_between = _ideal_idle(ideal, ideal_span)
        cut = f", {fmt_ns_prose(it[6])} of waiting for a stage to start left out" if it[6] else ""
        lines.append(f"  {name}: bubble {it[7]:.0%} measured (the iteration took {fmt_ns_prose(it[5] - it[4])}{cut}), "
                     f"{it[9]:.0%} in its textbook grid ({fmt_ns_prose(ideal_span)}). The stages' idle time: "
                     f"{fmt_ns_prose(ends)} before their first computation or after their last, "
                     f"{fmt_ns_prose(between)} waiting for a neighbour between them, {fmt_ns_prose(host)} on the host "
                     f"between ops; in the textbook grid {fmt_ns_prose(ideal_ends)} and {fmt_ns_prose(ideal_between)} "
                     "(the schedule's own filling, draining and waits; the rest came from the messages and from "
                     "computations longer than the median). "
                     f"Micro-batches' activations held at once: {mem}.")
    compare = ""
    if {"gpipe", "1f1b"} <= set(schedules):
        compare = ("GPipe and 1F1B have the same bubble: each stage idles while the pipeline fills and drains. What "
                   "1F1B saves is memory: it runs each backward as soon as it can, so stage s holds at most P - s "
                   "micro-batches' activations instead of all M. ")
    elif v > 1:
        compare = ("Interleaved 1F1B passes each micro-batch around the ring twice, each stage half as long: the "
                   "pipeline fills in half the time, at the price of twice the messages. ")
    return (f"{_check(run)} The bubble, counted from each iteration's first forward to its last backward:\n"
            + "\n".join(lines) + f"\nThe textbook's bubble: {formula}, with every stage equally fast and messages "
            f"free: its grid runs the same order with every forward and every backward at their median. {compare}More "
            "micro-batches shrink the bubble (try --program-args='--num-micro-batches 8 --batch-size 16'), more "
            "stages grow it (--nproc 4); interleaved 1F1B runs on 4 ranks: disttrace demo pipeline-parallel "
            "--nproc 4 --program-args='--schedules interleaved --num-layers 8'.")


def zero1(run: DemoRun) -> dict:
    res = run.results
    any_res = next(iter(res.values()), {})
    psi, nd = any_res.get("psi", 0), any_res.get("n", run.nproc)
    n = Narration(run, "ZeRO-1: optimizer states sharded across data-parallel ranks",
                  f"ZeRO stage 1 (the ZeRO paper's optimizer-state sharding) on {nd} ranks and Ψ = {psi:,} parameters, in bf16 with Adam. Each step: "
                  "reduce-scatter the gradients (rank r gets the sum for its shard), Adam updates rank r's shard "
                  "only, all-gather the updated parameters. The all-reduce in each step is the program's check: "
                  "plain data parallelism run beside it, not part of ZeRO-1.")
    step_of: dict[str, int] = {}
    for row, ev in run.events():
        key = f"{ev['rank']}:{ev['op']}"
        step = step_of.get(key, 0)
        step_of[key] = step + 1
        if ev["op"] == "reduce_scatter":
            text = (f"Step {step}, part 2 of 4 (reduce-scatter): rank {ev['rank']} puts in the bf16 gradients of all {psi:,} parameters "
                    f"({fmt_bytes_si(ev['bytes'])}) and receives the sum for its shard only: "
                    f"{(ev['out'] or {}).get('numel', '?'):,} values.")
        elif ev["op"] == "all_gather":
            text = (f"Step {step}, parts 3 and 4 (update, all-gather): Adam has updated rank {ev['rank']}'s fp32 master shard; it gives the shard in "
                    f"bf16 ({fmt_bytes_si(ev['bytes'])}) and receives everyone's: all {psi:,} parameters, updated.")
        elif ev["op"] == "all_reduce":
            text = (f"Step {step}, the check: an all-reduce of all gradients ({fmt_bytes_si(ev['bytes'])}), as plain "
                    "data parallelism would do, so that the program can compare ZeRO-1 with unsharded Adam.")
        else:
            text = f"A {ev['op']} of {fmt_bytes_si(ev['bytes'])}."
        n.say(row, text)
    measured = _recorded(run, lambda r: f"(without ZeRO: 16Ψ = {res[r]['unsharded']:,} B)" if r in res else "")
    if measured is None:  # (a trace without --memory: the program's own count on its tensors)
        lines = []
        for rank, r in sorted(res.items()):
            held = ", ".join(f"{what} {b:,} B" for what, b in r["held"].items())
            lines.append(f"rank {rank}: {held}; total {r['measured']:,} B vs (2+2)Ψ + KΨ/N_d = {r['formula']:,.0f} B "
                         f"(without ZeRO: 16Ψ = {r['unsharded']:,} B)")
        measured = "Memory held per rank, measured on the tensors:\n  " + "\n  ".join(lines)
    else:
        own = sorted({r["measured"] for r in res.values()})
        measured += ("\nThe communication buffers grow by one step's summed gradients a step: the check keeps them "
                     "for its reference after the steps. The program's own count of parameters, gradients and "
                     f"optimizer state on its tensors: {', '.join(f'{b:,} B' for b in own)} a rank.")
    big = 7.5e9
    summary = (measured +
               f"\nThe ZeRO paper's example: a 7.5B-parameter model needs 16Ψ = {fmt_in(16 * big, 'GB', '.0f')} per rank "
               f"without ZeRO; with P_os and N_d = 64, (2+2)Ψ + 12Ψ/64 = {fmt_in((4 + 12 / 64) * big, 'GB', '.1f')}. "
               f"As N_d grows this tends to 4Ψ, 4/(4+K) = 1/4 of the original. {_check(run).replace('1e-5', '1e-4')}")
    return n.write(summary)


def fsdp2(run: DemoRun) -> dict:
    res = run.results
    any_res = next(iter(res.values()), {})
    psi, nd, unit = any_res.get("psi", 0), any_res.get("n", run.nproc), any_res.get("unit_bytes", 0)
    n = Narration(run, "ZeRO-3 (FSDP2): parameters, gradients and optimizer states sharded",
                  f"FSDP2's fully_shard on each of the model's layers and on the model, {nd} ranks, Ψ = {psi:,} fp32 "
                  "parameters, Adam. Each rank keeps 1/N of every weight's rows. Each step: every layer's weight is "
                  "all-gathered just before the layer runs and freed after it, in the forward and again in the "
                  "backward, where its gradient is reduce-scattered: each rank keeps its shard's average only.")
    seen: dict[tuple[int, str], int] = {}
    for row, ev in run.events():
        key = (ev["rank"], ev["op"])
        i = seen[key] = seen.get(key, -1) + 1
        if ev["op"] == "all_gather":
            text = (f"All-gather {i} of rank {ev['rank']}: it gives its shard of a layer's weight "
                    f"({fmt_bytes_si(ev['bytes'])}) and receives the whole weight ({fmt_bytes_si(unit)}), held only "
                    "while the layer runs: the transient peak ZeRO-3 pays for holding 1/N of everything.")
        elif ev["op"] == "reduce_scatter":
            text = (f"Reduce-scatter {i} of rank {ev['rank']}: it puts in its gradient of a whole layer "
                    f"({fmt_bytes_si(ev['bytes'])}) and keeps the average of its own shard's rows only.")
        else:
            text = f"A {ev['op']} of {fmt_bytes_si(ev['bytes'])}."
        n.say(row, text)
    measured = _recorded(run, lambda r: f"(unsharded: 16Ψ = {res[r]['unsharded']:,} B)" if r in res else "")
    if measured is None:
        measured = "This trace was recorded without --memory: the program's own count on its shards: " + ", ".join(
            f"rank {r} {x['measured']:,} B vs (4 + 4 + 8)Ψ/N = {x['formula']:,.0f} B" for r, x in sorted(res.items()))
    else:
        measured += "\n" + _fsdp2_comm(run, unit)
    return n.write(f"{measured}\nIn fp32 the textbook's (2 + 2 + K)Ψ/N reads (4 + 4 + 8)Ψ/N: the fp32 shards are "
                   "their own master copy, 16 bytes a parameter either way, all divided by N. "
                   f"{_check(run)}")


def _fsdp2_comm(run: DemoRun, unit: int) -> str:
    """The all-gathered layers' transient peak: each rank's communication buffers at their most in the step, the
    op they were sampled at, in layers' weights."""
    from disttrace.tracer.data.load import read_memory

    samples = read_memory(run.table).ranks
    parts = []
    for r, m in sorted(run.memory.ranks.items()):
        s = samples[r]
        lo, hi = (m.steps[0].start_ns, m.steps[-1].end_ns) if m.steps else (0, 0)
        step = next((x for x in m.steps if x.step == run.memory.step), None)
        if step is not None:
            lo, hi = step.start_ns, step.end_ns
        at = next((s.op[i] for i in range(len(s.t)) if lo <= s.t[i] < hi
                   and int(s.bytes[i][run.memory.kinds.index("comm")]) == m.comm_buffers_peak_bytes), None)
        times = f" = {m.comm_buffers_peak_bytes / unit:g} layers' weights" if unit else ""
        parts.append(f"{m.comm_buffers_peak_bytes:,} B on rank {r} (at {at}{times})")
    whole = next(iter(run.results.values()), {}).get("psi", 0) * 4
    return ("The transient peak of ZeRO-3, the communication buffers at their most: " + ", ".join(parts)
            + f", a layer's whole weight being {unit:,} B. In the forward each all-gather holds two layers' weights "
            "(the one running and the next, gathered ahead); in the backward the reduce-scatter adds the layer's "
            "whole gradient and the shard it gives back beside the layer's gathered weight. Never the whole "
            f"model's {whole:,} B: what a rank holds for good is its shards.")


KIND_WORDS = {"params": "parameters", "grads": "gradients", "optimizer": "optimizer state"}


def _terms(f) -> dict[str, str]:
    """Each kind's term of the formula, with the bytes per value the recorder found: 2Ψ, KΨ/N, ..."""
    b = f"{f.bytes_per_value.get('params', 0):g}"
    shard_all = f.scheme == "fsdp2"
    over = "/N" if shard_all else ""
    return {"params": f"{b}Ψ{over}", "grads": f"{b}Ψ{over}",
            "optimizer": "KΨ/N" if f.scheme in ("zero1", "fsdp2") else "KΨ"}


def _recorded(run: DemoRun, after_total=lambda rank: "") -> str | None:
    """What `disttrace run --memory` measured per rank in the chosen step, per kind beside the formula's term, and
    the step's peak with its op; None for a trace recorded without --memory."""
    mem = run.memory
    if mem is None or mem.formula is None or not mem.ranks:
        return None
    f = mem.formula
    terms = _terms(f)
    lines = []
    for r, m in sorted(mem.ranks.items()):
        pred = f.predicted.get(r, {})
        kinds = [f"{KIND_WORDS[k]} {getattr(m, k + '_bytes'):,} B ({terms[k]} = {pred.get(k, 0):,})" for k in terms]
        got, want = sum(getattr(m, k + "_bytes") for k in terms), sum(pred.get(k, 0) for k in terms)
        lines.append(f"rank {r}: " + ", ".join(kinds) + f"; total {got:,} B vs {f.expression} = {want:,} B "
                     + after_total(r))
        site = os.path.basename(m.peak_site) if m.peak_site else "no call site"
        lines.append(f"  its peak in the step: {m.peak_bytes:,} B at {m.peak_op} ({site}): "
                     f"activations {m.peak_by_kind.get('activations', 0):,} B, temporaries "
                     f"{m.peak_by_kind.get('temporaries', 0):,} B and communication buffers "
                     f"{m.peak_by_kind.get('comm', 0):,} B beside the model's states")
    return (f"Memory per rank in step {mem.step}, recorded by disttrace run --memory (the recorder of your own jobs), "
            f"beside the formula ({f.scheme}: Ψ = {f.psi:,} parameters, K = {f.k:g}, N = {f.n}):\n  "
            + "\n  ".join(lines) + "\nWhat the recorder found: " + "; ".join(f.notes + f.unrecognized) + ".")
