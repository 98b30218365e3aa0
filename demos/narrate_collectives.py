"""Narrations of the one-collective demos, written from the recorded values of each event."""

from __future__ import annotations

from disttrace.tracer.units import fmt_ns_prose

from .narrate_common import DemoRun, Narration, chunks, duration, flat, show, values

def _example_note(run: DemoRun, default_n: int) -> str:
    return f"The worked example: {default_n} ranks, small integers, so that every sum can be checked by hand." \
        if run.nproc == default_n else \
        f"(The worked example uses {default_n} ranks; with {run.nproc} the same pattern continues.)"


def _order(run: DemoRun, op: str) -> list[tuple[int, dict]]:
    """The op's events, one instance after another, each instance's ranks in rank order."""
    evs = run.events(op)
    return sorted(evs, key=lambda x: (x[1]["group_seq"] if x[1]["group_seq"] is not None else -1, x[1]["rank"]))


def _plus(vs: list) -> str:
    return " + ".join(show(v) for v in vs)


def _finish(run: DemoRun, n: Narration, summary: str) -> dict:
    return n.write(summary)


def broadcast(run: DemoRun) -> dict:
    n = Narration(run, "broadcast: one root's tensor, copied to every rank",
                  "dist.broadcast(tensor, src=0): rank 0 is the root. Every rank passes a tensor of the same shape: "
                  "the root's is the data, everyone else's is a buffer that gets overwritten. "
                  + _example_note(run, 3) + " Step through the ranks' events to see what each one held before and "
                  "after.")
    result = None
    for row, ev in _order(run, "broadcast"):
        root, before, after = ev["root"], values(ev["in"]), values(ev["out"])
        if ev["rank"] == root:
            result = after
            text = (f"Rank {root} is the root. It enters with {show(before)} and sends it to the "
                    f"{run.nproc - 1} other rank{'s' if run.nproc > 2 else ''}; its own tensor is unchanged: {show(after)}.")
        else:
            text = (f"Rank {ev['rank']} enters with {show(before)} - just a buffer - and leaves with "
                    f"{show(after)}, a copy of rank {root}'s tensor. It spent {fmt_ns_prose(duration(ev))} in the "
                    f"call, waiting for the data to arrive.")
        n.say(row, text)
    return _finish(run, n, f"Every rank now holds {show(result)}. Broadcast is how data-parallel jobs start all "
                           "replicas from the same weights. Volume: the root's tensor, of Φ bytes, reaches N-1 ranks: "
                           "(N-1)Φ in all.")


def reduce(run: DemoRun) -> dict:
    evs = _order(run, "reduce")
    inputs = {ev["rank"]: values(ev["in"]) for _, ev in evs}
    n = Narration(run, "reduce: everyone's tensor summed onto one rank",
                  "dist.reduce(tensor, dst=0, op=SUM): every rank sends its tensor towards rank 0, which adds them "
                  "up. Only rank 0 is promised the result. " + _example_note(run, 3))
    result = None
    for row, ev in evs:
        r, root, before, after = ev["rank"], ev["root"], values(ev["in"]), values(ev["out"])
        if r == root:
            result = after
            text = (f"Rank {r} is the destination. It starts with {show(before)}, receives the other ranks' "
                    f"tensors and adds them: {_plus([inputs[k] for k in sorted(inputs)])} = {show(after)}.")
        else:
            kept = "its tensor is unchanged" if after == before else \
                f"its buffer now reads {show(after)} (gloo used it as scratch space: only the root's is the result)"
            text = f"Rank {r} sends its {show(before)} to rank {root}; {kept}."
        n.say(row, text)
    return _finish(run, n, f"Rank 0 holds the sum {show(result)}; the other ranks hold no result. Use reduce for "
                           "small things one rank needs, like a loss to log.")


def all_reduce(run: DemoRun) -> dict:
    evs = _order(run, "all_reduce")
    inputs = {ev["rank"]: values(ev["in"]) for _, ev in evs}
    n = Narration(run, "all-reduce: the sum of everyone's tensor, on every rank",
                  "dist.all_reduce(tensor, op=SUM): every rank gives its tensor and every rank receives the sum "
                  "of all of them, in the same buffer. " + _example_note(run, 3))
    result = None
    for row, ev in evs:
        r, before, after = ev["rank"], values(ev["in"]), values(ev["out"])
        result = after
        others = [k for k in sorted(inputs) if k != r]
        text = (f"Rank {r} puts in {show(before)}. The all-reduce adds the tensors of all {len(inputs)} ranks, "
                f"{_plus([inputs[k] for k in sorted(inputs)])}, and rank {r} leaves with {show(after)}: "
                f"its own values plus those of rank{'s' if len(others) > 1 else ''} "
                f"{', '.join(map(str, others))}.")
        n.say(row, text)
    return _finish(run, n, f"Every rank holds {show(result)}. This is how data parallelism averages gradients after "
                           "each backward pass. A ring all-reduce sends 2(N-1)/N of the tensor per rank: see "
                           "`disttrace demo ring-allreduce`.")


