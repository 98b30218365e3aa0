"""The whole run over the black box's aggregates (analysis/waits/whole_run.py; docs/ANALYSIS.md, "The whole run's
straggler") on synthetic aggregates (tests/agg_files.py: a data-parallel loop's arithmetic), and its report."""

from __future__ import annotations

import re

import orjson
import pytest

from agg_files import MS, simulate
from disttrace.tracer.analysis import run_straggler_sentence, whole_run, widened
from disttrace.tracer.cli import main
from disttrace.tracer.data.load import read_aggregates


def run_of(tmp_path, **kw):
    simulate(str(tmp_path), **kw)
    return whole_run(read_aggregates(str(tmp_path)))


@pytest.mark.parametrize("world, rank, onset", [(4, 1, 40), (4, 2, 35), (2, 1, 40), (8, 5, 100)])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_straggler_from_step_k_is_named_with_its_onset_and_ms_a_step(tmp_path, world, rank, onset, seed):
    steps = 200 if world == 8 else 60
    r = run_of(tmp_path, world=world, steps=steps, slow=(rank, onset, 40.0), seed=seed,
               jitter_ms=20.0 if world == 8 else 2.0)
    s = r.straggler
    assert s is not None and s.rank == rank and s.unit == "step"
    assert abs(s.onset_step - onset) <= 1, s   # (35: inside its window, from the window's share of the excess)
    assert abs(s.extra_ns - 40 * MS) <= 3 * MS, s
    assert sorted(s.peers) == [q for q in range(world) if q != rank]
    assert f"rank {rank} from step {s.onset_step} on, +" in run_straggler_sentence(r)


def test_a_straggler_from_the_start(tmp_path):
    s = run_of(tmp_path, slow=(3, 0, 40.0)).straggler
    assert (s.rank, s.onset_step) == (3, 0) and abs(s.extra_ns - 40 * MS) <= 3 * MS


