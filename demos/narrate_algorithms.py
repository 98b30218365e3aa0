"""Narrations of the algorithm demos: the hand-written ring, the three all-reduces, the P2P bandwidth puzzler."""

from __future__ import annotations

from disttrace.tracer.units import fmt_bytes_si, fmt_in, fmt_ns_prose

from .narrate_common import DemoRun, Narration, add, chunks, duration, show, show_summary, values


# -- ring all-reduce ---------------------------------------------------------------------------

def ring_chunks(rank: int, n: int, k: int) -> tuple[str, int, int, int]:
    """(phase, step within phase, chunk sent, chunk received) of a rank's k-th send/recv pair; as in the program."""
    if k < n - 1:
        return "reduce-scatter", k, (rank - k) % n, (rank - k - 1) % n
    s = k - (n - 1)
    return "all-gather", s, (rank + 1 - s) % n, (rank - s) % n


def ring_result_from_trace(run: DemoRun, rank: int) -> list | None:
    """The rank's final tensor, put together from what it recorded in the all-gather phase: the complete chunk
    it sent first, and the complete chunks it received."""
    n = run.nproc
    sends = [ev for _, ev in run.events("send", rank)]
    recvs = [ev for _, ev in run.events("recv", rank)]
    final: dict[int, list] = {}
    for k in range(n - 1, 2 * (n - 1)):
        _, s, sent, got = ring_chunks(rank, n, k)
        if s == 0:
            final[sent] = values(sends[k]["in"])
        final[got] = values(recvs[k]["out"])
    if any(v is None for v in final.values()) or len(final) != n:
        return None
    return [x for c in range(n) for x in final[c]]


