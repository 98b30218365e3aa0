"""What the views show, worked out without Textual (tui/model/: charts.py, waits.py, links.py, moved.py,
schedule.py, ring.py, critical.py), each against the analysis' results read the slow way (a view of each instance),
on hand-timed traces."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from synthetic import MS, Trace

from disttrace.tracer.analysis import analysed, analyze, compare
from disttrace.tracer.analysis.core.results import CriticalPath, Link, PathPart
from disttrace.tui.model import charts
from disttrace.tui.model.charts import bandwidth_lines, durations_of
from disttrace.tui.model.critical import shares
from disttrace.tui.model.links import fastest, matrix
from disttrace.tui.model.moved import moved
from disttrace.tui.model.ring import p2p_exchange
from disttrace.tui.model.schedule import ScheduleModel
from disttrace.tui.model.store import TraceStore
from disttrace.tui.model.waits import held_longest, most_waited, step_rows

from tui_helpers import PIPELINE_JOB, ev, fixture_store, steps_store, store_of


def sizes_trace() -> TraceStore:
    """2 ranks: all_reduce of 4 KiB (5 of them) and 1 MiB (4), a broadcast of 1 MiB (3), each taking its own time
    after rank 1 arrives 1 ms after rank 0."""
    tr = Trace(2)
    t = 0
    for op, nbytes, ms in [("all_reduce", 4096, d) for d in (1, 2, 3, 2, 9)] + \
                          [("all_reduce", 1 << 20, d) for d in (4, 5, 6, 20)] + \
                          [("broadcast", 1 << 20, d) for d in (3, 3, 7)]:
        tr.coll(op, {0: t, 1: t + MS}, t + MS + ms * MS, nbytes=nbytes, root=0 if op == "broadcast" else None)
        t += 30 * MS
    table = tr.table()
    table.sort()
    return TraceStore(table, analyze(table))


def test_bandwidth_is_the_median_of_each_op_and_size_of_the_analysis_busbw():
    s = sizes_trace()
    lines = bandwidth_lines(s.analysis.collectives)
    assert [(line.op, line.sizes) for line in lines] == [("all_reduce", [4096, 1 << 20]), ("broadcast", [1 << 20])]
    colls = list(s.analysis.collectives)
    for line in lines:
        for size, measured in zip(line.sizes, line.measured):
            mine = [c for c in colls if c.op == line.op and c.bytes == size]
            assert measured == statistics.median(c.busbw_gbps for c in mine)
        # at the model's time: the busbw scaled by the time taken over the model's
        for size, at_model in line.model:
            mine = [c for c in colls if c.op == line.op and c.bytes == size]
            assert at_model == pytest.approx(statistics.median(c.busbw_gbps * c.duration_ns / c.model_ns
                                                               for c in mine))
        assert [b for b, _ in line.model] == line.sizes


def test_no_measured_bandwidth_draws_no_line():
    s = store_of([ev(0, "barrier", 0, 100, group_seq=0, bytes=0), ev(1, "barrier", 50, 100, group_seq=0, bytes=0)])
    assert bandwidth_lines(s.analysis.collectives) == []


def test_durations_of_one_op_in_one_unit_and_the_axis_from_the_shortest():
    s = sizes_trace()
    d = durations_of(s.table, "broadcast")
    # rank 0 takes 1 ms more than rank 1 (it arrived 1 ms sooner): 4, 4, 8 ms and 3, 3, 7 ms
    assert d.unit == "ms" and d.step == 1 and sorted(d.values) == [3, 3, 4, 4, 7, 8]
    (lo, hi), ticks = d.axis(bins=10)
    assert (lo, hi) == pytest.approx((3 - 0.25, 8 + 0.25)) and ticks == [3, 4.25, 5.5, 6.75, 8]
    assert len(durations_of(s.table, None).values) == len(s.table)
    assert durations_of(s.table, "send") is None
    same = durations_of(store_of([ev(0, "barrier", 0, 100, group_seq=0)]).table, None)
    assert same.values == [100] and same.axis(bins=10) is None


def test_a_huge_trace_is_sampled(monkeypatch):
    s = sizes_trace()
    monkeypatch.setattr(charts, "HIST_EVENTS", 8)  # 24 events: every third
    d = durations_of(s.table, None)
    t = s.table
    assert d.step == 3 and d.values == [(t.end_ns[i] - t.start_ns[i]) / MS for i in range(0, len(t), 3)]


def test_most_waited_collectives_and_where_each_is_shown():
    # rank 0 waits 200 ns at the all_reduce (rank 1 arrives last), 50 at the barrier
    s = store_of([ev(0, "all_reduce", 100, 400, group_seq=0), ev(1, "all_reduce", 300, 400, group_seq=0),
                  ev(0, "barrier", 2000, 2100, group_seq=1, bytes=0), ev(1, "barrier", 2050, 2100, group_seq=1,
                                                                         bytes=0)])
    rows, waited = most_waited(s.analysis)
    t = s.table
    assert [(c.op, c.total_wait_ns, c.longest, c.longest_ns, c.last_arrival) for c in rows] == [
        ("all_reduce", 200, 0, 200, 1), ("barrier", 50, 0, 50, 1)]
    assert waited == 2
    assert all(t.rank[c.row] == 1 and t.op[c.row] == c.op for c in rows)  # the last arrival's event
    top, waited = most_waited(s.analysis, top=1)
    assert [c.op for c in top] == ["all_reduce"] and waited == 2  # (how many waited: beyond the rows shown)
    assert held_longest(s.analysis, 1) == rows[0].row
    assert held_longest(s.analysis, 0) is None  # it arrived last nowhere


def test_each_step_is_shown_at_its_late_rank_first_event():
    s = steps_store()
    a, t = s.analysis, s.table
    rows = step_rows(a, t)
    assert sorted(rows) == [st.index for st in a.steps]
    step_of = list(a.step_of)
    for st in a.steps:
        mine = [i for i in range(len(t)) if step_of[i] == st.index]
        want = mine[0] if st.late_rank is None else next(i for i in mine if t.rank[i] == st.late_rank)
        assert rows[st.index] == want, st
    # rank 1 was late in steps 2 and 4 (the analysis' late_rank): shown there, not at the step's first event
    assert [st.index for st in a.steps if st.late_rank == 1] == [2, 4]
    assert t.rank[rows[2]] == 1 and rows[2] != step_of.index(2)


def test_the_link_matrix_and_the_fastest_links():
    links = [Link(0, 1, 100, 1, 10, 2.0), Link(1, 2, 300, 1, 10, None), Link(2, 0, 50, 1, 10, 5.0)]
    m = matrix(links)
    assert m.ranks == [0, 1, 2] and m.most_bytes == 300 and m.by[(1, 2)] is links[1]
    assert fastest(links) == [links[2], links[0], links[1]] and fastest(links, 1) == [links[2]]


def test_busy_time_of_each_rank_in_an_iteration():
    model = ScheduleModel(fixture_store(PIPELINE_JOB))
    assert model
    for n in range(len(model.iterations)):
        busy = model.busy_of(n)
        for r in {c.rank for c in model.cells[n]}:
            assert busy[r] == sum(c.end_ns - c.start_ns for c in model.cells[n] if c.rank == r)


def dp(seed: int, late_ms: float = 0.0, steps: int = 4) -> Trace:
    """3 ranks, `steps` steps of ~10 ms compute then an all_reduce; rank 2 computes late_ms longer."""
    import random

    rng = random.Random(seed)
    tr = Trace(3)
    t = 0
    for _ in range(steps):
        starts = {r: t + int((10 + rng.uniform(-0.3, 0.3) + (late_ms if r == 2 else 0)) * MS) for r in range(3)}
        t = max(starts.values()) + 2 * MS
        tr.coll("all_reduce", starts, t, nbytes=4096, site="train.py:40 in step")
    return tr


def test_what_moved_is_the_comparison_s_ranked_by_the_move():
    sides = []
    for tr, label in ((dp(1), "A"), (dp(2, late_ms=5), "B")):
        table = tr.table()
        table.sort()
        sides.append(analysed(table, label))
    d = compare(*sides)
    b = d.b_side
    found = moved(d, b.table, b.analysis)
    ops = np.flatnonzero(d.ops.moved).tolist()
    steps = [k for k, m in d.ops.step_moved.items() if m]
    assert ops and steps and len(found) == len(ops) + len(steps)
    assert [abs(m.delta_ns) for m in found] == sorted((abs(m.delta_ns) for m in found), reverse=True)
    step_of = list(b.analysis.step_of)
    for m in found:
        if m.op is None:  # a step: its length beside A's median, shown at its first row
            assert m.a_median_ns == d.a.median_ns and m.row == step_of.index(m.step)
            assert m.b_ns == next(y for k, _, y in d.steps if k == m.step)
        else:
            assert m.row in ops and m.op == b.table.op[m.row] and m.rank == b.table.rank[m.row]
            assert m.a_median_ns == int(d.ops.a_median[m.row]) and m.b_ns == b.table.duration_ns(m.row)
            assert m.step == step_of[m.row] and m.site == "train.py:40"


def test_a_hand_written_exchange_by_message_order_and_its_bytes():
    from types import SimpleNamespace as M

    # two rounds among ranks 0-2 (orders 4 and 7), and a message to rank 5, outside them
    msgs = [M(src=0, dst=1, order=4, bytes=10, send=1), M(src=1, dst=2, order=4, bytes=20, send=2),
            M(src=2, dst=0, order=7, bytes=30, send=3), M(src=0, dst=5, order=9, bytes=99, send=4)]
    steps, step_of = p2p_exchange(msgs, [0, 1, 2])
    assert step_of == {4: 0, 7: 1} and [s.total_bytes for s in steps] == [30, 30]
    assert [(t.src, t.dst) for t in steps[0].transfers] == [(0, 1), (1, 2)]  # positions among the ranks


def test_a_path_s_shares_of_compute_comm_and_wait():
    parts = [PathPart(0, "compute", 60, 0), PathPart(1, "comm", 30, 60), PathPart(1, "wait", 10, 90),
             PathPart(0, "compute", 0, 100)]
    assert shares(CriticalPath(3, 100, parts)) == {"compute": 60.0, "comm": 30.0, "wait": 10.0}
    assert shares(CriticalPath(0, 0, [])) == {"compute": 0.0, "comm": 0.0, "wait": 0.0}


def test_run_chart_draws_the_straggler_among_at_most_six_ranks(tmp_path):
    """tui/model/run.py: a rank's series per aligned window, the straggler among the ranks drawn."""
    from agg_files import simulate
    from disttrace.tui.model.run import SERIES, run_chart, run_of

    simulate(str(tmp_path), world=8, steps=60, slow=(7, 20, 40.0))
    whole = run_of([str(tmp_path)], None)
    c = run_chart(whole)
    assert len(c.series) == SERIES and 7 in c.series and c.xs == [0, 10, 20, 30, 40, 50] and c.unit == "ms"
    assert c.ticks == [(0, "0"), (10, "10"), (20, "20"), (30, "30"), (40, "40"), (50, "50")]
    assert c.series[0][-1] > 40 > c.series[7][-1] and "6 of 8 ranks shown" in c.lines[0]
    assert "rank 7 from step 20 on" in c.sentence
    assert run_of([str(tmp_path / "none")], None) is None


