"""`disttrace report` on normalized .jsonl traces: the text report, --json, exit codes, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from harness import run_disttrace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synth import write_synthetic  # noqa: E402


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "syn.jsonl"
    write_synthetic(path, n_events=6000, n_ranks=64, seed=3)
    return path


def _ev(rank, op, start, end, seq, **kw):
    return {"rank": rank, "op": op, "start_ns": start, "end_ns": end, "group": "world", "group_ranks": [0, 1, 2],
            "group_seq": seq, "bytes": 64, "dtype": "float32", "id": seq, **kw}


@pytest.fixture(scope="module")
def hung(tmp_path_factory) -> Path:
    """Three ranks: a barrier rank 2 is late to by 50 ms, then an all_reduce rank 2 never enters."""
    evs = [_ev(r, "barrier", 1_000_000 * (50 if r == 2 else 0), 51_000_000, 0, site="job.py:5 in main")
           for r in range(3)]
    evs += [_ev(r, "all_reduce", 60_000_000, None, 1, status="unfinished", site="job.py:7 in main") for r in (0, 1)]
    path = tmp_path_factory.mktemp("report") / "hung.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in evs))
    return path


@pytest.mark.slow
def test_text_report_of_a_healthy_trace(synthetic):
    proc = run_disttrace("report", synthetic, "--top", "3")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for section in ("Waits per rank", "Straggler: rank 63", "Collectives by op, group and size",
                    "Collectives that made ranks wait most", "Point-to-point links", "Pipeline: 4 stages",
                    "Alpha-beta model", "busbw (GB/s, median) against message size", "waits per rank (",
                    "No problems found."):
        assert section in out, section
    assert proc.stderr == ""  # no progress bar when stderr is not a terminal
    assert "\x1b[" not in out  # plain text when piped


@pytest.mark.slow
def test_json_report(synthetic):
    proc = run_disttrace("report", synthetic, "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["problems"] == [] and d["pipeline"]["stages"] == [0, 8, 16, 24]
    assert len(d["waits"]) == 64 and d["stragglers"][0]["rank"] == 63
    c = d["collectives"][0]
    assert set(c["start_ns"]) == set(c["wait_ns"]) == {str(r) for r in c["group_ranks"]}
    assert d["links"] and {"src", "dst", "bytes", "messages", "gbps"} <= set(d["links"][0])


@pytest.mark.slow
def test_problems_give_exit_code_1_and_say_what_to_do(hung):
    proc = run_disttrace("report", hung)
    assert proc.returncode == 1, proc.stderr
    assert "hang" in proc.stdout and "rank 2 never did" in proc.stdout and "1 problem(s) found" in proc.stdout
    d = json.loads(run_disttrace("report", hung, "--json").stdout)
    (p,) = d["problems"]
    assert (p["kind"], p["op"], p["group_ranks"], p["group_seq"], p["ranks"]) == ("hang", "all_reduce", [0, 1, 2],
                                                                                   1, [2])
    assert d["waits"] == {"0": 50_000_000, "1": 50_000_000, "2": 0}


@pytest.mark.slow
@pytest.mark.parametrize("args", [("/nonexistent/trace",), ("EMPTY",), ("GOOD", "--top", "0")])
def test_bad_input_is_one_line_and_exit_2(args, tmp_path, hung):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not json\n")
    args = [str(empty) if a == "EMPTY" else str(hung) if a == "GOOD" else a for a in args]
    proc = run_disttrace("report", *args)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("disttrace report: error:"), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_report_and_analysis_import_neither_torch_nor_textual():
    code = ("import sys, disttrace.tracer.commands.report, disttrace.tracer.analysis; "
            "print(sorted(m for m in ('torch', 'textual') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_render_shows_collectives_far_slower_than_the_model():
    import io

    from rich.console import Console

    from disttrace.tracer.analysis import analyze
    from disttrace.tracer.commands.report import render
    from synthetic import MS, Trace

    tr = Trace(2)
    t0 = 0
    for k in range(40):
        nbytes = 1 << (10 + k % 10)
        dur = 50_000 + nbytes // 2 + (9 * (50_000 + nbytes // 2) if k == 37 else 0)
        tr.coll("all_reduce", {0: t0, 1: t0}, t0 + dur, nbytes=nbytes)
        t0 += dur + MS
    out = io.StringIO()
    render(analyze(tr.table()), 5, Console(file=out, width=140))
    text = out.getvalue()
    assert "Collectives far slower than the model and beyond the job's own spread (1)" in text
    assert "all_reduce #37" in text
    assert "2.00 GB/s" in text and "50.0 µs" in text  # the fitted 1/beta and alpha


def test_jitter_within_the_job_s_own_spread_is_not_flagged_slow():
    """A model fitted on the trace, latency only where every message has one size, stands below ordinary jitter: an
    instance is flagged only past the spread of its op and size, and the table shows that spread."""
    import random

    from disttrace.tracer.analysis import analyze
    from synthetic import MS, Trace

    rng = random.Random(0)
    tr = Trace(2)
    t0 = 0
    for k in range(40):  # one size, times from 50 µs to 4 ms: jitter, 4-80x the fitted latency
        dur = int(rng.uniform(0.05, 4) * MS)
        if k == 30:
            dur = 60 * MS  # beyond it
        tr.coll("all_reduce", {0: t0, 1: t0}, t0 + dur, nbytes=4096)
        t0 += dur + MS
    a = analyze(tr.table())
    assert [c.group_seq for c in a.collectives if c.slow] == [30]


@pytest.mark.slow
def test_the_report_says_each_iteration_s_schedule_and_bubble(tmp_path):
    """A pipeline's schedule read from the trace: its kind, the bubble from the first forward to the last backward
    (start-up waits apart) beside the textbook's, iteration by iteration."""
    from test_schedule import gpipe_sync

    tr, _ = gpipe_sync(2, 4, tf=10, tb=20, late={1: 100})
    path = tmp_path / "gpipe.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"v": 1, **e}) + b"\n" for e in tr.events))
    proc = run_disttrace("report", path)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "Schedule read from the trace: GPipe, 2 iteration(s)" in out, out
    assert "start-up waits apart: 20.0% (mean; 20.0% to 20.0%), the textbook's 20.0%" in out, out
    assert "Bubble per iteration" in out and "90.00 ms" in out  # iteration 0's start-up wait, cut



