"""The analysis kept in the trace store (tracer/analysis/core/saved_analysis.py): opening a trace again gives the very analysis
that computing it gives (every field, every column), from the store; a stale, damaged or what-if analysis is
computed anew, never read."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from array import array
from dataclasses import fields
from pathlib import Path

import orjson
import pytest

from disttrace.tracer.analysis import analyze, to_json
from disttrace.tracer.analysis.core import saved_analysis as saved
from disttrace.tracer.analysis.engine import child_process as apart
from disttrace.tracer.analysis.core.results import Analysis
from disttrace.tracer.analysis.causal.what_if import parse_change
from disttrace.tracer.data import store
from disttrace.tracer.data.table.columns import typecode
from disttrace.tracer.data.load import load_trace

from test_store import age

_COLUMN_TABLES = ("collectives", "p2p")


def _copy(trace, tmp_path, name: str) -> str:
    """A copy of a trace dir (its store left behind), or of an events file in a folder `name`, dated an hour back."""
    out = tmp_path / name
    if os.path.isdir(trace):
        shutil.copytree(trace, out, ignore=shutil.ignore_patterns(store.CACHE_DIR))
    else:
        out.mkdir()
        out = out / os.path.basename(trace)
        shutil.copyfile(trace, out)
    age(str(out))
    return str(out)


def _same_floats(a, b) -> bool:
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


def assert_same_analysis(a: Analysis, b: Analysis) -> None:
    """Every field (the --json leaves some out: compare the objects) and every column of the two tables."""
    for f in fields(Analysis):
        if f.name in ("table",) + _COLUMN_TABLES:
            continue
        assert getattr(a, f.name) == getattr(b, f.name), f.name
    for name in _COLUMN_TABLES:
        ta, tb = vars(getattr(a, name)), vars(getattr(b, name))
        assert set(ta) == set(tb)
        for k, va in ta.items():
            if k in ("events", "_views"):
                continue
            vb = tb[k]
            if hasattr(va, "codes"):
                assert (list(va), va.values) == (list(vb), vb.values), (name, k)
            elif isinstance(va, (array, memoryview)):  # (a saved column is read in place: a memoryview)
                assert typecode(va) == typecode(vb), (name, k)
                assert _same_floats(va, vb) if typecode(va) == "d" else list(va) == list(vb), (name, k)
            elif isinstance(va, bytearray):
                assert bytes(va) == bytes(vb), (name, k)
            else:
                assert va == vb and type(va) is type(vb), (name, k)
    dumps = lambda x: orjson.dumps(to_json(x), option=orjson.OPT_NON_STR_KEYS)  # noqa: E731
    assert dumps(a) == dumps(b)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """Committed traces of real jobs, each a copy old enough to be stored: a DDP job with a straggler (steps, waits,
    causes, a verdict: tests/golden/traces/ddp_slow, a trace dir) and a pipeline (its stats: the pipeline demo's
    events file, tests/tui/data/pipeline_demo.jsonl)."""
    base = tmp_path_factory.mktemp("saved")
    tests = Path(__file__).resolve().parents[2]
    return [_copy(tests / "golden" / "traces" / "ddp_slow", base, "ddp_slow"),
            _copy(tests / "tui" / "data" / "pipeline_demo.jsonl", base, "pipeline_demo")]


@pytest.mark.slow
def test_opening_again_gives_the_saved_analysis_and_it_is_the_analysis(jobs):
    for path in jobs:
        table = load_trace(path)
        computed = analyze(table)
        assert os.path.isfile(table.origin.beside(saved.KIND))
        again = load_trace(path)
        from_store = saved.load(again)
        assert from_store is not None, path
        # its columns read in place from the mapped file, not copied into the process's memory
        assert type(from_store.event_wait_ns) is memoryview and from_store.event_wait_ns.readonly
        assert type(from_store.collectives.rows) is memoryview
        assert_same_analysis(computed, from_store)
        assert_same_analysis(computed, analyze(load_trace(path, cache=False)))  # ... and what parsing gives
        assert analyze(again).steps == computed.steps


@pytest.mark.slow
def test_the_warnings_the_analysis_adds_come_back_with_it(jobs, tmp_path):
    """A rank file that lost one begin record: the analysis warns (problems.py adds it to the table's warnings),
    and the saved analysis brings the same warning back on the next open."""
    path = _copy(jobs[0], tmp_path, "lost_begin")
    rank_file = os.path.join(path, sorted(f for f in os.listdir(path) if f.startswith("rank-"))[1])
    lines = open(rank_file, "rb").read().splitlines(keepends=True)
    begins = [i for i, ln in enumerate(lines) if b'"k":"b"' in ln and b'all_reduce' in ln]
    del lines[begins[len(begins) // 2]]
    with open(rank_file, "wb") as fh:
        fh.writelines(lines)
    age(path)
    table = load_trace(path)
    analyze(table)
    lost = [w for w in table.warnings if "lack its begin record" in w]
    assert lost, table.warnings
    again = load_trace(path)
    assert saved.load(again) is not None
    assert again.warnings == table.warnings


@pytest.mark.slow
def test_every_command_reads_a_saved_analysis_as_it_reads_a_computed_one(jobs, tmp_path):
    """The commands, on a trace opened again, say what they said when they computed its analysis: the saved one's
    columns are the mapped file (memoryviews), and code that treats a column as an array must not meet one there
    (the text report once added one to an array: a traceback on every second report)."""
    from harness import run_disttrace

    for path in jobs:
        copy = _copy(path, tmp_path, os.path.basename(path) + "-cmds")
        commands = [("report",), ("report", "--json"), ("export", "--format", "chrome", "-o", "-"), ("events",)]
        first = [run_disttrace(*cmd[:1], copy, *cmd[1:]) for cmd in commands]
        assert os.path.isfile(load_trace(copy).origin.beside(saved.KIND))
        again = [run_disttrace(*cmd[:1], copy, *cmd[1:]) for cmd in commands]
        for cmd, a, b in zip(commands, first, again):
            assert "Traceback" not in a.stderr + b.stderr, (cmd, b.stderr[-2000:])
            assert (a.returncode, a.stdout) == (b.returncode, b.stdout), cmd


@pytest.mark.slow
def test_a_what_if_is_computed_not_read(jobs):
    path = jobs[0]
    analyze(load_trace(path))
    table = load_trace(path)
    asked = analyze(table, changes=(parse_change("rank:0"),))
    assert [w.change for w in asked.what_if] == ["rank 0 at its peers' pace"]
    assert [w.change for w in saved.load(table).what_if] != ["rank 0 at its peers' pace"]  # the plain one is kept


@pytest.mark.slow
def test_other_analysis_code_or_a_changed_trace_reads_nothing(jobs, monkeypatch):
    path = jobs[0]
    analyze(load_trace(path))
    assert saved.load(load_trace(path)) is not None
    monkeypatch.setattr(saved, "_code_version", lambda: "another version")
    assert saved.load(load_trace(path)) is None
    monkeypatch.undo()
    rank_file = os.path.join(path, sorted(f for f in os.listdir(path) if f.startswith("rank-"))[0])
    os.utime(rank_file, ns=(0, os.stat(rank_file).st_mtime_ns - 10**9))
    assert saved.load(load_trace(path)) is None  # the events store is rebuilt, and the analysis with it
    age(path)


@pytest.mark.slow  # (400 damaged copies, each analysed: a sweep)
def test_a_damaged_saved_analysis_is_never_read(tmp_path):
    """Every byte of a saved analysis flipped in turn (a stride of them): it is read as it was, or not at all."""
    src = os.path.join(os.path.dirname(__file__), "..", "..", "tui", "data", "pipeline_job.jsonl")
    path = str(tmp_path / "pipeline_job.jsonl")
    shutil.copy(src, path)
    age(path)
    computed = analyze(load_trace(path))
    target = load_trace(path).origin.beside(saved.KIND)
    good = open(target, "rb").read()
    read_back = 0
    # the stream's first message, the schema (its metadata holds the analysis' JSON), is a copy that the file
    # reader never reads (it reads the footer's): flips there are read back, however large the JSON
    first = 16 + int.from_bytes(good[12:16], "little")
    for pos in range(0, len(good), max(1, len(good) // 400)):
        bad = bytearray(good)
        bad[pos] ^= 0x5A
        with open(target, "wb") as fh:
            fh.write(bad)
        got = saved.load(load_trace(path))
        if got is not None:  # a byte no reader uses (padding, an unused header field, the first schema's copy)
            read_back += pos >= first
            assert_same_analysis(computed, got)
        assert_same_analysis(computed, analyze(load_trace(path)))  # and the command's analysis is right
        with open(target, "wb") as fh:
            fh.write(good)
    assert saved.load(load_trace(path)) is not None and read_back < 100


def test_nothing_is_saved_without_a_store(tmp_path, monkeypatch):
    src = os.path.join(os.path.dirname(__file__), "..", "..", "tui", "data", "tui_job.jsonl")
    path = str(tmp_path / "tui_job.jsonl")
    shutil.copy(src, path)
    age(path)
    monkeypatch.setenv(store.ENV, "0")
    table = load_trace(path)
    assert table.origin is None
    analyze(table)
    assert sorted(os.listdir(tmp_path)) == ["tui_job.jsonl"]


# -- a large trace's first analysis, made in a child process (tracer/analysis/engine/child_process.py) ----------------------

@pytest.fixture
def children(monkeypatch):
    """Every trace counts as large; the child processes started are recorded."""
    monkeypatch.setattr(apart, "APART_FROM", 1)
    started = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(apart.subprocess, "Popen", Recorded)
    return started


@pytest.mark.slow
def test_a_first_analysis_made_in_a_child_is_the_analysis_mapped_from_the_store(jobs, tmp_path, children):
    path = _copy(jobs[0], tmp_path, "apart")
    labels = []
    a = apart.analyze_apart(load_trace(path), lambda fraction, label: labels.append(label))
    assert len(children) == 1 and children[0].returncode == 0
    assert len(labels) > 3 and labels[-1] == "opened the analysis"  # the child's progress came through
    assert type(a.event_wait_ns) is memoryview  # read in place, as a re-open reads it
    assert_same_analysis(analyze(load_trace(path, cache=False)), a)
    apart.analyze_apart(load_trace(path))  # opened again: the saved one, no child
    assert len(children) == 1


@pytest.mark.slow
@pytest.mark.parametrize("command", [["/nonexistent/python"], [sys.executable, "-c", "import sys; sys.exit(3)"],
                                     [sys.executable, "-c", "print('[0.5, \"no JSON list\"'); print(7)"]])
def test_a_child_that_cannot_run_or_fails_leaves_the_analysis_to_this_process(jobs, tmp_path, children,
                                                                              monkeypatch, command):
    path = _copy(jobs[0], tmp_path, "apart_fails")
    monkeypatch.setattr(apart, "_command", lambda origin: command)
    table = load_trace(path)
    assert_same_analysis(analyze(load_trace(path, cache=False)), apart.analyze_apart(table))
    assert os.path.isfile(table.origin.beside(saved.KIND))  # (saved by this process)


@pytest.mark.slow
def test_quitting_kills_the_child(jobs, tmp_path, children):
    path = _copy(jobs[0], tmp_path, "apart_quit")

    class Quit(Exception):
        pass

    def progress(fraction, label):
        raise Quit

    with pytest.raises(Quit):
        apart.analyze_apart(load_trace(path), progress)
    assert len(children) == 1 and children[0].returncode is not None  # stopped and reaped, not left running


@pytest.mark.slow
def test_a_child_begun_early_is_the_one_followed_and_one_not_followed_is_killed(jobs, tmp_path, children):
    """The viewer begins the child as soon as the store is written (apart.start), and follows it once the timeline
    is drawn: that child's analysis is the analysis, and no second child runs. One never followed (the viewer quit
    first) is stopped and reaped by stop; with a saved analysis there, none is begun."""
    path = _copy(jobs[0], tmp_path, "apart_early")
    table = load_trace(path)
    early = apart.start(table)
    assert early is not None and children == [early]
    a = apart.analyze_apart(table, child=early)
    assert len(children) == 1 and early.returncode == 0
    assert type(a.event_wait_ns) is memoryview  # the child's, read from the store
    assert_same_analysis(analyze(load_trace(path, cache=False)), a)
    assert apart.start(load_trace(path)) is None  # (saved: a re-open reads it, no child)

    path = _copy(jobs[0], tmp_path, "apart_early_quit")
    left = apart.start(load_trace(path))
    apart.stop(left)
    assert left.returncode is not None and left.stdout.closed
    apart.stop(left)  # (twice: nothing more to do)
