"""The viewer's model (no Textual): level of detail, viewport, replay stepping, ring schedules, narration."""

from __future__ import annotations

import json

import pytest

from disttrace.tracer.analysis import describe
from disttrace.tracer.errors import TraceError
from disttrace.tui.model import viewport
from disttrace.tui.model.narration import load_narration
from disttrace.tui.model.replay import parse_goto, row_at_time, search, step_collective, step_event
from disttrace.tui.model.ring import p2p_steps, ranks_in, ring_plan
from disttrace.tui.model.store import CAT_BARRIER, CAT_COLLECTIVE, CAT_P2P

from tui_helpers import PIPELINE_JOB, TUI_JOB, detail_text, ev, fixture_store, store_of


def two_rank_store():
    # rank 0 arrives at 100, rank 1 at 300: rank 0 waits 200 of its [100, 400) all_reduce
    return store_of([
        ev(0, "all_reduce", 100, 400, group_seq=0),
        ev(1, "all_reduce", 300, 400, group_seq=0),
        ev(0, "send", 1000, 1100, peer=1, group_ranks=[0, 1]),
        ev(1, "recv", 900, 1100, peer=0, group_ranks=[0, 1]),
        ev(0, "barrier", 2000, 2100, group_seq=1, bytes=0),
        ev(1, "barrier", 2050, 2100, group_seq=1, bytes=0),
    ])


def test_lane_coverage_and_waiting_part():
    s = two_rank_store()
    lane0 = s.rows[s.rank_index[0]].lane
    cov = lane0.coverage(0, 3000)
    assert cov[CAT_COLLECTIVE] == 300 and cov[CAT_P2P] == 100 and cov[CAT_BARRIER] == 100
    assert cov[0] == 200 + 50  # waiting: 200 in the all_reduce, 50 in the barrier (rank 1 came 50 ns later)
    # a window cutting through the all_reduce: [250, 350) is 100 ns of it, of which [250, 300) is waiting
    cov = lane0.coverage(250, 350)
    assert cov[CAT_COLLECTIVE] == 100 and cov[0] == 50
    c = lane0.cell(120, 200)  # fully inside the waiting part
    assert c.busy == 1.0 and c.waiting and c.cat == CAT_COLLECTIVE
    c = lane0.cell(320, 390)  # the transfer part
    assert c.busy == 1.0 and not c.waiting
    c = lane0.cell(500, 900)  # compute gap between ops
    assert c.row == -1 and c.inside
    assert lane0.cell(5000, 6000).inside is False  # after the last event


def test_an_async_op_waiting_for_a_late_rank_is_drawn_and_said_as_waiting():
    # DDP's bucket all_reduce: async, no wait() from Python; rank 1 arrives 50 after rank 0
    s = store_of([
        ev(0, "all_reduce", 100, 160, group_seq=0, async_op=True),
        ev(1, "all_reduce", 150, 160, group_seq=0, async_op=True),
    ])
    row0 = next(i for i in range(s.n_events) if s.table.rank[i] == 0)
    assert s.wait_ns[row0] == 50
    assert s.rows[s.rank_index[0]].lane.coverage(0, 200)[0] == 50  # the lane draws those 50 as waiting
    assert describe(s.analysis, row0).startswith("rank 0 waited 50 ns in all_reduce #0")  # the status line
    assert "50ns (wait_at_nxn)" in detail_text(s, row0)


@pytest.mark.slow  # (1,000 events analysed, each a step of its own: the attribution's per-step work)
def test_lod_cell_standing_for_many_events_still_shows_communication():
    # 1,000 one-ns collectives spread over 100,000 ns: a cell standing for 250 of them must still show them
    events = [ev(0, "all_reduce", 100 * i, 100 * i + 1, group_seq=i, group_ranks=[0]) for i in range(1_000)]
    s = store_of(events)
    cells = s.rows[0].lane.cells(s.t0, s.span_ns / 4, 4)
    assert all(c.row >= 0 and c.cat == CAT_COLLECTIVE for c in cells)
    assert all(0.005 < c.busy < 0.02 for c in cells)  # 1% busy, not rounded away