def test_memory_figures_of_a_ddp_job_with_a_leak_and_an_extra_buffer(tmp_path, monkeypatch):
    """tui/model/memory.py on a real --memory trace (tests/tui/data/mem_ddp): the run's peak on the leaking rank
    at its last step with its op and line, the leak and the imbalance said, the step's breakdown per rank beside
    the formula's prediction, the formula's lines; the steps' starts and the chosen step on the chart."""
    from disttrace.tui.loading import load_store
    from disttrace.tui.model.memory import COLUMNS, memory_of, memory_view
    from tui_helpers import memory_trace

    monkeypatch.chdir(tmp_path)
    store, _ = load_store([memory_trace(tmp_path)])
    f = memory_view(*memory_of(store), store.t0)
    assert f.lines[0] == "▲ peak 25.6 MiB on rank 1 in step 29: aten.div.Tensor at mem_train.py:56", f.lines
    assert f.lines[1] == "leak: rank 1 from step 20 (activations); imbalance: rank 0 +4.0 MiB activations"
    assert f.ranks == [0, 1] and f.breakdown_title == "step 1"
    rows = {name: dict(zip(COLUMNS, values)) for name, values in f.breakdown}
    assert [rows[r]["params"] for r in ("rank 0", "rank 1", "formula")] == ["1MiB"] * 3
    assert rows["rank 0"]["activ."] == "9.07MiB" and rows["rank 1"]["activ."] == "1.07MiB"
    assert rows["formula"]["optim."] == "2.01MiB" and rows["formula"]["activ."] == ""
    assert rows["rank 0"]["outside"].endswith("MiB") and rows["rank 0"]["peak"] == "13.6MiB"
    assert f.formula[0].startswith("step 1 (first steady; [ ] another): peak 13.6MiB on rank 0 @")
    assert f.formula[0].endswith(", aten.div.Tensor at mem_train.py:56")
    assert f.formula[1] == "DDP: (4 + 4 + 8)Ψ; Ψ = 263,168 values, 4 B each; K = 8, N = 2"
    assert f.formula[2] == "measured/predicted: params 1.00, grads 1.00, optimizer 1.00"
    c = f.chart
    assert sorted(c.series) == [0, 1] and c.y_unit == "MiB" and len(c.starts) == 30
    assert [label for _, label in c.ticks] == [str(s) for s in range(0, 30, 4)]
    assert c.chosen == (c.starts[1], c.starts[2]) and c.peak[1] == pytest.approx(25.6, abs=0.05)
    # (from the model's making: the process group's start, 1.7 s before, all zeros, is left out)
    assert c.x_unit == "s" and min(min(xs) for xs, _ in c.series.values()) > -0.01