@pytest.mark.parametrize("width", [80, 120])
def test_the_memory_section_s_tables_fit_80_and_120_columns(width, tmp_path):
    """The memory section of a real --memory trace (tests/tui/data/mem_ddp: DDP, 2 ranks, 30 steps): every table
    within the width, no cell cut or folded (each rank's peak with its op and line whole on its row), the steps'
    ends in one unit (its title's) with as many steps as the width holds."""
    import io
    import shutil

    from rich.console import Console

    from disttrace.tracer.analysis import analyze, memory_report
    from disttrace.tracer.commands.report import rich_table
    from disttrace.tracer.commands.report_memory import render
    from disttrace.tracer.data.load import load_trace, read_memory

    shutil.copytree(Path(__file__).parents[1] / "tui" / "data" / "mem_ddp", tmp_path / "t")
    a = analyze(load_trace(str(tmp_path / "t"), cache=False))
    out = io.StringIO()
    render(Console(file=out, width=width), memory_report(read_memory(a.table), a), 10, rich_table)
    lines = out.getvalue().splitlines()
    tables = [line.rstrip() for line in lines if line[:1] in "┏┃┡│└"]
    assert tables and max(map(len, tables)) <= width
    rows = [line.split("│")[1:-1] for line in tables if line.startswith("│")]
    assert [c.strip() for c in rows[0]] == ["0", "1MiB", "1MiB", "2.01MiB", "9.07MiB", "1.07MiB", "1MiB"]
    assert [c.strip() for c in rows[2]][:2] + [c.strip() for c in rows[2]][3:] == \
        ["0", "13.6 MiB", "aten.div.Tensor", "mem_train.py:56"]
    ends = next(i for i, line in enumerate(lines) if line.startswith("Bytes held at the steps' ends, MiB"))
    assert "MiB" not in "".join(lines[ends + 1:])  # (in the title, not in the cells)
    shown = len(lines[ends + 2].split("┃")) - 5  # (rank, start, peak; the edges)
    assert shown == (12 if width == 120 else 7)


def test_report_follow_reports_memory_and_its_leak_as_report_does(tmp_path, capsysbinary):
    """`report --follow` on a --memory trace (tests/tui/data/mem_ddp: its job has ended: one report) has the memory
    key and the leak among its problems, and exits 1 for it, as `report` does."""
    import shutil

    import orjson

    from disttrace.tracer.cli import main

    shutil.copytree(Path(__file__).parents[1] / "tui" / "data" / "mem_ddp", tmp_path / "t")
    assert main(["report", "--follow", "--json", str(tmp_path / "t")]) == 1
    doc = orjson.loads(capsysbinary.readouterr().out.splitlines()[-1])
    assert "memory" in doc and [p["kind"] for p in doc["problems"]].count("leak") == 1, doc["problems"]