@pytest.mark.parametrize("kw", [dict(), dict(world=2), dict(jitter_ms=20.0), dict(world=8, steps=200, jitter_ms=20.0),
                                dict(marked=False), dict(marked=False, world=2)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_straggler_invented_on_a_balanced_run(tmp_path, kw, seed):
    r = run_of(tmp_path, seed=seed, **kw)
    assert r.straggler is None
    assert run_straggler_sentence(r).startswith("No straggler over the whole run")


def test_windows_widened_on_some_ranks_merge_into_the_windows_every_rank_ended(tmp_path):
    """The recorder widens a rank's windows of steps on its own (record/aggregates.py: a job of short steps), to a
    multiple of its width: here rank 2's to 20 steps and rank 3's to 40 after marker 40, ranks 0 and 1 at 10. The
    aligned windows end where every rank ended one (markers 10, 20, 30, 40, 80, 120): the narrower windows merged,
    each rank's time in collectives a step over them kept, and rank 1, 40 ms slower from step 60 on, still named
    there. Without the widening, the same job's windows are 12 of 10 steps."""
    widen = {2: (40, 20), 3: (40, 40)}
    r = run_of(tmp_path / "wide", steps=120, slow=(1, 60, 40.0), widen=widen)
    assert [f + s for f, s in zip(r.aligned_first_step, r.aligned_steps)] == [10, 20, 30, 40, 80, 120]
    assert r.aligned_steps == [10, 10, 10, 10, 40, 40]
    for rank, w in r.windows.items():
        per_step = r.per_unit_ns[rank]
        assert None not in per_step, (rank, per_step)
        # the rank's time in collectives, window rows against aligned windows: the same sum
        assert sum(v * n for v, n in zip(per_step, r.aligned_steps)) == pytest.approx(sum(w.collective_ns), rel=1e-6)
        width = {2: 20, 3: 40}.get(rank, 10)
        assert w.aligned == [0, 1, 2, 3] + [4] * (40 // width) + [5] * (40 // width), (rank, w.aligned)
    s = r.straggler
    assert s is not None and s.rank == 1 and abs(s.onset_step - 60) <= 1 and abs(s.extra_ns - 40 * MS) <= 3 * MS, s
    assert widened(r.windows, r.every) == {2: 20, 3: 40}
    assert ("the black box widened the windows of 2 ranks from 10 steps to up to 40, to keep its aggregates within "
            "50 MB a rank a day") in " ".join(r.notes), r.notes
    plain = run_of(tmp_path / "plain", steps=120, slow=(1, 60, 40.0))
    assert plain.aligned_steps == [10] * 12 and (plain.straggler.rank, plain.straggler.onset_step) == (1, 60)
    assert not any("widened" in n for n in plain.notes), plain.notes


def test_steps_unmarked_windows_by_time_aligned_by_the_clocks(tmp_path):
    """Windows of 1 s of each rank's own clock, the clocks apart by up to 8 ms: the straggler named from the time
    its delay began (step 30: ~3.2 s into the run), per second."""
    r = run_of(tmp_path, marked=False, slow=(1, 30, 40.0), offsets={1: 5 * MS, 2: -3 * MS})
    assert r.by == "seconds" and r.unit == "second" and len(r.aligned_start_ns) == 8
    assert all(w.aligned == list(range(8)) for w in r.windows.values())  # each rank's windows in their place
    s = r.straggler
    assert s is not None and s.rank == 1 and s.onset_step is None
    began = 1_000 * MS + 30 * 107 * MS  # rank 0's clock: 30 steps of ~107 ms from 1 s
    assert abs(s.onset_ns - began) < 250 * MS, s
    assert 200 * MS < s.extra_ns < 350 * MS  # 40 ms of ~147 ms steps: ~270 ms a second
    assert "from 3." in run_straggler_sentence(r) and "a second" in run_straggler_sentence(r)


def test_a_first_window_of_connecting_is_no_onset(tmp_path):
    """Rank 1 late 1.5 s at the first all_reduce (gloo connecting), then slower from step 20: its onset is step
    20's window, not the first (led alone, with a window it did not lead after it)."""
    r = run_of(tmp_path, world=2, steps=120, marked=False, slow=(1, 20, 40.0), first=(1, 1500.0))
    s = r.straggler
    assert s is not None and s.rank == 1 and s.onset_window >= 2, s
    began = 1_000 * MS + 1_500 * MS + 20 * 107 * MS  # rank 0's clock: the first step's wait, then 20 steps
    assert abs(s.onset_ns - began) < 250 * MS, (s.onset_ns - began) / MS


def test_time_and_bytes_per_op_kind(tmp_path):
    r = run_of(tmp_path, world=2, steps=20, jitter_ms=0.0)
    (op,) = r.ops
    assert (op.op, op.count, op.bytes) == ("all_reduce", 2 * 20 * 2, 2 * 20 * ((4 << 20) + 4))
    grad, loss = r.keys
    assert (grad.lo, grad.count, loss.lo, loss.count, loss.total_ns) == (4 << 20, 40, 4, 40, 40 * MS)
    assert op.total_ns == grad.total_ns + loss.total_ns and op.max_ns == grad.max_ns


def test_lost_windows_are_said_and_left_out(tmp_path):
    import numpy as np

    simulate(str(tmp_path), slow=(1, 30, 40.0))
    agg = read_aggregates(str(tmp_path))
    agg.w_lost = np.isin(agg.w_index, [5])
    r = whole_run(agg)
    assert "4 window(s) lost ops" in r.notes[0]
    assert all(r.per_unit_ns[q][5] is None for q in r.ranks)
    assert r.straggler.rank == 1 and r.straggler.onset_step == 30


def test_report_has_a_whole_run_section_and_a_run_key(tmp_path, capsysbinary, monkeypatch):
    simulate(str(tmp_path), slow=(1, 40, 40.0))
    main(["report", "--json", str(tmp_path)])
    doc = orjson.loads(capsysbinary.readouterr().out)
    run = doc["run"]
    assert run["by"] == "steps" and run["ranks"] == [0, 1, 2, 3] and len(run["windows"]["1"]["start_ns"]) == 6
    assert run["straggler"]["rank"] == 1 and run["straggler"]["onset_step"] == 40
    assert run["ops"][0]["op"] == "all_reduce" and run["per_unit_ns"]["1"][0] > 0
    for columns in ("120", "80"):  # (at 80, the chart's title is wider than the plot: plotext would leave it out)
        monkeypatch.setenv("COLUMNS", columns)
        main(["report", str(tmp_path)])
        text = " ".join(capsysbinary.readouterr().out.decode().split())
        assert "Whole run (the black box's aggregates): 4 ranks, 24 windows (every 10 steps)" in text
        assert "Straggler over the whole run: rank 1 from step 40 on, +" in text
        assert "time in collectives a step (ms) per window, ranks 0, 1, 2, 3, against the window's first step" in text


def test_report_follow_has_the_whole_run_too(tmp_path, capsysbinary):
    """`report --follow` on a black-box trace reports its whole run as `report` does (here a job that has ended:
    one report, then the command ends)."""
    simulate(str(tmp_path), slow=(1, 40, 40.0))
    (tmp_path / "run.json").write_bytes(orjson.dumps({"command": ["torchrun"], "exit_code": 0}))
    assert main(["report", "--follow", "--json", str(tmp_path)]) == 0
    doc = orjson.loads(capsysbinary.readouterr().out.splitlines()[-1])
    assert doc["run"]["straggler"]["rank"] == 1 and doc["run"]["straggler"]["onset_step"] == 40
    main(["report", "--follow", str(tmp_path)])
    assert "Straggler over the whole run: rank 1 from step 40 on" in " ".join(capsysbinary.readouterr().out.decode().split())


def test_a_run_whose_aggregates_outgrow_the_day_budget_is_told_the_window_that_keeps_them_under_it(tmp_path):
    """Windows of 0.1 s (`--window 0.1s`) of 3 rows: ~130 MB a rank a day, over the 50 MB budget; the note names the
    --window that keeps them under it (by the same pace: W times as long, W times fewer rows). Windows of 1 s: no
    note. Windows of 10 steps of ~11 ms are as fast, but the recorder widens windows of steps itself: no note."""
    from disttrace.tracer.format import AGG_DAY_BUDGET as DAY_BUDGET

    def notes(path, **kw):
        simulate(str(path), steps=200, **kw)
        return [n for n in whole_run(read_aggregates([str(path)])).notes if "a rank a day" in n]

    (timed,) = notes(tmp_path / "timed", compute_ms=20.0, marked=False, seconds=0.1)
    mb, w = (float(x) for x in re.search(r"grow by ([\d,]+) MB .* --window (\d+)s` keeps", timed).groups())
    assert 3 * DAY_BUDGET / 1e6 > mb > DAY_BUDGET / 1e6 and mb * 0.1 / w < DAY_BUDGET / 1e6, timed
    assert "windows of 0.1 seconds" in timed, timed
    assert notes(tmp_path / "second", compute_ms=20.0, marked=False, seconds=1.0) == []
    assert notes(tmp_path / "fast", compute_ms=5.0) == []


def test_no_run_key_without_aggregates(tmp_path, capsysbinary):
    from synthetic import Trace

    t = Trace(2)
    t.coll("all_reduce", {0: 0, 1: MS}, 2 * MS)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"v": 3, **e}) + b"\n" for e in t.events))
    main(["report", "--json", str(path)])
    assert "run" not in orjson.loads(capsysbinary.readouterr().out)


