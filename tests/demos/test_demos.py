"""Every demo, run for real (`disttrace demo NAME --no-view`), checked through its recorded trace.

The numbers come from the demos' sources (docs/TEACHING.md) and from torch itself; each demo is run once per
session, and only the demos the selected tests need, two at a time (most of a torchrun's time is start-up waiting).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from harness import demo_once

from disttrace.demos.narrate_algorithms import ring_chunks, ring_result_from_trace
from disttrace.demos.registry import DEMOS
from disttrace.tracer.analysis import analyze, memory_report
from disttrace.tracer.data.load import load_trace, read_memory
from disttrace.tui.model.narration import load_narration

pytestmark = pytest.mark.slow

FALLBACK = "(an operation this demo does not explain)"
COLLECTIVE_DEMOS = ["broadcast", "reduce", "all-reduce", "gather", "all-gather", "scatter", "reduce-scatter",
                    "all-to-all", "barrier", "send-recv"]


NO_TERMINAL_DEMO = "all-reduce"
DEMO_NAMES = tuple(DEMOS)


def needs(*names):
    """The demos a test reads: the fixture runs exactly those of the selected tests."""
    def mark(func):
        func._demos = names
        return func
    return mark


class Demo:
    def __init__(self, out, proc):
        self.out, self.proc = out, proc
        self.table = load_trace([str(out)])
        self.rows = [self.table.row(i) for i in range(len(self.table))]
        self.narration = json.loads((out / "narration.json").read_text())
        self.results = {int(f.stem[4:]): json.loads(f.read_text()) for f in (out / "demo-results").glob("rank*.json")}

    def events(self, op=None, rank=None, group_seq=None):
        return [e for e in self.rows if (op is None or e["op"] == op) and (rank is None or e["rank"] == rank)
                and (group_seq is None or e["group_seq"] == group_seq)]

    def by_rank(self, op, group_seq=0):
        return {e["rank"]: e for e in self.events(op, group_seq=group_seq)}

    @property
    def summary(self):
        return self.narration["summary"]


def out_values(e):
    return e["out"]["values"]


def in_values(e):
    return e["in"]["values"]


@pytest.fixture(scope="module")
def demos(request, tmp_path_factory):
    wanted = []
    for item in request.session.items:
        for name in getattr(getattr(item, "function", None), "_demos", ()):
            if name not in wanted:
                wanted.append(name)

    def run(name):
        # the first demo a newcomer runs is run as they would, without --no-view: with no terminal here (stdin and
        # stdout are not one), it keeps the trace and says why it opens no viewer
        no_view = () if name == NO_TERMINAL_DEMO else ("--no-view",)
        return name, *demo_once(tmp_path_factory, name, *no_view)

    with ThreadPoolExecutor(max_workers=2) as pool:
        finished = list(pool.map(run, wanted))
    runs = {}
    for name, out, proc in finished:
        assert proc.returncode == 0, f"demo {name} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert f"trace and narration in {out}" in proc.stdout
        runs[name] = Demo(out, proc)
    return runs


# -- the collectives: the guide's and the notes' numbers (docs/TEACHING.md) ------------------------

@needs("broadcast")
def test_broadcast_copies_the_roots_tensor(demos):
    d = demos["broadcast"]
    ev = d.by_rank("broadcast")
    assert in_values(ev[0]) == [1, 2, 3] and in_values(ev[1]) == [0, 0, 0]
    assert {r: out_values(e) for r, e in ev.items()} == {0: [1, 2, 3], 1: [1, 2, 3], 2: [1, 2, 3]}
    assert all(e["root"] == 0 for e in ev.values())


@needs("reduce")
def test_reduce_sums_onto_rank_0(demos):
    ev = demos["reduce"].by_rank("reduce")
    assert {r: in_values(e) for r, e in ev.items()} == {0: [1, 2, 3], 1: [4, 5, 6], 2: [7, 8, 9]}
    assert out_values(ev[0]) == [12, 15, 18]


@needs("all-reduce")
def test_a_demo_says_what_it_does_and_without_a_terminal_keeps_the_trace(demos):
    d = demos[NO_TERMINAL_DEMO]
    out = d.proc.stdout.splitlines()
    assert out[0] == "disttrace demo all-reduce: starting 3 ranks (torchrun, gloo on the CPU)", out
    phases = [out.index(line) for line in out if not line.startswith("  ")]
    assert [out[i].split(": ", 1)[1].split(" (")[0] for i in phases] == [
        "starting 3 ranks", "the job ended", "trace and narration in " + str(d.out)], out
    joined = next(i for i, line in enumerate(out) if line.startswith("  all 3 ranks have joined the process group"))
    assert phases[0] < joined < phases[1], out
    # the ranks' own lines, whole, each with its rank in front, in order, before the job ended (not always after
    # the "joined" line: that one waits for every rank's trace file, which a rank the machine holds back writes
    # after its peers have printed)
    for r, before in enumerate(([1, 2, 3], [4, 5, 6], [7, 8, 9])):
        at = out.index(f"  rank {r} │ rank {r} before: {before}")
        assert phases[0] < at < out.index(f"  rank {r} │ rank {r} after:  [12, 15, 18]") < phases[1], out
    assert d.proc.returncode == 0
    assert d.proc.stderr.strip().splitlines()[-1] == (
        "disttrace demo: the viewer was not opened: it needs a terminal, and stdin and stdout are not one")
    assert "\x1b" not in d.proc.stdout  # no screen was drawn


@needs("all-reduce")
def test_all_reduce_gives_12_15_18_everywhere(demos):
    ev = demos["all-reduce"].by_rank("all_reduce")
    assert {r: in_values(e) for r, e in ev.items()} == {0: [1, 2, 3], 1: [4, 5, 6], 2: [7, 8, 9]}
    assert {r: out_values(e) for r, e in ev.items()} == {0: [12, 15, 18], 1: [12, 15, 18], 2: [12, 15, 18]}


@needs("gather")
def test_gather_collects_on_rank_0(demos):
    ev = demos["gather"].by_rank("gather")
    assert {r: in_values(e) for r, e in ev.items()} == {0: [1, 2], 1: [3, 4], 2: [5, 6]}
    assert out_values(ev[0]) == [[1, 2], [3, 4], [5, 6]]


@needs("all-gather")
def test_all_gather_collects_everywhere(demos):
    ev = demos["all-gather"].by_rank("all_gather")
    assert {r: in_values(e) for r, e in ev.items()} == {0: [1, 2], 1: [3, 4], 2: [5, 6]}
    assert all(out_values(e) == [1, 2, 3, 4, 5, 6] for e in ev.values())


@needs("scatter")
def test_scatter_hands_out_pieces(demos):
    ev = demos["scatter"].by_rank("scatter")
    assert in_values(ev[0]) == [[1, 2], [3, 4], [5, 6]]
    assert {r: out_values(e) for r, e in ev.items()} == {0: [1, 2], 1: [3, 4], 2: [5, 6]}


@needs("reduce-scatter")
def test_reduce_scatter_reproduces_the_notes_and_the_guide(demos):
    d = demos["reduce-scatter"]
    seed000 = d.by_rank("reduce_scatter", 0)
    assert in_values(seed000[0]) == [-1, 5, 2, 2] and in_values(seed000[1]) == [3, -3, 4, 1]
    assert out_values(seed000[0]) == [2, 2] and out_values(seed000[1]) == [6, 3]
    seed002 = d.by_rank("reduce_scatter", 1)
    assert in_values(seed002[0]) == [1, 2, 3, 4] and in_values(seed002[1]) == [5, 6, 7, 8]
    assert out_values(seed002[0]) == [6, 8] and out_values(seed002[1]) == [10, 12]
    texts = {s["match"]["rank"]: s["text"] for s in d.narration["steps"] if s["match"].get("id") == 0}
    assert "[-1, 5] + [3, -3] = [2, 2]" in texts[0]
    assert "[2, 2] + [4, 1] = [6, 3]" in texts[1]
    assert "rank 0 [2, 2], rank 1 [6, 3]" in d.summary


@needs("all-to-all")
def test_all_to_all_transposes(demos):
    ev = demos["all-to-all"].by_rank("all_to_all")
    n = len(ev)
    for j, e in ev.items():
        assert in_values(e) == [10 * j + k for k in range(n)]
        assert out_values(e) == [10 * k + j for k in range(n)]


@needs("barrier")
def test_barrier_ranks_arrive_apart_and_leave_together(demos):
    ev = demos["barrier"].by_rank("barrier")
    starts = {r: e["start_ns"] for r, e in ev.items()}
    ends = [e["end_ns"] for e in ev.values()]
    assert max(starts, key=starts.get) == 2                       # rank 2 slept 400 ms, rank 1 200 ms
    assert starts[2] - starts[0] > 300e6
    assert max(ends) - min(ends) < (starts[2] - starts[0]) / 4   # they leave together


@needs("send-recv")
def test_send_recv_messages(demos):
    d = demos["send-recv"]
    (s0,), (r1,) = d.events("send", 0), d.events("recv", 1)
    assert (s0["peer"], in_values(s0)) == (1, [1, 2, 3])
    assert (r1["peer"], out_values(r1)) == (0, [1, 2, 3])
    (s1,), (r0,) = d.events("send", 1), d.events("recv", 0)
    assert in_values(s1) == [11, 12, 13] and out_values(r0) == [11, 12, 13]


@needs(*COLLECTIVE_DEMOS)
def test_every_event_of_the_collectives_demos_has_its_own_narration_with_the_recorded_values(demos):
    for name in COLLECTIVE_DEMOS:
        d = demos[name]
        narration = load_narration([str(d.out)])   # what the viewer loads
        assert narration.title and narration.intro
        for i, ev in enumerate(d.rows):
            text = narration.text_for(d.table, i)
            assert text and text != FALLBACK, (name, ev)
            assert f"ank {ev['rank']}" in text, (name, text)
            for key in ("out",) if ev["op"] == "recv" else ("in", "out"):   # a recv's "in" is its empty buffer
                vals = (ev[key] or {}).get("values")
                if vals is not None and all(isinstance(v, (int, float)) for v in vals):
                    shown = str([int(v) if float(v).is_integer() else v for v in vals])
                    if ev["op"] != "reduce" or ev["rank"] == ev["root"] or key == "in":
                        assert shown in text, (name, key, shown, text)
        assert d.summary in narration.text_for(d.table, len(d.rows) - 1)


# -- algorithms -------------------------------------------------------------------------------

@needs("ring-allreduce")
def test_ring_allreduce_equals_dist_all_reduce_and_moves_real_chunks(demos):
    d = demos["ring-allreduce"]
    n = len(d.table.ranks)
    original = {r: in_values(e) for r, e in d.by_rank("all_reduce").items()}
    total = [sum(col) for col in zip(*original.values())]
    assert original[1] == [101 + i for i in range(2 * n)]
    size = len(total) // n
    for r in range(n):
        sends, recvs = d.events("send", r), d.events("recv", r)
        assert len(sends) == len(recvs) == 2 * (n - 1)
        assert all(s["peer"] == (r + 1) % n and len(in_values(s)) == size for s in sends)
        assert all(x["peer"] == (r - 1) % n for x in recvs)
        assert out_values(d.by_rank("all_reduce")[r]) == total                  # torch's all_reduce
        assert d.results[r]["ring"] == total                                    # the ring, as the program saw it
        # The reduce-scatter phase: the chunk received at step s is the sum of the s+1 ranks before this one.
        for k in range(n - 1):
            _, s, _, got = ring_chunks(r, n, k)
            senders = [(r - 1 - j) % n for j in range(s + 1)]
            expected = [sum(original[q][got * size + i] for q in senders) for i in range(size)]
            assert out_values(recvs[k]) == expected


@needs("ring-allreduce")
def test_ring_result_put_together_from_the_trace_is_the_all_reduce(demos):
    d = demos["ring-allreduce"]
    from disttrace.demos.narrate_common import DemoRun

    run = DemoRun("ring-allreduce", d.out, d.table, len(d.table.ranks), "gloo")
    for r, e in d.by_rank("all_reduce").items():
        assert ring_result_from_trace(run, r) == out_values(e)
    assert "matches dist.all_reduce on every rank" in d.summary


@needs("allreduce-three-ways")
def test_allreduce_three_ways_records_each_approach(demos):
    d = demos["allreduce-three-ways"]
    phi = 2**20 * 4
    assert {e["bytes"] for e in d.events("all_reduce")} == {phi}
    assert {e["bytes"] for e in d.events("reduce_scatter")} == {phi}
    assert all(e["in"] is None for e in d.rows)           # timed demo: no summaries, they would cost time
    assert {e["bytes"] for e in d.events("all_gather")} == {phi // 2}
    for op in ("all_reduce", "reduce", "broadcast", "reduce_scatter", "all_gather"):
        assert len(d.events(op, rank=0)) == 3, op       # 3 rounds each
    for line in ("all_reduce: best round", "reduce + broadcast: best round", "reduce_scatter + all_gather: best round"):
        assert line in d.summary
    assert "2(N-1)/N Φ = 4.19 MB" in d.summary


@needs("p2p-bandwidth")
def test_p2p_bandwidth_measures_each_link(demos):
    d = demos["p2p-bandwidth"]
    links = {(l.src, l.dst): l for l in analyze(d.table).links}
    for dst in (1, 2):
        link = links[(0, dst)]
        assert link.bytes == 10 * 10**6 * 4 and link.messages == 10
        assert link.gbps and link.gbps > 0
        assert f"rank 0 -> rank {dst}: 40.00 MB in 10 messages" in d.summary
        assert f"{link.gbps:.2f} GB/s" in d.summary
    assert "GPU 0 -> 1: 88.9 GB/s" in d.summary


# -- parallelism ------------------------------------------------------------------------------

@needs("data-parallel")
def test_data_parallel_averages_gradients_like_one_process(demos):
    d = demos["data-parallel"]
    reduces = d.events("all_reduce", rank=0)
    assert len(reduces) == 2 * 2                              # 2 steps x 2 layers
    for seq in range(4):
        ev = d.by_rank("all_reduce", seq)
        a, b = (sum(in_values(ev[r]), []) for r in (0, 1))
        mean = [(x + y) / 2 for x, y in zip(a, b)]
        for r in (0, 1):
            out = sum(out_values(ev[r]), [])
            assert max(abs(x - y) for x, y in zip(out, mean)) < 1e-7
    assert all(r["max_difference"] < 1e-5 for r in d.results.values()) and len(d.results) == 2


@needs("tensor-parallel")
def test_tensor_parallel_gathers_activations_and_reduces_gradients(demos):
    d = demos["tensor-parallel"]
    for layer in (0, 1):
        ev = d.by_rank("all_gather", layer)
        for r in (0, 1):
            assert out_values(ev[r]) == [in_values(ev[0]), in_values(ev[1])]   # piece k is rank k's shard
    ev = {e["rank"]: e for e in d.events("all_reduce")}
    total = [[x + y for x, y in zip(p, q)] for p, q in zip(in_values(ev[0]), in_values(ev[1]))]
    for r in (0, 1):
        assert max(abs(x - y) for a, b in zip(out_values(ev[r]), total) for x, y in zip(a, b)) < 1e-7
    assert len(d.events("all_reduce", rank=0)) == 1          # backward: layer 1's input gradient only
    assert all(r["max_difference"] < 1e-5 for r in d.results.values()) and len(d.results) == 2


@needs("pipeline-parallel")
def test_pipeline_parallel_micro_batches_and_bubble(demos):
    """The lecture's pipeline, one iteration on GPipe (its own loops) and one on 1F1B: the same activations and
    gradients go through in both, checked against the single-process reference; the schedule read from the trace."""
    d = demos["pipeline-parallel"]
    for step in (0, 1):
        fwd_sends = [e for e in d.events("send", 0) if e["peer"] == 1 and e["step"] == step]
        fwd_recvs = [e for e in d.events("recv", 1) if e["peer"] == 0 and e["step"] == step]
        bwd_sends = [e for e in d.events("send", 1) if e["peer"] == 0 and e["step"] == step]
        bwd_recvs = [e for e in d.events("recv", 0) if e["peer"] == 1 and e["step"] == step]
        assert len(fwd_sends) == len(fwd_recvs) == len(bwd_sends) == len(bwd_recvs) == 4
        assert [in_values(e) for e in fwd_sends] == [out_values(e) for e in fwd_recvs]
        assert [in_values(e) for e in bwd_sends] == [out_values(e) for e in bwd_recvs]
    # the same micro-batches' activations in both schedules (the lecture's data, cut in 4)
    assert [in_values(e) for e in d.events("send", 0) if e["step"] == 0] == \
        [in_values(e) for e in d.events("send", 0) if e["step"] == 1]
    assert len(d.results) == 2
    for r in d.results.values():
        assert set(r["schedules"]) == {"gpipe", "1f1b"}
        assert all(s["max_difference"] < 1e-5 for s in r["schedules"].values())
    stats = analyze(d.table).pipeline
    assert stats is not None and stats.stages == [0, 1] and stats.micro_batches == 4 and stats.iterations == 2
    assert abs(stats.expected_fraction - 1 / 5) < 1e-9
    assert [it[2] for it in stats.schedule_iterations] == ["GPipe", "1F1B"] and not stats.schedule_note
    # the micro-batches' activations each stage held at once: GPipe all of them, 1F1B P - s; the program counted
    # them on its tensors, the analysis on the schedule
    held = {(s[0], s[1]): s[7] for s in stats.stage_idle}
    assert held == {(0, 0): 4, (0, 1): 4, (1, 0): 2, (1, 1): 1}
    assert {(r, name): res["in_flight"] for r, x in d.results.items() for name, res in x["schedules"].items()} == \
        {(0, "gpipe"): 4, (1, "gpipe"): 4, (0, "1f1b"): 2, (1, "1f1b"): 1}
    assert "(P-1)/(M+P-1) = (2-1)/(4+2-1) = 20%" in d.summary
    assert "GPipe: bubble" in d.summary and "1F1B: bubble" in d.summary and "stage 0: 2, stage 1: 1" in d.summary
    assert d.narration["view"] == "pipeline"


@needs("pipeline-parallel")
def test_pipeline_parallel_narration_reads_in_causal_order(demos):
    """A receive posted before its send says it waits; the send then says it is received; a receive posted after
    its send says what it received. So in the viewer's order (by start), no text receives what was not sent."""
    d = demos["pipeline-parallel"]
    a = analyze(d.table)
    text = {(s["match"]["rank"], s["match"]["id"]): s["text"] for s in d.narration["steps"] if "id" in s["match"]}
    rows = d.rows
    told = 0
    for m in a.p2p:
        if m.send is None or m.recv is None:
            continue
        send, recv = rows[m.send], rows[m.recv]
        t_send, t_recv = text[(send["rank"], send["id"])], text[(recv["rank"], recv["id"])]
        if recv["start_ns"] < send["start_ns"]:  # the receive is told first: it waits, the send delivers
            assert "waits for it" in t_recv and "receives" not in t_recv, t_recv
            assert "receives it now" in t_send, t_send
        else:
            assert "receives" in t_recv and "waits for it" not in t_recv, t_recv
            assert "receives it now" not in t_send, t_send
        told += 1
    assert told == 16