def ring_allreduce(run: DemoRun) -> dict:
    n = run.nproc
    steps = 2 * (n - 1)
    # Every rank's original data: the input of the dist.all_reduce the program checks its ring against.
    original = {ev["rank"]: values(ev["in"]) for _, ev in run.events("all_reduce")}
    k_values = max((ev["in"] or {}).get("numel", 0) for _, ev in run.events("all_reduce")) if original else 0
    narration = Narration(
        run, "ring all-reduce, by hand: reduce-scatter then all-gather around a ring",
        f"{n} ranks in a ring: each sends only to rank r+1 and receives only from rank r-1. Each rank's {k_values} "
        f"values are cut into {n} chunks of {k_values // n if n else 0}. Rank r starts with [100r + 1, ...]: the "
        f"hundreds say whose values are in a sum. {n - 1} reduce-scatter steps build the sums, {n - 1} all-gather "
        f"steps hand them round: {steps} steps, each moving one chunk (K/N values) per rank.")
    for rank in sorted(original):
        own = chunks(original[rank], n) if original[rank] else None
        sends = run.events("send", rank)
        recvs = run.events("recv", rank)
        for k, (row, ev) in enumerate(sends[:steps]):
            phase, s, sent, _ = ring_chunks(rank, n, k)
            what = (f"its own chunk {sent}" if phase == "reduce-scatter" and s == 0 else
                    f"chunk {sent}, the partial sum it built in the previous step" if phase == "reduce-scatter" else
                    f"chunk {sent}, which is now complete" if s == 0 else
                    f"chunk {sent}, the complete chunk it received in the previous step")
            narration.say(row, f"Ring step {k + 1} of {steps} ({phase} {s + 1}/{n - 1}): rank {rank} sends {what}, "
                               f"{show_summary(ev['in'])}, to rank {(rank + 1) % n}.")
        for k, (row, ev) in enumerate(recvs[:steps]):
            phase, s, _, got = ring_chunks(rank, n, k)
            incoming = values(ev["out"])
            shown = show_summary(ev["out"])
            left = (rank - 1) % n
            if phase == "reduce-scatter":
                contributors = [(rank - 1 - j) % n for j in range(s + 1)]
                total = add(own[got], incoming) if own and incoming else None
                done = " Chunk {} is now complete on rank {}: the sum over all {} ranks.".format(got, rank, n) \
                    if s == n - 2 else ""
                text = (f"Ring step {k + 1} of {steps} ({phase} {s + 1}/{n - 1}): rank {rank} receives chunk {got} "
                        f"from rank {left}, {shown} (the values of rank{'s' if s else ''} "
                        f"{', '.join(map(str, contributors))}), and adds it into its own chunk {got}"
                        + (f": {show(own[got])} + {show(incoming)} = {show(total)}." if total else ".") + done)
            else:
                text = (f"Ring step {k + 1} of {steps} ({phase} {s + 1}/{n - 1}): rank {rank} receives the complete "
                        f"chunk {got}, {shown}, from rank {left} and copies it over its stale copy.")
            narration.say(row, text)
    check = {}
    for row, ev in run.events("all_reduce"):
        ring = ring_result_from_trace(run, ev["rank"])
        check[ev["rank"]] = ring == values(ev["out"])
        if ring is None:   # values too large to record: the program's own assertion is the check
            check[ev["rank"]] = bool(run.results.get(ev["rank"], {}).get("all_reduce_equal"))
            narration.say(row, f"The check: dist.all_reduce on rank {ev['rank']}'s original data gives "
                               f"{show_summary(ev['out'])}; the program compared it with the ring's result: "
                               f"{'the same' if check[ev['rank']] else 'DIFFERENT'}.")
            continue
        narration.say(row, f"The check: dist.all_reduce on rank {ev['rank']}'s original {show(values(ev['in']))} "
                           f"gives {show(values(ev['out']))}; the ring left {show(ring)} on this rank - "
                           f"{'the same' if check[ev['rank']] else 'DIFFERENT'}.")
    same = all(check.values()) and bool(check)
    per_rank = 2 * (n - 1) * (k_values // n if n else 0)
    return narration.write(
        f"The hand-written ring {'matches' if same else 'does NOT match'} dist.all_reduce on every rank. Each rank "
        f"sent {steps} messages of K/N = {k_values // n if n else 0} values: 2(N-1)K/N = {per_rank} values for "
        f"K = {k_values}, N = {n}. That is about 2K whatever N is, which is why the ring is bandwidth-optimal; "
        "its cost is 2(N-1) latencies, which is why large jobs also use trees.")


# -- allreduce three ways ----------------------------------------------------------------------

APPROACHES = (("all_reduce", ("all_reduce",)), ("reduce + broadcast", ("reduce", "broadcast")),
              ("reduce_scatter + all_gather", ("reduce_scatter", "all_gather")))


def _theory(approach: str, n: int, phi: int) -> str:
    if approach == "all_reduce":
        return f"ring: 2(N-1)/N Φ = {fmt_bytes_si(2 * (n - 1) / n * phi)} sent by every rank"
    if approach == "reduce + broadcast":
        return (f"rank 0 receives (N-1)Φ = {fmt_bytes_si((n - 1) * phi)} and sends (N-1)Φ = "
                f"{fmt_bytes_si((n - 1) * phi)}; every other rank sends and receives Φ = {fmt_bytes_si(phi)}")
    return f"(N-1)/N Φ + (N-1)/N Φ = {fmt_bytes_si(2 * (n - 1) / n * phi)} sent by every rank"


def rounds(run: DemoRun) -> list[dict]:
    """One entry per call of a puzzler's function: each makes its own group. {approach, group, events, time_ns}."""
    by_group: dict[str, list[tuple[int, dict]]] = {}
    for row, ev in run.events():
        if ev["op"] in ("all_reduce", "reduce", "broadcast", "reduce_scatter", "all_gather"):
            by_group.setdefault(ev["group"], []).append((row, ev))
    out = []
    for group, evs in sorted(by_group.items(), key=lambda kv: min(e["start_ns"] for _, e in kv[1])):
        ops = {e["op"] for _, e in evs}
        approach = next((name for name, need in APPROACHES if set(need) == ops), None)
        if approach is None:
            continue
        busy: dict[int, int] = {}   # rank -> time inside this round's calls
        for _, e in evs:
            busy[e["rank"]] = busy.get(e["rank"], 0) + (duration(e) or 0)
        time_ns = max(busy.values())
        in_bytes = {}
        for _, e in evs:
            in_bytes[e["rank"]] = in_bytes.get(e["rank"], 0) + e["bytes"]
        out.append({"approach": approach, "group": group, "events": evs, "time_ns": time_ns, "in_bytes": in_bytes})
    return out


def three_ways(run: DemoRun) -> dict:
    n = run.nproc
    found = rounds(run)
    phi = 0
    for r in found:
        if r["approach"] == "all_reduce":
            phi = max(r["in_bytes"].values())
    narration = Narration(
        run, "all_reduce, reduce + broadcast, reduce_scatter + all_gather: the same sum three ways",
        f"A puzzler: three ways to sum a tensor of {phi // 4:,} fp32 values (Φ = {fmt_bytes_si(phi)}) "
        f"over {n} ranks. Each way's function makes its own process group, so each round is one group in the trace. "
        "Compare the times: what makes them differ is how much data each rank moves, and whether one rank "
        "does all the work.")
    count: dict[str, int] = {}
    for r in found:
        count[r["approach"]] = count.get(r["approach"], 0) + 1
        i = count[r["approach"]]
        for row, ev in r["events"]:
            role = ""
            if ev["op"] in ("reduce", "broadcast"):
                role = " (the root)" if ev["rank"] == ev["root"] else ""
            narration.say(row, f"{r['approach']}, round {i}: rank {ev['rank']}{role} is in {ev['op']} with "
                               f"{fmt_bytes_si(ev['bytes'])} of input; the call took {fmt_ns_prose(duration(ev))}. "
                               f"This round took {fmt_ns_prose(r['time_ns'])} (the time its slowest rank spent in "
                               "the round's calls).")
    lines = []
    for approach, _ in APPROACHES:
        mine = [r for r in found if r["approach"] == approach]
        if not mine:
            continue
        best = min(r["time_ns"] for r in mine)
        rec = max(max(r["in_bytes"].values()) for r in mine)
        per_rank = [res["seconds"][approach] for res in run.results.values() if approach in res.get("seconds", {})]
        own = [max(times) for times in zip(*per_rank)]  # each round's slowest rank
        timed = f" (the program's own clock around the calls: {fmt_ns_prose(min(own) * 1e9)})" if own else ""
        lines.append(f"{approach}: best round {fmt_ns_prose(best)} of {len(mine)}{timed}; input of its calls "
                     f"{fmt_bytes_si(rec)} per rank; theory: {_theory(approach, n, phi)}.")
    best = {name: min(r["time_ns"] for r in found if r["approach"] == name) for name, _ in APPROACHES
            if any(r["approach"] == name for r in found)}
    fastest = min(best, key=best.get) if best else None
    summary = ("Measured (time in the calls on the slowest rank, best round):\n" + "\n".join("  " + x for x in lines) +
               "\nIn theory the ring and reduce_scatter + all_gather move the same 2(N-1)/N Φ per rank, spread "
               "evenly, while reduce + broadcast pushes everything through rank 0, (N-1)Φ in and out (the "
               "'naive all-reduce'), and falls behind as N grows. The measured times also show how the backend "
               "implements each call, and that two calls pay two latencies"
               + (f"; here the fastest was {fastest}." if fastest else ".")
               + " Try --nproc 4, and --size, to see how the ranking moves.")
    return narration.write(summary)


# -- P2P bandwidth -----------------------------------------------------------------------------

PUZZLER_TIMES_MS = {1: 4.5, 2: 53.2, 4: 8.8}  # puzzler 1's GPU server: 400 MB from GPU 0 to GPUs 1, 2, 4
# (docs/TEACHING.md#p2p-bandwidth)


def p2p_bandwidth(run: DemoRun) -> dict:
    analysis = run.analysis
    links = {(l.src, l.dst): l for l in analysis.links}
    sends = run.events("send", 0)
    size = sends[0][1]["bytes"] if sends else 0
    narration = Narration(
        run, "P2P bandwidth: the same bytes, rank 0 to each other rank",
        f"A puzzler: rank 0 copies the same data, 10 tensors of {fmt_bytes_si(size)}, to each other rank "
        "in turn (on a GPU server, 10 x 10**7 fp32 values from GPU 0 to GPUs 1, 2 and 4 took 4.5 ms, 53.2 ms and "
        "8.8 ms). "
        "Each receiver answers with one tiny message when it has everything.")
    for rank in sorted(run.table.ranks):
        for row, ev in run.events(rank=rank):
            peer = ev["peer"]
            if ev["op"] == "send" and rank == 0:
                link = links.get((0, peer))
                rate = (f" (link 0 -> {peer}: {fmt_in(link.gbps, 'GB/s', '.2f')} over all its messages)"
                        if link and link.gbps else "")
                narration.say(row, f"Rank 0 sends {fmt_bytes_si(ev['bytes'])} to rank {peer}; the send took "
                                   f"{fmt_ns_prose(duration(ev))}{rate}.")
            elif ev["op"] == "recv" and rank != 0:
                narration.say(row, f"Rank {rank} receives {fmt_bytes_si(ev['bytes'])} from rank {peer} in "
                                   f"{fmt_ns_prose(duration(ev))} (from posting the recv to having the data).")
            elif ev["op"] == "send":
                narration.say(row, f"Rank {rank} tells rank {peer} it has received everything (one value).")
            else:
                narration.say(row, f"Rank 0 hears from rank {peer} that everything arrived: the copy to rank {peer} "
                                   "is over.")
    lines = []
    for (src, dst), link in sorted(links.items()):
        if src != 0 or link.messages < 2:
            continue
        lines.append(f"rank 0 -> rank {dst}: {fmt_bytes_si(link.bytes)} in {link.messages} messages, "
                     f"{fmt_ns_prose(link.transfer_ns)} on the wire, {fmt_in(link.gbps, 'GB/s', '.2f')}"
                     if link.gbps else f"rank 0 -> rank {dst}: {fmt_bytes_si(link.bytes)}, no bandwidth measured")
    seed = ", ".join(f"GPU 0 -> {d}: {fmt_in(0.4 / (t / 1e3), 'GB/s', '.1f')}"
                     for d, t in PUZZLER_TIMES_MS.items())
    return narration.write(
        "Measured per link (the analysis' communication matrix):\n  " + "\n  ".join(lines) +
        f"\nOn that GPU server: {seed} - the same 400 MB, a factor of 12 between links, because the GPU pairs are "
        "joined by different hardware (NVLink vs PCIe through the CPU). Here every link is the same loopback "
        "interface, so the links measure alike; on a GPU server run it with --backend nccl --nproc 5.")
