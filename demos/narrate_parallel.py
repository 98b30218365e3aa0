"""Narrations of the parallelism demos: data, tensor and pipeline parallelism (seed 001) and ZeRO-1 (seed 003).
What a learner reads names no seed nor lecture: those are where the programs come from, not what they show."""

from __future__ import annotations

from disttrace.tracer.analysis.units import fmt_bytes_si, fmt_in, fmt_ns_prose

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


def pipeline_parallel(run: DemoRun) -> dict:
    m = next((res.get("micro_batches") for res in run.results.values()), None) or 4
    p = run.nproc
    n = Narration(run, "pipeline parallelism: layers in stages, micro-batches in flight",
                  f"A small MLP split into stages: {p} stages, one per rank, each holding a slice of the layers; "
                  f"the batch is cut into {m} micro-batches. Forward: activations go stage to stage with send/recv. "
                  "Backward (written out by hand): gradients come back stage by stage, last micro-batch first. "
                  "Each stage sleeps a little per micro-batch to stand for compute, so that the schedule is visible.")
    for rank in range(p):
        fwd_recv = [x for x in run.events("recv", rank) if x[1]["peer"] == rank - 1]
        fwd_send = [x for x in run.events("send", rank) if x[1]["peer"] == rank + 1]
        bwd_recv = [x for x in run.events("recv", rank) if x[1]["peer"] == rank + 1]
        bwd_send = [x for x in run.events("send", rank) if x[1]["peer"] == rank - 1]
        for k, (row, ev) in enumerate(fwd_send):
            n.say(row, f"Forward, micro-batch {k}: stage {rank} ran its layers and sends the activation "
                       f"{show(values(ev['in']))} to stage {rank + 1}.")
        for k, (row, ev) in enumerate(fwd_recv):
            idle = " The wait before it is the bubble: this stage has nothing to do until the data comes." if k == 0 \
                else ""
            n.say(row, f"Forward, micro-batch {k}: stage {rank} receives its input {show(values(ev['out']))} from stage "
                       f"{rank - 1} ({fmt_ns_prose(duration(ev))} in recv).{idle}")
        for k, (row, ev) in enumerate(bwd_send):
            mb = m - 1 - k
            n.say(row, f"Backward, micro-batch {mb}: stage {rank} ran the backward of its layers and sends "
                       f"d loss / d input = {show(values(ev['in']))} to stage {rank - 1}.")
        for k, (row, ev) in enumerate(bwd_recv):
            mb = m - 1 - k
            n.say(row, f"Backward, micro-batch {mb}: stage {rank} receives the gradient of its output, "
                       f"{show(values(ev['out']))}, from stage {rank + 1} ({fmt_ns_prose(duration(ev))} in recv), "
                       "and runs the backward of its layers with it.")
    stats = run.analysis.pipeline
    bubble = (f"The analysis measures a bubble of {stats.bubble_fraction:.0%} (idle share of the stages' time); "
              f"GPipe's (P-1)/(M+P-1) = ({p}-1)/({m}+{p}-1) = {stats.expected_fraction:.0%} counts compute only; at this "
              "toy size the messages and their waits add to the idle time." if stats else
              f"GPipe's bubble is (P-1)/(M+P-1) = ({p}-1)/({m}+{p}-1) = {(p - 1) / (m + p - 1):.0%} of the time.")
    return n.write(f"{_check(run)} {bubble} More micro-batches shrink the bubble (try --program-args="
                   "'--num-micro-batches 8 --batch-size 16'); 1F1B schedules also cut the activation memory.")


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
    lines = []
    for rank, r in sorted(res.items()):
        held = ", ".join(f"{what} {b:,} B" for what, b in r["held"].items())
        lines.append(f"rank {rank}: {held}; total {r['measured']:,} B vs (2+2)Ψ + KΨ/N_d = {r['formula']:,.0f} B "
                     f"(without ZeRO: 16Ψ = {r['unsharded']:,} B)")
    big = 7.5e9
    summary = ("Memory held per rank, measured on the tensors:\n  " + "\n  ".join(lines) +
               f"\nThe ZeRO paper's example: a 7.5B-parameter model needs 16Ψ = {fmt_in(16 * big, 'GB', '.0f')} per rank "
               f"without ZeRO; with P_os and N_d = 64, (2+2)Ψ + 12Ψ/64 = {fmt_in((4 + 12 / 64) * big, 'GB', '.1f')}. "
               f"As N_d grows this tends to 4Ψ, 4/(4+K) = 1/4 of the original. {_check(run).replace('1e-5', '1e-4')}")
    return n.write(summary)