@needs("zero1")
def test_zero1_memory_matches_the_formula(demos):
    d = demos["zero1"]
    assert len(d.results) == 2
    for r in d.results.values():
        psi, n = r["psi"], r["n"]
        assert r["measured"] == (2 + 2) * psi + 12 * psi / n == r["formula"]
        assert r["max_difference"] < 1e-4
    psi = d.results[0]["psi"]
    assert {e["bytes"] for e in d.events("reduce_scatter")} == {2 * psi}     # bf16 gradients, all of them
    assert {e["bytes"] for e in d.events("all_gather")} == {2 * psi // 2}    # one bf16 shard
    assert "16Ψ = 120 GB" in d.summary and "31.4 GB" in d.summary


@needs("zero1")
def test_zero1_memory_is_the_recorders_beside_the_formula(demos):
    """`disttrace demo zero1` records with --memory: the recorder finds the bf16 modules, the fp32 master shard as
    optimizer state (K = 4 + 4 + 4) and the hand-written ZeRO-1 (each rank's copy 1/N of Ψ), and measures
    (2 + 2)Ψ + KΨ/N per kind; the narration quotes its bytes."""
    d = demos["zero1"]
    mem = memory_report(read_memory(d.table), analyze(d.table))
    f = mem.formula
    psi = d.results[0]["psi"]
    assert (f.scheme, f.psi, f.k, f.n, f.expression) == ("zero1", psi, 12, 2, "(2 + 2)Ψ + 12Ψ/N"), f
    for r, m in mem.ranks.items():
        assert (m.params_bytes, m.grads_bytes) == (2 * psi, 2 * psi)
        assert 12 * psi / 2 <= m.optimizer_bytes <= 12 * psi / 2 + 8   # + Adam's step count, a scalar
        assert f"optimizer state {m.optimizer_bytes:,} B (KΨ/N = {12 * psi // 2:,})" in d.summary
    assert "recorded by disttrace run --memory" in d.summary and "(2 + 2)Ψ + 12Ψ/N = 163,840 B" in d.summary


@needs("fsdp2")
def test_fsdp2_shards_everything_and_its_gathered_units_are_the_transient_peak(demos):
    d = demos["fsdp2"]
    psi, n, unit = d.results[0]["psi"], d.results[0]["n"], d.results[0]["unit_bytes"]
    assert all(r["measured"] == 16 * psi / n and r["max_difference"] < 1e-5 for r in d.results.values())
    assert {e["bytes"] for e in d.events("all_gather")} == {unit // n}     # each rank gives its shard of a layer
    mem = memory_report(read_memory(d.table), analyze(d.table))
    f = mem.formula
    assert (f.scheme, f.psi, f.k, f.n, f.expression) == ("fsdp2", psi, 8, n, "(4 + 4 + 8)Ψ/N"), f
    for r, m in mem.ranks.items():
        assert (m.params_bytes, m.grads_bytes) == (4 * psi / n, 4 * psi / n)
        assert 8 * psi / n <= m.optimizer_bytes <= 8 * psi / n + 64           # + Adam's step counts
        assert unit <= m.comm_buffers_peak_bytes < 4 * psi                    # a unit or two, never the model
        assert f"{m.comm_buffers_peak_bytes:,} B on rank {r}" in d.summary
    assert "(4 + 4 + 8)Ψ/N = 131,072 B" in d.summary and "(2 + 2 + K)Ψ/N" in d.summary


# -- when things go wrong -----------------------------------------------------------------------

@needs("straggler")
def test_straggler_is_found(demos):
    d = demos["straggler"]
    a = analyze(d.table)
    assert a.stragglers[0].rank == 2
    late = next(c for c in a.collectives if c.group_seq == 1)
    assert late.last_arrival == 2
    assert late.wait_ns[0] > 250e6 and late.wait_ns[1] > 250e6
    assert "names rank 2 as the straggler" in d.summary


@needs("hang")
def test_hang_shows_the_missing_rank(demos):
    d = demos["hang"]
    assert [e["group_seq"] for e in d.events("all_reduce", 1)] == [0, 1]   # rank 1 skipped step 2
    (stuck,) = d.events("all_reduce", 0, group_seq=2)
    assert stuck["status"] != "ok"
    hangs = [p for p in analyze(d.table).problems if p.kind == "hang"]
    assert hangs and hangs[0].ranks == [1] and hangs[0].group_seq == 2
    assert "rank 1 never did" in d.summary
    stuck_text = next(s["text"] for s in d.narration["steps"] if s["match"].get("id") == stuck["id"]
                      and s["match"].get("rank") == 0)
    assert "waits for rank 1, which never comes" in stuck_text and "Timed out" in stuck_text
    assert "[/" not in stuck_text    # gloo's "[/path.cc:78]" prefix reads as a closing markup tag in the viewer


@needs(*DEMO_NAMES)
def test_no_narration_names_a_seed_or_a_lecture(demos):
    """What a learner reads says what happened, not which course material the numbers come from."""
    import re

    for name, d in demos.items():
        text = json.dumps(d.narration, ensure_ascii=False)
        found = re.findall(r".{0,60}(?:\bseeds?\b|lecture|homework).{0,20}", text, re.I)
        assert not found, (name, found)
