"""The pipeline's schedule read from a trace (tracer/analysis/pipeline/schedule.py) on synthetic pipelines with exact times:
each stage's forwards and backwards where they ran, labelled with their micro-batch (and virtual stage), each
iteration's bubble from its first forward to its last backward with the start-up waits apart, the idle time by
cause, the textbook grid. The real jobs (torch.distributed.pipelining's schedules, hand-written ones, the demo):
tests/analysis/pipeline/test_schedule_real.py."""

from __future__ import annotations

import orjson
import pytest
from synthetic import MS, Trace

from disttrace.tracer.analysis import analyze, to_json
from disttrace.tracer.analysis.core import saved_analysis as saved
from disttrace.tracer.analysis.pipeline import schedule
from disttrace.tracer.analysis.core.results import PipelineStats


def gpipe_sync(p: int, m: int, tf: float, tb: float, iterations: int = 2, late: dict | None = None,
               d: float = 0.0, slow: dict | None = None, d0: float | None = None) -> tuple[Trace, dict]:
    """GPipe with blocking send/recv, as the lecture writes it: a send ends when its recv is posted (plus d ms; d0
    in the first iteration, where given: gloo's first connections), a recv when its send has come. Stage s's ops start `late[s]` ms after the others' in the first iteration (a
    process still starting). Returns the trace and the true computations: (iteration, rank, kind, mb) -> (start,
    end). Each iteration is a marked step. slow: (stage, or (kind, stage, micro-batch)) -> how many times longer
    its computations take (that one computation's)."""
    slow = slow or {}

    def took(kind: str, s: int, mb: int) -> int:
        return int((tf if kind == "F" else tb) * slow.get(s, 1) * slow.get((kind, s, mb), 1) * MS)

    tr = Trace(p)
    clock = [int(MS + (late or {}).get(s, 0) * MS) for s in range(p)]
    truth = {}

    def exchange(src, dst, step):
        end = max(clock[src], clock[dst]) + int((d if d0 is None or step else d0) * MS)
        tr.send(src, dst, clock[src], end, 4096, step=step)
        tr.recv(dst, src, clock[dst], end, 4096, step=step)
        clock[src] = clock[dst] = end

    for it in range(iterations):
        for mb in range(m):
            for s in range(p):
                truth[(it, s, "F", mb)] = (clock[s], clock[s] + took("F", s, mb))
                clock[s] += took("F", s, mb)
                if s < p - 1:
                    exchange(s, s + 1, it)
        for mb in range(m):
            for s in reversed(range(p)):
                truth[(it, s, "B", mb)] = (clock[s], clock[s] + took("B", s, mb))
                clock[s] += took("B", s, mb)
                if s > 0:
                    exchange(s, s - 1, it)
        clock = [c + 5 * MS for c in clock]  # the optimizer step
    return tr, truth