def test_overlapping_async_ops_on_one_rank():
    # an async all_reduce [0, 1000) waited on later, with two sends issued meanwhile on the same rank
    s = store_of([
        ev(0, "all_reduce", 0, 1000, group_seq=0, group_ranks=[0], async_op=True, wait_start_ns=900,
           wait_end_ns=1000),
        ev(0, "send", 100, 200, peer=1),
        ev(0, "send", 300, 400, peer=1),
        ev(1, "recv", 100, 200, peer=0),
        ev(1, "recv", 300, 400, peer=0),
    ])
    lane = s.rows[s.rank_index[0]].lane
    cells = lane.cells(s.t0, 50, 20)  # 50 ns cells over [0, 1000)
    assert all(c.row >= 0 for c in cells)  # the async op covers every cell, even after the sends ended
    late = cells[12]  # [600, 650): only the all_reduce runs there
    assert s.table.op[late.row] == "all_reduce" and late.busy > 0


def test_viewport_zoom_keeps_anchor_and_clamps():
    span = 1_000_000
    assert viewport.window_ns(span, 0) == span and viewport.window_ns(span, 3) == span / 8
    z, off = viewport.zoom_to(span, 0, 0, 2, anchor_ns=500_000)
    assert z == 2 and off == 500_000 - 0.5 * 250_000
    assert viewport.clamp_offset(span, 2, 10**9) == span - 250_000
    assert viewport.clamp_offset(span, 2, -5) == 0
    assert viewport.follow(span, 2, 0, 900_000) > 0  # brings t into the window
    assert viewport.nice_tick(1000.0) == 20_000  # >= 12 cells of 1 µs -> 20 µs
    assert viewport.max_zoom(1000, 100) == 3


def test_stepping_events_and_collectives():
    s = two_rank_store()
    assert step_event(s, -1, 1) == 0 and step_event(s, 0, -1) == -1 and step_event(s, -1, -1) == -1
    assert step_event(s, s.n_events - 1, 1) == s.n_events - 1
    t = s.table
    first = step_collective(s, -1, 1)
    assert t.op[first] == "all_reduce" and t.rank[first] == 0  # earliest arrival of the first collective
    second = step_collective(s, first, 1)
    assert t.op[second] == "barrier" and t.rank[second] == 0
    assert step_collective(s, second, 1) == second  # no further collective: stays
    assert step_collective(s, second, -1) == first


def test_partner_and_same_collective_on_other_rank():
    s = two_rank_store()
    t = s.table
    send = next(i for i in range(len(t)) if t.op[i] == "send")
    recv = s.partner(send)
    assert t.op[recv] == "recv" and t.rank[recv] == 1 and s.partner(recv) == send
    ar0 = next(i for i in range(len(t)) if t.op[i] == "all_reduce" and t.rank[i] == 0)
    ar1 = s.same_collective_next(ar0)
    assert t.op[ar1] == "all_reduce" and t.rank[ar1] == 1 and s.same_collective_next(ar1) == ar0
    assert s.wait_ns[ar0] == 200 and s.wait_ns[ar1] == 0
    assert s.wait_ns[recv] == 100  # recv posted at 900, send started at 1000: late sender


def test_goto_and_search():
    s = two_rank_store()
    t = s.table
    row = parse_goto(s, "1µs")  # t0 is 100: 1100 ns is after the send (1000) began
    assert t.start_ns[row] <= s.t0 + 1000 < t.start_ns[row + 1]
    assert parse_goto(s, "#2") == 2 and parse_goto(s, "3") == 3
    with pytest.raises(ValueError):
        parse_goto(s, "#99")
    with pytest.raises(ValueError):
        parse_goto(s, "soon")
    assert row_at_time(s, 0) == 0
    hit = search(s, "barrier rank=1", -1)
    assert t.op[hit] == "barrier" and t.rank[hit] == 1
    assert search(s, "all_to_all", 0) is None