@pytest.mark.parametrize("marked", [True, False])
def test_a_long_run_s_windows_are_merged_in_the_json_and_its_totals_kept(tmp_path, marked):
    """A run of weeks has hundreds of thousands of windows a rank: `report --json` merges them, consecutive ones
    together, to at most JSON_WINDOWS, keeping every total (ops, time in collectives, steps), the step numbers'
    range, the time a unit where every window had one, and the straggler found at full resolution."""
    from disttrace.tracer.analysis.waits.whole_run import coarsened

    r = run_of(tmp_path, steps=300, every=2, slow=(1, 150, 40.0), marked=marked, seconds=0.2)
    n = len(r.aligned_start_ns)
    c = coarsened(r, most=40)
    k = -(-n // 40)
    assert n > 80 and len(c.aligned_start_ns) == -(-n // k) <= 40
    assert c.straggler == (None if r.straggler is None else
                           type(r.straggler)(**{**r.straggler.__dict__, "onset_window": r.straggler.onset_window // k}))
    assert c.straggler is not None or not marked  # (by steps, rank 1 from step 150 on)
    assert sum(c.aligned_steps) == sum(r.aligned_steps)
    for rank, w in r.windows.items():
        m = c.windows[rank]
        assert len(m.start_ns) < len(w.start_ns)
        assert sum(m.ops) == sum(w.ops) and sum(m.collective_ns) == sum(w.collective_ns)
        assert (m.start_ns[0], m.end_ns[-1]) == (w.start_ns[0], w.end_ns[-1])
        assert [s for s in m.first_step if s >= 0][0] == [s for s in w.first_step if s >= 0][0] if marked else True
        assert max(m.last_step) == max(w.last_step)
        # the time a unit: the units' mean over each merged window (a window's value is its time over its units)
        full = [v for v in r.per_unit_ns[rank][:k]]
        units = r.aligned_steps[:k] if marked else [1] * k
        if None not in full:
            want = sum(v * u for v, u in zip(full, units)) / sum(units)
            assert abs(c.per_unit_ns[rank][0] - want) <= 1
    assert c.notes[-1].startswith(f"report --json: the run's {n:,} aligned windows merged {k} at a time")
    assert coarsened(r, most=n) is r


def test_report_json_s_run_is_bounded(tmp_path, capsysbinary, monkeypatch):
    from disttrace.tracer.analysis.waits import whole_run as module

    simulate(str(tmp_path), steps=200, every=2, slow=(1, 100, 40.0))
    monkeypatch.setattr(module, "JSON_WINDOWS", 25)
    main(["report", "--json", str(tmp_path)])
    run = orjson.loads(capsysbinary.readouterr().out)["run"]
    assert len(run["aligned_start_ns"]) <= 25 and all(len(w["start_ns"]) <= 25 for w in run["windows"].values())
    assert run["straggler"]["rank"] == 1 and abs(run["straggler"]["onset_step"] - 100) <= 2