def gather(run: DemoRun) -> dict:
    evs = _order(run, "gather")
    n = Narration(run, "gather: every rank's tensor collected on one rank",
                  "dist.gather(tensor, gather_list, dst=0): rank 0 provides one buffer per rank and receives every "
                  "rank's tensor, in rank order; the others only send. " + _example_note(run, 3))
    result = None
    for row, ev in evs:
        r, root = ev["rank"], ev["root"]
        if r == root:
            pieces = values(ev["out"])
            result = flat(pieces) if pieces is not None else None
            text = (f"Rank {r} is the destination: it keeps its own {show(values(ev['in']))} and receives "
                    + ", ".join(f"{show(p)} from rank {k}" for k, p in enumerate(pieces or []) if k != r)
                    + f". Side by side: {show(result)}.")
        else:
            text = f"Rank {r} sends its {show(values(ev['in']))} to rank {root}; it receives nothing."
        n.say(row, text)
    return _finish(run, n, f"Rank 0 holds {show(result)}. Volume: each rank's piece travels once, "
                           "(N-1)/N of the gathered data.")


def all_gather(run: DemoRun) -> dict:
    evs = _order(run, "all_gather")
    n = Narration(run, "all-gather: every rank's tensor collected on every rank",
                  "dist.all_gather_into_tensor(output, tensor): every rank gives its piece and receives all pieces, "
                  "in rank order. " + _example_note(run, 3))
    result = None
    for row, ev in evs:
        r, after = ev["rank"], values(ev["out"])
        result = after
        text = (f"Rank {r} contributes {show(values(ev['in']))} and receives every rank's piece, in rank order: "
                f"{show(after)}. Its own piece sits at position {r}.")
        n.say(row, text)
    return _finish(run, n, f"Every rank holds {show(result)}. Tensor parallelism all-gathers the column shards of an "
                           "activation exactly like this (`disttrace demo tensor-parallel`).")


def scatter(run: DemoRun) -> dict:
    evs = _order(run, "scatter")
    n = Narration(run, "scatter: one rank's data split, piece i to rank i",
                  "dist.scatter(output, scatter_list, src=0): rank 0 cuts its data into one piece per rank and "
                  "sends piece i to rank i. " + _example_note(run, 3))
    for row, ev in evs:
        r, root, got = ev["rank"], ev["root"], values(ev["out"])
        if r == root:
            pieces = values(ev["in"]) or []
            text = (f"Rank {r} is the root. Its data {show(flat(pieces))} is cut into {len(pieces)} pieces: "
                    + ", ".join(f"{show(p)} for rank {k}" for k, p in enumerate(pieces))
                    + f". It keeps piece {r}: {show(got)}.")
        else:
            text = f"Rank {r} receives piece {r} of rank {root}'s data: {show(got)}."
        n.say(row, text)
    return _finish(run, n, "Each rank now holds only its own piece. Scatter hands each worker its slice of a batch "
                           "; gather is the way back.")


def reduce_scatter(run: DemoRun) -> dict:
    evs = _order(run, "reduce_scatter")
    examples = (["the first example", "the second example"] if run.nproc == 2 else ["the pattern"])
    n = Narration(run, "reduce-scatter: sum everything, keep one slice each",
                  "dist.reduce_scatter_tensor(output, input, op=SUM): each rank's input is seen as N equal slices; "
                  "rank i ends with the sum of slice i over all ranks, and nothing else. "
                  + ("Two examples run one after the other: the first with [[-1, 5], [2, 2]] and [[3, -3], [4, 1]], "
                     "the second with [1, 2, 3, 4] and [5, 6, 7, 8]." if run.nproc == 2 else
                     f"With {run.nproc} ranks, rank r holds [2rN+1 ... 2(r+1)N] (the pattern)."))
    results = {}
    for row, ev in evs:
        r, seq = ev["rank"], ev["group_seq"]
        inst = run.instance(ev)
        slices = {k: chunks(values(e["in"]), run.nproc) for k, e in inst.items()}
        mine = slices[r]
        label = examples[seq] if seq < len(examples) else f"example {seq + 1}"
        sent = ", ".join(f"slice {k} {show(mine[k])} to rank {k}" for k in range(run.nproc) if k != r)
        received = ", ".join(f"{show(slices[k][r])} from rank {k}" for k in sorted(slices) if k != r)
        after = values(ev["out"])
        results.setdefault(label, {})[r] = after
        text = (f"{label[0].upper()}{label[1:]}: rank {r}'s input {show(values(ev['in']))} is {run.nproc} slices: "
                f"{', '.join(show(s) for s in mine)}. It sends {sent}, and receives "
                f"{received}. It keeps slice {r} summed over all ranks: "
                f"{_plus([slices[k][r] for k in sorted(slices)])} = {show(after)}.")
        if seq == 0 and run.nproc == 2:
            text += " (In words: rank 0 scatters [2, 2] to rank 1 and rank 1 scatters [3, -3] to rank 0.)"
        n.say(row, text)
    lines = "; ".join(f"{label}: " + ", ".join(f"rank {k} {show(v)}" for k, v in sorted(res.items()))
                      for label, res in results.items())
    return _finish(run, n, f"Results - {lines}. Reduce-scatter followed by all-gather is an all-reduce, and each half "
                           "moves (N-1)/N of the data per rank. ZeRO uses the reduce-scatter alone: "
                           "each rank updates only its slice (`disttrace demo zero1`).")