def test_ring_all_reduce_schedule_and_bytes():
    n, k = 4, 4096
    plan = ring_plan("all_reduce", k, n)
    assert plan.n_steps == 2 * (n - 1) and plan.chunk_bytes == k // n
    assert plan.per_rank_bytes == 2 * (n - 1) * k // n
    everyone = (1 << n) - 1
    rs_end = plan.state(n - 2)  # after reduce-scatter, rank r owns the fully reduced chunk r+1
    for r in range(n):
        assert rs_end[r][(r + 1) % n] == everyone
        assert sum(1 for c in range(n) if rs_end[r][c] == everyone) == 1
    assert all(c == everyone for row in plan.state(plan.n_steps - 1) for c in row)
    # step 0: rank r sends its chunk r to r+1, which then holds ranks {r, r+1} in it
    assert [(t.src, t.dst, t.chunk) for t in plan.step(0).transfers] == [(r, (r + 1) % n, r) for r in range(n)]
    assert ranks_in(plan.state(0)[1][0]) == [0, 1]
    assert plan.step(n - 1).phase == "all-gather" and not plan.step(n - 1).transfers[0].reduce
    with pytest.raises(IndexError):
        plan.step(plan.n_steps)


def test_ring_reduce_scatter_and_all_gather():
    rs = ring_plan("reduce_scatter", 4096, 4)
    assert rs.n_steps == 3 and rs.per_rank_bytes == 3 * 1024
    assert all(rs.state(2)[r][r] == 0b1111 for r in range(4))
    ag = ring_plan("all_gather", 1024, 4)
    assert ag.n_steps == 3 and ag.chunk_bytes == 1024 and ag.per_rank_bytes == 3 * 1024
    final = ag.state(2)
    assert all(final[r][c] == 1 << c for r in range(4) for c in range(4))  # everyone has every rank's chunk
    assert ag.state(-1)[2] == [0, 0, 1 << 2, 0]
    big = ring_plan("all_reduce", 64 << 20, 64)  # a 64-rank ring: 126 steps, computed on demand
    assert big.n_steps == 126 and big.per_rank_bytes == 126 * (1 << 20)
    assert all(c == (1 << 64) - 1 for c in big.state(125)[17])
    with pytest.raises(ValueError):
        ring_plan("broadcast", 10, 4)


def test_p2p_ring_from_the_recorded_messages():
    s = fixture_store()
    steps = p2p_steps(s.analysis.p2p, [0, 1, 2, 3])
    assert len(steps) == 1  # one message on each link of the hand-written ring
    assert sorted((t.src, t.dst) for t in steps[0].transfers) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert all(t.bytes == 64 * 1024 * 4 for t in steps[0].transfers)


def test_narration(tmp_path):
    s = two_rank_store()
    (tmp_path / "narration.json").write_text(json.dumps({
        "title": "T", "intro": "before", "summary": "done",
        "steps": [{"match": {"op": "barrier", "rank": 1}, "text": "rank 1 at the barrier"},
                  {"match": {"op": "barrier"}, "text": "a barrier"}]}))
    n = load_narration([str(tmp_path)])
    t = s.table
    b0 = next(i for i in range(len(t)) if t.op[i] == "barrier" and t.rank[i] == 0)
    b1 = next(i for i in range(len(t)) if t.op[i] == "barrier" and t.rank[i] == 1)
    assert n.text_for(t, -1) == "before"
    assert n.text_for(t, b0) == "a barrier" and n.text_for(t, b1) == "rank 1 at the barrier"
    assert n.text_for(t, 0) == ""
    (tmp_path / "narration.json").write_text("{not json")
    with pytest.raises(TraceError):
        load_narration([str(tmp_path)])
    assert load_narration([str(tmp_path / "missing")]) is None