def megatron_order(p: int, m: int, rank: int, v: int = 1) -> list[tuple[str, int, int]]:
    """1F1B's (v = 1) or interleaved 1F1B's order of rank's actions: (kind, virtual stage, micro-batch). (The demo
    program's one_f_one_b is the same rule, kept apart on purpose: test_schedule_real checks the order the program
    ran, read from its trace, against this one.)"""
    total = m * v

    def f(k):
        return "F", rank + p * ((k // p) % v), (k // (p * v)) * p + k % p

    def b(k):
        return "B", rank + p * (v - 1 - (k // p) % v), (k // (p * v)) * p + k % p

    warmup = min(total, p - rank - 1 if v == 1 else (p - rank - 1) * 2 + (v - 1) * p)
    order = [f(k) for k in range(warmup)]
    for k in range(total - warmup):
        order += [f(warmup + k), b(k)]
    return order + [b(k) for k in range(total - warmup, total)]


def isend_schedule(p: int, m: int, tf: float, tb: float, v: int = 1, iterations: int = 2, d: float = 0.5,
                   order=megatron_order) -> tuple[Trace, dict]:
    """Each rank runs its actions in order: a blocking recv of its input (ends when the send has come, plus d ms),
    the computation, an isend of its output (waited for at the iteration's end), as the demo's 1F1B does."""
    tr = Trace(p)
    clock = [MS] * p
    truth = {}
    last = p * v - 1
    for it in range(iterations):
        orders = [order(p, m, r, v) for r in range(p)]
        at = [0] * p
        sent: dict[tuple, int] = {}  # (kind, virtual stage sending, mb) -> its issue
        pending: list[list[dict]] = [[] for _ in range(p)]
        while any(at[r] < len(orders[r]) for r in range(p)):
            moved = False
            for r in range(p):
                while at[r] < len(orders[r]):
                    kind, s, mb = orders[r][at[r]]
                    src = (s - 1 if kind == "F" else s + 1)
                    needs = not (kind == "F" and s == 0) and not (kind == "B" and s == last)
                    if needs and (kind, src, mb) not in sent:
                        break
                    if needs:
                        ready = sent[(kind, src, mb)] + int(d * MS)
                        ev = tr.recv(r, src % p, clock[r], max(clock[r], ready), 4096, step=it)
                        pending[src % p].append((kind, src, mb, ev))
                        clock[r] = max(clock[r], ready)
                    dur = int((tf if kind == "F" else tb) / v * MS)
                    truth[(it, r, kind, s, mb)] = (clock[r], clock[r] + dur)
                    clock[r] += dur
                    if (kind == "F" and s < last) or (kind == "B" and s > 0):
                        dst = (s + 1 if kind == "F" else s - 1) % p
                        sent[(kind, s, mb)] = clock[r]
                        tr.send(r, dst, clock[r], None, 4096, async_op=True, step=it, _key=(kind, s, mb))
                    at[r] += 1
                    moved = True
            assert moved, "the orders deadlock"
        for r in range(p):  # the sends are waited for at the end: each ends when its recv did
            for ev in [e for e in tr.events if e["rank"] == r and e["op"] == "send" and e.get("step") == it
                       and e["end_ns"] is None]:
                key = ev.pop("_key")
                recv = next(x[3] for x in pending[r] if x[:3] == key)
                ev["end_ns"] = recv["end_ns"]
                ev["wait_start_ns"] = clock[r]
                ev["wait_end_ns"] = max(clock[r], recv["end_ns"])
            clock[r] = max([clock[r]] + [e["wait_end_ns"] for e in tr.events if e["rank"] == r
                                          and e.get("wait_end_ns") is not None])
        clock = [max(clock) + 5 * MS] * p
    return tr, truth


def cells_of(p: PipelineStats) -> dict:
    return {(c[0], c[1], c[3], c[4]): c for c in p.schedule}


# -- GPipe, blocking send/recv ---------------------------------------------------------------------------------

def test_gpipe_s_computations_are_where_they_ran_and_its_bubble_is_the_textbook_s():
    tr, truth = gpipe_sync(2, 4, tf=10, tb=20)
    p = tr.analyze().pipeline
    assert p.iterations == 2 and p.micro_batches == 4
    got = cells_of(p)
    assert set(got) == set(truth)
    for key, (start, end) in truth.items():
        c = got[key]
        assert (c[5], c[6]) == (start, end), (key, c)
        assert c[2] == key[1]  # one stage a rank
    # the boundaries the trace does not show: the first forward (after nothing of the iteration), the last stage's
    # last forward and first backward (no message between them), the first stage's last backward
    assert {k for k, c in got.items() if c[7]} == {(it, r, kind, mb) for it in (0, 1) for r, kind, mb in
                                                   ((0, "F", 0), (1, "F", 3), (1, "B", 0), (0, "B", 3))}
    assert [it[2] for it in p.schedule_iterations] == ["GPipe", "GPipe"]
    for it in p.schedule_iterations:
        # messages take no time here: the bubble is exactly the textbook's, and so is the ideal grid's
        assert it[7] == pytest.approx(1 / 5) and it[8] == pytest.approx(1 / 5) and it[9] == pytest.approx(1 / 5)
        assert it[5] - it[4] == 5 * 30 * MS and it[6] == 0  # (M+P-1)(tf+tb), no start-up wait
    assert p.schedule_fraction == pytest.approx(1 / 5)
    # every stage holds all M micro-batches' activations at once; stage 0 waits (for stage 1) 30 ms, stage 1 warms
    # up for a forward and cools down for a backward
    idle = {(s[0], s[1]): s[2:] for s in p.stage_idle}
    assert idle[(0, 0)] == (0, 0, 0, 30 * MS, 0, 4)
    assert idle[(0, 1)] == (10 * MS, 20 * MS, 0, 0, 0, 4)


def test_a_warm_up_iteration_is_marked_and_left_out_of_the_mean_bubble():
    """The first of 4 iterations has its messages take 40 ms each (gloo's first connections): 470 ms against 150,
    warm-up by the steps' rule. It is marked (the JSON's schedule_iterations' last field) and its bubble is left out
    of the mean; the same rule over a pipeline's synchronization windows (no steps: `warm_windows`) finds it too."""
    tr, _ = gpipe_sync(2, 4, tf=10, tb=20, iterations=4, d0=40)
    a = tr.analyze()
    p = a.pipeline
    its = p.schedule_iterations
    assert [it[7] == pytest.approx(1 / 5) for it in its] == [False, True, True, True]  # (the first's: 0.74)
    assert p.schedule_fraction == pytest.approx(1 / 5)
    assert [it[11] for it in its] == [True, False, False, False]
    assert [it[11] for it in to_json(a)["pipeline"]["schedule_iterations"]] == [True, False, False, False]
    t, step_of = a.table, a.step_of
    windows = [(k, {r: [i for i in range(len(t)) if step_of[i] == k and t.rank[i] == r] for r in (0, 1)})
               for k in range(4)]
    assert schedule.warm_windows(t, windows) == {0}


@pytest.mark.parametrize("lag", [0.15, 15])
def test_gpipe_stays_gpipe_when_its_last_forward_s_input_reads_late(lag):
    # as in a loaded run of pipelining's ScheduleGPipe: the last stage's wait for its last forward's input read as
    # ending after its first backward's send was issued (lag ms after), so its last forward was placed after that
    # backward and the iteration was named 1F1B. The messages' issue order says the forward came first
    tr, _ = gpipe_sync(2, 4, tf=10, tb=20)
    mine = [e for e in tr.events if e["rank"] == 1 and e.get("step") == 0]
    f3 = [e for e in mine if e["op"] == "recv"][3]
    b0_send = [e for e in mine if e["op"] == "send"][0]
    f3.update(async_op=True, wait_start_ns=f3["start_ns"], wait_end_ns=b0_send["start_ns"] + int(lag * MS))
    assert [it[2] for it in tr.analyze().pipeline.schedule_iterations] == ["GPipe", "GPipe"]


def test_a_stage_that_starts_late_makes_no_bubble():
    """Rank 1 posts its first recv 100 ms late (a process still importing torch): rank 0 waits in its first send.
    That wait is left out of the bubble, which stays the textbook's; the blocked-time bubble counts it."""
    on_time = gpipe_sync(2, 4, tf=10, tb=20)[0].analyze().pipeline
    tr, truth = gpipe_sync(2, 4, tf=10, tb=20, late={1: 100})
    p = tr.analyze().pipeline
    first = p.schedule_iterations[0]
    assert first[6] == 90 * MS  # rank 0 sent at 10 ms, rank 1 asked at 100 ms
    assert first[7] == pytest.approx(1 / 5)
    assert p.schedule_startup == [(0, 0, 11 * MS, 101 * MS)]
    assert p.bubble_fraction > on_time.bubble_fraction + 0.03
    got = cells_of(p)
    for key, (start, end) in truth.items():
        assert (got[key][5], got[key][6]) == (start, end), key


def test_messages_that_take_time_are_bubble_the_textbook_grid_has_not():
    tr, _ = gpipe_sync(2, 4, tf=10, tb=20, d=2)
    p = tr.analyze().pipeline
    for it in p.schedule_iterations:
        assert it[7] > it[9] == pytest.approx(1 / 5)
    # the first stage's waits for the second are with the stage after it
    assert all(s[5] > 0 for s in p.stage_idle if s[1] == 0)


def test_a_slow_stage_stretches_its_row_and_its_neighbour_waits_on_it():
    """Stage 1 computes twice as long as stage 0: its row is busy end to end, stage 0's idle time is spent blocked
    with the stage after it (the slow neighbour), and the measured bubble passes the textbook grid's, whose cells
    all last the median."""
    tr, truth = gpipe_sync(2, 4, tf=10, tb=20, slow={1: 2})
    p = tr.analyze().pipeline
    got = cells_of(p)
    for key, (start, end) in truth.items():
        assert (got[key][5], got[key][6]) == (start, end), key
    for it in p.schedule_iterations:
        # (stage 1 busy 4 x 60 ms of a 270 ms span: 10 ms filling, 20 draining; stage 0 4 x 30 ms): 1 - 360 / 540
        assert it[7] == pytest.approx(1 / 3) and it[5] - it[4] == 270 * MS
        assert it[8] == pytest.approx(1 / 5) and it[9] == pytest.approx(1 / 5)
    idle = {(s[0], s[1]): s[2:] for s in p.stage_idle}
    warm, cool, before, after, other, _ = idle[(0, 0)]
    assert (warm, cool, before, other) == (0, 0, 0, 0) and after == 150 * MS  # all of it waiting on stage 1
    assert idle[(0, 1)][:5] == (10 * MS, 20 * MS, 0, 0, 0)  # stage 1: filling and draining only
    # the textbook grid: the same order, every forward and every backward at the median of its kind
    ideal = p.ideal_schedules[p.schedule_iterations[0][10]]
    assert {c[5] - c[4] for c in ideal if c[2] == "F"} == {15 * MS}
    assert {c[5] - c[4] for c in ideal if c[2] == "B"} == {30 * MS}


def test_a_slow_micro_batch_shifts_everything_after_it():
    """Micro-batch 1's forward on stage 0 takes 5x: every computation after it, on both stages, starts 40 ms later
    than on time; stage 1 waits for it with the stage before."""
    on_time = cells_of(gpipe_sync(2, 4, tf=10, tb=20, iterations=1)[0].analyze().pipeline)
    tr, truth = gpipe_sync(2, 4, tf=10, tb=20, iterations=1, slow={("F", 0, 1): 5})
    p = tr.analyze().pipeline
    got = cells_of(p)
    for key, (start, end) in truth.items():
        assert (got[key][5], got[key][6]) == (start, end), key
    f1 = got[(0, 0, "F", 1)]
    for key, c in got.items():
        shift = c[5] - on_time[key][5]
        assert shift == (40 * MS if c[5] >= f1[6] else 0), key
    assert p.schedule_iterations[0][7] > p.schedule_iterations[0][9]
    idle = {(s[0], s[1]): s[2:] for s in p.stage_idle}
    assert idle[(0, 1)][2] >= 40 * MS  # stage 1 blocked with the stage before, waiting for micro-batch 1


# -- 1F1B and interleaved 1F1B, each action sending without waiting --------------------------------------------

@pytest.mark.parametrize("p_, m", [(2, 4), (3, 6), (4, 8)])
def test_1f1b_s_order_and_memory(p_, m):
    tr, truth = isend_schedule(p_, m, tf=10, tb=20)
    p = tr.analyze().pipeline
    assert p.stages == list(range(p_)) and p.virtual_stages == 1
    assert [it[2] for it in p.schedule_iterations] == ["1F1B", "1F1B"]
    got = {(c[0], c[1], c[3], c[2], c[4]): c for c in p.schedule}
    assert set(got) == set(truth)
    for key, (start, end) in truth.items():
        assert abs(got[key][5] - start) <= 1 and abs(got[key][6] - end) <= 1, (key, got[key], (start, end))
    for it in p.schedule_iterations:
        assert it[8] == pytest.approx((p_ - 1) / (m + p_ - 1)) and it[9] == pytest.approx(it[8])
        assert it[7] > it[9]  # the messages take 0.5 ms each
    # stage s holds at most P - s micro-batches' activations
    assert {s[1]: s[7] for s in p.stage_idle} == {r: p_ - r for r in range(p_)}
    # each rank's actions in its order, as it ran them
    for r in range(p_):
        mine = sorted((c for c in p.schedule if c[0] == 0 and c[1] == r), key=lambda c: c[5])
        assert [(c[3], c[2], c[4]) for c in mine] == megatron_order(p_, m, r)


def test_interleaved_1f1b_s_virtual_stages():
    tr, truth = isend_schedule(3, 6, tf=10, tb=20, v=2)
    p = tr.analyze().pipeline
    assert p.virtual_stages == 2 and p.stages == [0, 1, 2]
    assert [it[2] for it in p.schedule_iterations] == ["interleaved 1F1B"] * 2
    got = {(c[0], c[1], c[3], c[2], c[4]): c for c in p.schedule}
    assert set(got) == set(truth)
    for key, (start, end) in truth.items():
        assert abs(got[key][5] - start) <= 1 and abs(got[key][6] - end) <= 1, (key, got[key], (start, end))
    for it in p.schedule_iterations:
        assert it[8] == pytest.approx(2 / 14) and it[9] == pytest.approx(2 / 14)  # (P-1)/(vM+P-1)


def test_the_textbook_grid_of_each_order():
    for p_, m in ((2, 4), (4, 4), (4, 8), (3, 5)):
        for kind in ("gpipe", "1f1b"):
            if kind == "gpipe":
                orders = tuple(tuple([("F", r, k) for k in range(m)] + [("B", r, k) for k in range(m)])
                               for r in range(p_))
            else:
                orders = tuple(tuple(megatron_order(p_, m, r)) for r in range(p_))
            cells = schedule._simulate(orders, p_, {"F": 10, "B": 20})
            span = max(c[5] for c in cells)
            assert span == (m + p_ - 1) * 30, (p_, m, kind)
            assert 1 - sum(c[5] - c[4] for c in cells) / (p_ * span) == pytest.approx((p_ - 1) / (m + p_ - 1))
    # an order that cannot run (a stage's backward before its forward on the last stage) is no grid
    assert schedule._simulate((( ("B", 0, 0), ("F", 0, 0)),), 1, {"F": 1, "B": 1}) == []


# -- what is not a schedule, and what is kept ---------------------------------------------------------------

def test_an_iteration_whose_messages_are_no_schedule_is_said_so():
    tr, _ = gpipe_sync(2, 4, tf=10, tb=20, iterations=3)
    # iteration 1 lost one backward message on both sides
    drop = [e for e in tr.events if e.get("step") == 1 and e["op"] in ("send", "recv") and
            ((e["op"] == "send" and e["rank"] == 1) or (e["op"] == "recv" and e["rank"] == 0))][-2:]
    tr.events = [e for e in tr.events if e not in drop]
    p = tr.analyze().pipeline
    assert [it[1] for it in p.schedule_iterations] == [0, 2]
    assert "iteration 1 not read as a schedule" in p.schedule_note


def test_a_trace_s_first_computations_are_read(monkeypatch):
    monkeypatch.setattr(schedule, "MAX_ACTIONS", 20)
    p = gpipe_sync(2, 4, tf=10, tb=20, iterations=3)[0].analyze().pipeline
    assert [it[1] for it in p.schedule_iterations] == [0, 1]  # 16 computations each: the second passes 20
    assert "iterations from 2 on are not read" in p.schedule_note


def test_the_schedule_is_in_the_json_and_the_saved_analysis():
    a = gpipe_sync(2, 4, tf=10, tb=20, late={1: 100})[0].analyze()
    d = to_json(a)["pipeline"]
    for key in ("schedule_iterations", "schedule_fraction", "schedule", "stage_idle", "ideal_schedules",
                "schedule_note", "schedule_startup"):
        assert key in d
    first = d["schedule_iterations"][0]
    assert first[:4] == [0, 0, "GPipe", 4] and first[6] == 90 * MS
    assert d["schedule"][0][:5] == [0, 0, 0, "F", 0]
    assert d["bubble_fraction"] == a.pipeline.bubble_fraction  # its meaning kept: blocked over the windows
    back = saved._revive(PipelineStats, orjson.loads(orjson.dumps(a.pipeline)))
    assert back == a.pipeline


def test_a_forward_only_pipeline():
    """Inference through 3 stages (tests/tui/data/pipeline_job.jsonl's kind): forwards only, one window."""
    tr = Trace(3)
    clock = [MS] * 3
    for mb in range(3):
        for s in range(3):
            clock[s] += 10 * MS
            if s < 2:
                end = max(clock[s], clock[s + 1])
                tr.send(s, s + 1, clock[s], end, 64)
                tr.recv(s + 1, s, clock[s + 1], end, 64)
                clock[s] = clock[s + 1] = end
    p = analyze(tr.table()).pipeline
    (it,) = p.schedule_iterations
    assert it[2] == "forward only" and it[3] == 3 and it[8] == pytest.approx(2 / 5)
    assert {c[3] for c in p.schedule} == {"F"} and len(p.schedule) == 9
    assert it[7] == pytest.approx(2 / 5)  # (M+P-1) forwards' time, M of them each stage's