def all_to_all(run: DemoRun) -> dict:
    evs = _order(run, "all_to_all")
    n = Narration(run, "all-to-all: piece j of every rank goes to rank j",
                  "dist.all_to_all_single(output, input): each rank's input is N pieces; piece j goes to rank j, "
                  "and rank j's output is piece j of every rank, in rank order - a transpose across ranks. "
                  "Rank r starts with [10r, 10r + 1, ...] so that the tens say where a value came from.")
    for row, ev in evs:
        r = ev["rank"]
        inst = run.instance(ev)
        mine = chunks(values(ev["in"]), run.nproc)
        sent = ", ".join(f"{show(mine[k])} to rank {k}" for k in range(run.nproc) if k != r)
        got = ", ".join(f"{show(chunks(values(e['in']), run.nproc)[r])} from rank {k}"
                        for k, e in sorted(inst.items()) if k != r)
        n.say(row, f"Rank {r} holds {show(values(ev['in']))}. It keeps its own piece {show(mine[r])}, sends {sent}, "
                   f"and receives {got}: it leaves with {show(values(ev['out']))}.")
    return _finish(run, n, "Each rank now holds one column of what was a table of rows. Mixture-of-experts layers "
                           "use all-to-all to send tokens to the rank of their expert and back.")


def barrier(run: DemoRun) -> dict:
    evs = _order(run, "barrier")
    n = Narration(run, "barrier: nobody leaves before everybody has arrived",
                  "dist.barrier(): rank r works r x 200 ms before it calls the barrier, so the ranks arrive one "
                  "after another. Watch the start of each rank's barrier, then the end: the ends line up.")
    if evs:
        inst = run.instance(evs[0][1])
        first = min(e["start_ns"] for e in inst.values())
        last_rank = max(inst, key=lambda k: inst[k]["start_ns"])
        last = inst[last_rank]["start_ns"]
    for row, ev in evs:
        r = ev["rank"]
        arrive = ev["start_ns"] - first
        leave = ev["end_ns"] - first if ev["end_ns"] is not None else None
        if r == last_rank:
            text = (f"Rank {r} arrives last, {fmt_ns_prose(arrive)} after the first rank, and leaves at once "
                    f"({fmt_ns_prose(duration(ev))} in the barrier): everyone else was already waiting.")
        else:
            text = (f"Rank {r} arrives at +{fmt_ns_prose(arrive)} and leaves at +{fmt_ns_prose(leave)}: it waited "
                    f"{fmt_ns_prose(last - ev['start_ns'])} for rank {last_rank}, the last to arrive.")
        n.say(row, text)
    return _finish(run, n, "A barrier moves no data; its whole cost is waiting for the slowest rank. A debugger "
                           "reads that wait as 'waiting for rank N' (see `disttrace demo straggler`).")


def send_recv(run: DemoRun) -> dict:
    n = Narration(run, "send and recv: one message, from one rank to another",
                  "dist.send(tensor, dst) and dist.recv(tensor, src): point-to-point messages, the building blocks "
                  "of pipelines and rings. Rank 0 sends [1, 2, 3] around the ring; the last rank adds 10 and sends "
                  "it back to rank 0.")
    analysis = run.analysis
    for row, ev in sorted(run.events(), key=lambda x: x[1]["start_ns"]):
        r = ev["rank"]
        if ev["op"] == "send":
            n.say(row, f"Rank {r} sends {show(values(ev['in']))} to rank {ev['peer']} "
                       f"({ev['bytes']} bytes: {len(flat(values(ev['in']) or []))} float32 values).")
        elif ev["op"] == "recv":
            wait = ""
            m = analysis.p2p_of[row]
            if m >= 0 and analysis.p2p[m].late_sender_ns > 0:
                wait = (f" It posted the recv {fmt_ns_prose(analysis.p2p[m].late_sender_ns)} before the sender "
                        "started: a late sender, the receiver waits.")
            n.say(row, f"Rank {r} receives {show(values(ev['out']))} from rank {ev['peer']}.{wait}")
    return _finish(run, n, "Every message is a pair: a send on one rank and the matching recv on another. A recv "
                           "whose send never comes waits forever - the simplest hang.")