def test_glyph_keys_say_what_columns_say():
    """The timeline draws from Lane.glyph_keys: the same cells as Lane.columns, one int a cell."""
    from disttrace.tui.model.lod import BLANK_KEY, GAP_KEY

    for path in (TUI_JOB, PIPELINE_JOB):
        s = fixture_store(path)
        codes = s.table.op.codes
        for rr in s.rows:
            for cells_across in (7, 50, 333, 4000):
                ns = s.span_ns / cells_across
                for first in (0, cells_across // 3):
                    cells = rr.lane.columns(s.t0, ns, first, 64)
                    keys = rr.lane.glyph_keys(s.t0, ns, first, 64, codes)
                    want = []
                    for c in cells:
                        if c.row < 0:
                            want.append(GAP_KEY if c.inside else BLANK_KEY)
                        else:
                            level = 8 if c.busy >= 0.8 else max(1, min(7, int(c.busy * 8 + 0.999)))
                            want.append(codes[c.row] * 18 + c.waiting * 9 + level)
                    assert keys == want


@pytest.mark.parametrize("seed", range(40))
def test_every_lane_built_at_once_is_its_rank_s_events_by_definition(seed):
    """Lane.build_all builds every rank's lane in one pass over all of them (numpy): each lane must still be its
    rank's events in table order, with each category's time between two events what those events hold, and
    maxend the running maximum of ends from 0, on times near 0 and at epoch nanoseconds, with hung and damaged
    (end before start) events."""
    import types
    from array import array

    import numpy as np

    from disttrace.tui.model.lod import Lane

    rng = np.random.default_rng(seed)
    n, n_ranks = int(rng.integers(0, 300)), int(rng.integers(1, 9))
    base = [0, 1_764_000_000_000_000_000][seed % 2]
    start = np.sort(rng.integers(0, 10**6, n)) + base
    end = start + rng.integers(-5, 10**5, n)
    end[rng.random(n) < 0.1] = -1  # hung
    rank = rng.integers(0, n_ranks, n)
    table = types.SimpleNamespace(rank=array("i", rank.tolist()), start_ns=array("q", start.tolist()),
                                  end_ns=array("q", end.tolist()), ranks=dict.fromkeys(range(n_ranks + 1)))
    cats = rng.integers(0, 4, n).astype(np.uint8)
    waits = rng.integers(0, 10**5, n) * int(seed % 3 != 0)  # (some with no waits yet: the bare store's)
    t_end = int(start.max()) + 10 if n else 10
    lanes = Lane.build_all(table, cats.tobytes(), waits.astype(np.int64), t_end)
    assert sorted(lanes) == list(range(n_ranks + 1))  # a rank with a file and no event: an empty lane
    for r, lane in lanes.items():
        rows = np.flatnonzero(rank == r)
        assert list(lane.rows) == rows.tolist()
        ends = np.where(end[rows] == -1, np.maximum(t_end, start[rows]), end[rows])
        assert list(lane.starts) == start[rows].tolist() and list(lane.ends) == ends.tolist()
        assert bytes(lane.cats) == cats[rows].tobytes()
        durs = ends - start[rows]
        held = [np.minimum(waits[rows], durs)] + [np.where(cats[rows] == c, durs, 0) for c in (1, 2, 3)]
        for c in range(4):
            assert len(lane.cum[c]) == len(rows) + 1
            assert np.diff(np.asarray(lane.cum[c])).tolist() == held[c].tolist()
        assert list(lane.maxend) == [max([0, *ends[:i].tolist()]) for i in range(len(rows) + 1)]


def test_running_max_by_starts_again_at_each_segment_even_where_lifting_would_overflow():
    import numpy as np

    from disttrace.tracer.data.table.columns import running_max_by

    rng = np.random.default_rng(0)
    for base, spread in ((0, 10**6), (1_764_000_000_000_000_000, 10**6), (-(1 << 62), 1 << 63)):
        values = (base + rng.integers(0, spread, 500, dtype=np.uint64).astype(np.int64)).astype(np.int64)
        starts = np.unique(np.concatenate(([0], rng.integers(0, 500, 20))))
        out = running_max_by(values, starts)
        bounds = [*starts.tolist(), 500]
        expect = np.concatenate([np.maximum.accumulate(values[a:b]) for a, b in zip(bounds, bounds[1:])])
        assert out.tolist() == expect.tolist()
