"""The trace store (tracer/data/store/): an EventTable written as an Arrow IPC file beside the trace and opened
instead of parsing. Round trips are exact; a stale or damaged store is never used; writing it never fails a
command; docs/USAGE.md's one-liners (pandas, DuckDB) work as written."""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from disttrace.tracer.data import store
from disttrace.tracer.data.store import codec
from disttrace.tracer.data.table.columns import typecode
from disttrace.tracer.data.importers.events_files import iter_jsonl
from disttrace.tracer.data.table.event_table import INT_COLUMNS, OBJ_COLUMNS, STR_COLUMNS
from disttrace.tracer.data.table.rows import extend
from disttrace.tracer.data.load import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from synth import write_synthetic  # noqa: E402

HOUR = 3600 * 10**9


def age(*paths) -> None:
    """Date the files an hour back: a source written less than store.RACY_NS ago is not cached."""
    for p in paths:
        for f in ([os.path.join(p, n) for n in os.listdir(p)] if os.path.isdir(p) else [p]):
            if os.path.isfile(f):
                st = os.stat(f)
                os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns - HOUR))


def runs_of(t) -> list:
    return [(r.number, [(f.path, f.meta, f.ending) for f in r.files]) for r in t.runs]


def assert_same(a, b) -> None:
    """Every column, every table-level item, and the events CLI's output."""
    assert len(a) == len(b)
    for name in INT_COLUMNS + STR_COLUMNS + OBJ_COLUMNS + ("async_op",):
        ca, cb = getattr(a, name), getattr(b, name)
        assert list(ca) == list(cb), name
        if name in INT_COLUMNS:
            assert typecode(ca) == typecode(cb), name
    for name in STR_COLUMNS + ("shape",):
        assert getattr(a, name).values == getattr(b, name).values, name
    assert a.groups == b.groups
    assert list(a.ranks.items()) == list(b.ranks.items())
    assert (a.warnings, a.notes, a.stacks, a.run) == (b.warnings, b.notes, b.stacks, b.run)
    assert runs_of(a) == runs_of(b)
    assert b"".join(iter_jsonl(a)) == b"".join(iter_jsonl(b))


def opened_from_store(t) -> bool:
    return isinstance(t.start_ns, memoryview)  # (the store's columns are its mapped file's)


WRITES: list[str] = []  # the stores written in this test (a first read, or one of a stale or damaged store)


@pytest.fixture(autouse=True)
def _count_writes(monkeypatch):
    real = codec.write_store

    def counted(table, path, *args, **kwargs):
        WRITES.append(path)
        return real(table, path, *args, **kwargs)

    WRITES.clear()
    monkeypatch.setattr(codec, "write_store", counted)


def load_parsing(path, **kwargs):
    """(load_trace(path), whether it parsed the trace and wrote its store, rather than opening the store). Either
    way the table comes from the store: a first read opens what it wrote."""
    n = len(WRITES)
    t = load_trace(path, **kwargs)
    return t, len(WRITES) > n


EVENTS = [
    {"rank": 0, "op": "all_reduce", "start_ns": 10, "end_ns": 20, "group": "world", "group_ranks": [0, 1],
     "group_seq": 0, "bytes": 64, "dtype": "float32", "shape": [4, 4], "in": {"norm": 1.5, "nonfinite": 0},
     "out": {"norm": 3.0, "nonfinite": 0}, "site": "train.py:3 in main — ünïcode", "id": 1, "step": 2},
    {"rank": 1, "op": "all_reduce", "start_ns": 11, "end_ns": None, "status": "error", "group": "world",
     "group_ranks": [0, 1], "group_seq": 0, "error": "RuntimeError: timed out", "shape": [[1, 2], {"a": None}],
     "custom": {"k": [1, 2, 3]}, "async_op": True, "wait_start_ns": 12, "wait_end_ns": 13, "id": 1},
    {"rank": 1, "op": "send", "start_ns": 30, "end_ns": 31, "peer": 0, "tag": 7, "bytes": 8, "id": 2,
     "group": "world", "group_ranks": [0, 1], "in": [1, "x", None]},
]


@pytest.fixture
def events_file(tmp_path):
    """A normalized events file: the synthetic job's events and a few with summaries, errors and unknown keys."""
    return write_events_file(tmp_path / "trace.jsonl")


def write_events_file(path: Path) -> str:
    write_synthetic(str(path), 3000, 16)
    with open(path, "ab") as fh:
        for ev in EVENTS:
            fh.write(orjson.dumps(ev) + b"\n")
        fh.write(b"not json\n")
    age(path)
    return str(path)


def test_round_trip_of_an_events_file_is_exact(events_file):
    parsed = load_trace(events_file, cache=False)
    first, parsed_now = load_parsing(events_file)
    cache = store.cache_path([events_file], None, False)
    assert os.path.isfile(cache) and parsed_now and opened_from_store(first)
    again = load_trace(events_file)
    assert opened_from_store(again)
    assert parsed.in_.any() and parsed.error.any() and parsed.extra.any() and parsed.warnings
    assert_same(parsed, first)
    assert_same(parsed, again)
    assert [again.in_[i] for i in range(-3, 0)] == [parsed.in_[i] for i in range(-3, 0)]
    # the store file opens on its own too
    assert_same(parsed, load_trace(cache))


def test_write_and_read_the_store_directly(events_file, tmp_path):
    parsed = load_trace(events_file, cache=False)
    out = str(tmp_path / "x.arrow")
    store.write_store(parsed, out)
    assert_same(parsed, store.read_store(out))


def _resident_kb(path: str) -> int:
    """How much of the file `path` is mapped into this process and resident (/proc/self/smaps), in KB."""
    kb, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split(" ", 1)[0]:  # a mapping's header line: its address range first
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith("Rss:"):
                kb += int(line.split()[1])
    return kb


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads Linux's /proc/self/smaps")
def test_a_reopened_table_reads_its_columns_in_place(tmp_path):
    """The integer columns are the mapped file's bytes, read-only, copied only if rows are added; opening (its
    checksum included) leaves most of the file out of the process's memory."""
    path = tmp_path / "big.jsonl"
    write_synthetic(str(path), 30_000, 16)
    age(path)
    load_trace(str(path))
    t = load_trace(str(path))
    cache = store.cache_path([str(path)], None, False)
    size_kb = os.path.getsize(cache) // 1024
    assert opened_from_store(t) and isinstance(t.start_ns, memoryview) and t.start_ns.readonly
    assert _resident_kb(cache) < size_kb / 4, (_resident_kb(cache), size_kb)
    with pytest.raises(TypeError):
        t.start_ns[0] = 5
    n, last = len(t), t.start_ns[-1]
    extend(t, [dict(EVENTS[0], start_ns=last + 1, rank=3), dict(EVENTS[2], start_ns=last + 2)])
    assert len(t) == n + 2 and [t.start_ns[-2], t.rank[-2], t.in_[-1]] == [last + 1, 3, EVENTS[2]["in"]]
    assert all(len(getattr(t, c)) == n + 2 for c in INT_COLUMNS + STR_COLUMNS + OBJ_COLUMNS)
    assert load_trace(str(path)).start_ns[-1] == last  # (the file is as it was)


def test_a_changed_source_rebuilds_the_store(events_file):
    load_trace(events_file)
    with open(events_file, "ab") as fh:
        fh.write(orjson.dumps({**EVENTS[2], "start_ns": 40, "id": 3}) + b"\n")
    age(events_file)
    t, parsed_now = load_parsing(events_file)
    assert parsed_now and 40 in t.start_ns
    assert_same(load_trace(events_file, cache=False), load_trace(events_file))
    # the same size, another mtime: stale too
    st = os.stat(events_file)
    os.utime(events_file, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
    assert load_parsing(events_file)[1]
    assert opened_from_store(load_trace(events_file))


def test_profiler_traces_are_stored_too(tmp_path):
    from disttrace.tracer.data.importers.kineto import source_files
    from test_kineto import write_gpu_traces

    # a directory of Kineto traces (one gzipped per odd rank), and one file of them named on its own
    d = write_gpu_traces(str(tmp_path / "prof"), meta_on_kernel=True, seq=True)
    age(d)
    parsed = load_trace(d, cache=False)
    assert parsed.notes and load_parsing(d)[1]
    assert os.path.isfile(store.cache_path([d], None, True))
    again = load_trace(d)
    assert opened_from_store(again)
    assert_same(parsed, again)
    one = next(f for f in source_files(d) if f.endswith(".gz"))
    load_trace(one)
    assert opened_from_store(load_trace(one)) and os.path.isfile(one + store.FILE_SUFFIX)
    assert_same(load_trace(one, cache=False), load_trace(one))
    # the directory's own store and the file's beside it are not traces of it: the directory reads as before
    assert_same(parsed, load_trace(d, cache=False))
    # a rank's trace rewritten (a newer mtime): the store is stale
    os.utime(one, ns=(0, os.stat(one).st_mtime_ns + 10**9))
    assert load_parsing(d)[1]


def test_a_store_is_the_same_however_the_trace_is_spelled(tmp_path, monkeypatch):
    """A trace stored under one spelling of its path is opened under any other (relative, ./, a trailing slash, a
    symlink), not parsed again: `disttrace run` stores /abs/trace and then says "disttrace view trace"; so is a
    trace of several dirs."""
    d, e = tmp_path / "trace", tmp_path / "node1"
    for folder in (d, e):
        folder.mkdir()
        (folder / f"rank-0000{folder == e:d}-h-1.jsonl").write_bytes(
            b'{"k":"meta","v":2,"rank":%d,"world_size":2,"host":"h","pid":1}\n' % (folder == e)
            + b'{"k":"b","i":0,"op":"barrier","t":1000}\n{"k":"e","i":0,"t":2000}\n')
    age(str(d))
    age(str(e))
    (tmp_path / "link").symlink_to(d)
    monkeypatch.chdir(tmp_path)
    t, parsed = load_parsing(str(d))
    assert parsed and opened_from_store(t)
    for spelling in ("trace", "./trace/", "../" + tmp_path.name + "/trace//", "link"):
        t, parsed = load_parsing(spelling)
        assert not parsed and opened_from_store(t), spelling
    assert load_parsing([str(d), str(e)])[1]
    assert not load_parsing(["trace/", "./node1"])[1]


def test_each_run_and_set_of_dirs_has_a_store_of_its_own():
    names = {store.cache_path(["a"], None, True), store.cache_path(["a"], 2, True), store.cache_path(["a", "b"], None, True),
             store.cache_path(["a", "c"], None, True), store.cache_path(["f"], None, False),
             store.cache_path(["f"], 3, False)}
    assert len(names) == 6
    assert store.cache_path(["a"], None, True) == os.path.join("a", ".disttrace-cache", "events-v3.arrow")
    assert store.cache_path(["f"], None, False) == "f.disttrace.arrow"


def test_a_fresh_source_is_not_cached(tmp_path):
    path = str(tmp_path / "fresh.jsonl")
    write_synthetic(path, 500, 8)  # written now: its mtime could still be shared by a write to come
    load_trace(path)
    assert not os.path.exists(store.cache_path([path], None, False))


@pytest.mark.parametrize("damage", ["truncate", "empty", "magic", "garble", "metadata", "other_version"])
def test_a_damaged_store_is_never_trusted(events_file, damage, capsys):
    parsed = load_trace(events_file, cache=False)
    load_trace(events_file)
    cache = store.cache_path([events_file], None, False)
    data = bytearray(Path(cache).read_bytes())
    rng = random.Random(damage)
    if damage == "truncate":
        data = data[: len(data) * 2 // 3]
    elif damage == "empty":
        data = bytearray()
    elif damage == "magic":
        data[:6] = b"XXXXXX"
    elif damage == "garble":  # bytes flipped in the body: the checksum (or Arrow's checks) says so
        for _ in range(20):
            data[rng.randrange(64, len(data) - 64)] ^= 0xFF
    elif damage == "metadata":  # the schema is written twice (a leading copy and the footer's): both
        data = bytearray(data.replace(b'"warnings"', b'"Warnings"'))
    elif damage == "other_version":
        data = bytearray(data.replace(b'"store_version":%d' % store.STORE_VERSION, b'"store_version":9'))
    Path(cache).write_bytes(bytes(data))
    with pytest.raises(store.StoreError):
        store.read_store(cache)
    t, parsed_now = load_parsing(events_file)
    assert parsed_now
    assert_same(parsed, t)
    assert "Traceback" not in capsys.readouterr().err
    assert opened_from_store(load_trace(events_file))  # rebuilt


@pytest.fixture(scope="module")
def events_store(tmp_path_factory):
    """(the store load_trace writes for an events file, the file parsed): made once for the garbled copies below."""
    path = write_events_file(tmp_path_factory.mktemp("garbled") / "trace.jsonl")
    load_trace(path)
    return Path(store.cache_path([path], None, False)).read_bytes(), load_trace(path, cache=False)


@pytest.mark.parametrize("position", range(0, 4000, 97))
def test_garbled_bytes_anywhere_never_pass(events_store, position, tmp_path):
    data, parsed = bytearray(events_store[0]), events_store[1]
    for k in (position, len(data) - 1 - position):
        data[k] ^= 0x5A
    cache = tmp_path / "garbled.arrow"
    cache.write_bytes(bytes(data))
    try:
        t = store.read_store(str(cache))
    except store.StoreError:
        return
    assert_same(parsed, t)  # a byte nothing reads (padding, the leading schema copy)


@pytest.mark.parametrize("error", [PermissionError(13, "Permission denied"), OSError(28, "No space left on device")])
def test_writing_never_fails_the_command(events_file, monkeypatch, error):
    def refuse(*a, **k):
        raise error
    monkeypatch.setattr(codec, "create_temp", refuse)
    assert_same(load_trace(events_file, cache=False), load_trace(events_file))
    assert not os.path.exists(store.cache_path([events_file], None, False))


def test_the_store_is_readable_as_the_trace_is(events_file):
    """Its mode follows the umask like any file's (a shared trace dir's other users can read it)."""
    old = os.umask(0o022)
    try:
        load_trace(events_file)
    finally:
        os.umask(old)
    assert os.stat(store.cache_path([events_file], None, False)).st_mode & 0o777 == 0o644


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only dirs")
def test_read_only_dir(events_file):
    folder = os.path.dirname(events_file)
    os.chmod(folder, 0o555)
    try:
        assert len(load_trace(events_file)) > 0
    finally:
        os.chmod(folder, 0o755)


def test_the_env_var_and_cache_false_turn_it_off(events_file, monkeypatch):
    load_trace(events_file, cache=False)
    assert not os.path.exists(store.cache_path([events_file], None, False))
    monkeypatch.setenv("DISTTRACE_CACHE", "0")
    load_trace(events_file)
    assert not os.path.exists(store.cache_path([events_file], None, False))
    monkeypatch.delenv("DISTTRACE_CACHE")
    load_trace(events_file)
    assert opened_from_store(load_trace(events_file))
    assert not opened_from_store(load_trace(events_file, cache=False))  # what --follow does


def test_the_usage_one_liners(events_file):
    """The lines of docs/USAGE.md, "Your trace in pandas, Polars, DuckDB", as written there."""
    load_trace(events_file)
    path = events_file + ".disttrace.arrow"  # USAGE.md: FILE.disttrace.arrow, TRACE/.disttrace-cache/events-v3.arrow
    import pandas as pd
    df = pd.read_feather(path)
    import duckdb
    import pyarrow as pa
    events = pa.ipc.open_file(path).read_all()
    counts = duckdb.sql("select op, count(*) as n from events group by op order by op").fetchall()
    del events  # DuckDB found it by its name

    parsed = load_trace(events_file, cache=False)
    assert len(df) == len(parsed) and list(df["op"]) == list(parsed.op)
    assert list(df["start_ns"]) == list(parsed.start_ns)
    ops = sorted(set(parsed.op))
    assert counts == [(op, list(parsed.op).count(op)) for op in ops]


# -- real traces (torchrun jobs) -------------------------------------------------------------------------------

def _copy(trace, tmp_path) -> str:
    out = tmp_path / "trace"
    shutil.copytree(trace, out, ignore=shutil.ignore_patterns(store.CACHE_DIR))
    age(str(out))
    return str(out)


def _check_trace_dir(path: str) -> None:
    from harness import run_disttrace
    parsed = load_trace(path, cache=False)
    first = load_trace(path)
    assert os.path.isfile(store.cache_path([path], None, True))
    again = load_trace(path)
    assert opened_from_store(again)
    assert_same(parsed, first)
    assert_same(parsed, again)
    cli = run_disttrace("events", path)  # from the store
    assert cli.returncode == 0
    assert cli.stdout.encode() == b"".join(iter_jsonl(parsed))


@pytest.mark.slow
def test_round_trip_of_real_traces(traced, tmp_path):
    t = _copy(traced("rec_ops.py", nproc=4), tmp_path)
    _check_trace_dir(t)
    assert load_trace(t).in_.any()


@pytest.mark.slow
def test_reading_a_trace_never_imports_pandas(traced, tmp_path):
    """pyarrow imports pandas at its first `pa.array` where pandas is installed: 0.3 s of every read, and of the end
    of `disttrace run`, for nothing. The store's arrays are built over buffers (data/table/arrow_arrays.py). A first read
    (the rank files' rows sorted, the store written), a re-open and the analysis, in a fresh interpreter."""
    pytest.importorskip("pandas")  # (a test extra: where it is missing there is nothing to import)
    t = _copy(traced("rec_ops.py", nproc=4), tmp_path)
    code = ("import sys; from disttrace.tracer.data.load import load_trace; "
            "from disttrace.tracer.analysis.engine.run import analyze; "
            f"load_trace({t!r}); analyze(load_trace({t!r})); print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert os.path.isfile(store.cache_path([t], None, True))  # (it was written, and re-opened)
    assert out.split() == ["False"]


@pytest.mark.slow
def test_round_trip_of_a_damaged_trace(traced, tmp_path):
    t = _copy(traced("rec_crash.py", nproc=2, args=("kill",), summaries="off", expect_rc=1), tmp_path)
    rank_file = os.path.join(t, sorted(f for f in os.listdir(t) if f.startswith("rank-"))[0])
    with open(rank_file, "ab") as fh:
        fh.write(b'\x00\x00{"k":"b","id":999,"t":')  # a record torn by a crash, after the zeros it leaves
    age(t)
    _check_trace_dir(t)
    assert load_trace(t).damage_summary()


@pytest.mark.slow
def test_a_trace_dir_whose_files_change_is_read_again(traced, tmp_path):
    t = _copy(traced("rec_ops.py", nproc=4), tmp_path)
    load_trace(t)
    files = sorted(f for f in os.listdir(t) if f.startswith("rank-"))
    moved = os.path.join(str(tmp_path), files[-1])
    os.rename(os.path.join(t, files[-1]), moved)  # a file removed
    fewer, parsed_now = load_parsing(t)
    assert parsed_now
    assert_same(load_trace(t, cache=False), fewer)
    os.rename(moved, os.path.join(t, files[-1]))  # and back: added
    assert load_parsing(t)[1]
    assert opened_from_store(load_trace(t))


@pytest.mark.slow
def test_round_trip_of_a_flight_recorder_import(traced, tmp_path_factory, tmp_path):
    from harness import traced_fr_run
    _trace, dumps = traced_fr_run(traced, tmp_path_factory)
    d = _copy(dumps / "json", tmp_path)
    parsed = load_trace(d, cache=False)
    load_trace(d)
    again = load_trace(d)
    assert opened_from_store(again)
    assert_same(parsed, again)



def test_rows_read_out_of_order_are_sorted_with_their_sparse_values(tmp_path):
    """Rank files are read one after another, so every trace dir's table is sorted after reading (numpy): each
    row keeps its own summaries, error and unknown keys, and ties order by (start, rank, id)."""
    events = []
    for i in range(3000):
        r = i % 7
        ev = {"rank": r, "op": "all_reduce" if i % 3 else "send", "start_ns": 1_000 + (i * 7919) % 500, "id": i,
              "end_ns": 5_000 + i, "bytes": i, "shape": [i % 5], "site": f"x.py:{i % 11}", "peer": (r + 1) % 7}
        if i % 4 == 0:
            ev["in"] = {"n": i, "sum": float(i)}
        if i % 9 == 0:
            ev["error"] = f"boom {i}"
        if i % 13 == 0:
            ev["custom"] = [i]
        events.append(ev)
    in_order = sorted(events, key=lambda e: (e["start_ns"], e["rank"], e["id"]))
    shuffled = events[:]
    random.Random(7).shuffle(shuffled)
    a, b = tmp_path / "ordered.jsonl", tmp_path / "shuffled.jsonl"
    a.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in in_order))
    b.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in shuffled))
    ta, tb = load_trace([str(a)], cache=False), load_trace([str(b)], cache=False)
    assert [tb.row(i) for i in range(len(tb))] == [ta.row(i) for i in range(len(ta))]
    assert [tb.row(i)["id"] for i in range(len(tb))] == [e["id"] for e in in_order]
    assert tb.row(next(i for i in range(len(tb)) if tb.id[i] == 13))["custom"] == [13]


def test_a_gzipped_trace_counts_the_json_it_holds(tmp_path):
    """Whether the viewer reads a trace before it starts (a blank terminal meanwhile) or behind its progress bar
    goes by trace_size: a gzipped profiler trace 20x smaller than its JSON once fell under the bound and kept the
    terminal blank for ~10 s. A gzip's trailer says what it holds."""
    import gzip

    from disttrace.tracer.data.importers.kineto import source_files
    from disttrace.tracer.data.load import trace_size
    from test_kineto import write_gpu_traces

    big = tmp_path / "big.pt.trace.json.gz"
    body = b'{"traceEvents": [' + b",".join([b'{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2}'] * 200_000) + b"]}"
    big.write_bytes(gzip.compress(body))
    assert os.path.getsize(big) < len(body) // 20
    assert trace_size([str(big)]) == len(body)
    d = write_gpu_traces(str(tmp_path / "prof"), meta_on_kernel=True, seq=True)
    held = 0
    for f in source_files(d):
        held += len(gzip.decompress(open(f, "rb").read())) if f.endswith(".gz") else os.path.getsize(f)
    assert trace_size([d]) == held


def test_a_stored_summary_column_finds_the_non_finite_rows_without_decoding_the_rest(tmp_path, monkeypatch):
    """JsonColumn.items(maybe) decodes only the rows where the regex or the scan finds something; with the
    analysis' regex for NaN/Inf counts, and with its scan (scans.py: compiled, and as Python), it must give every row
    a decoding of all rows finds (problems._nonfinite reads it so)."""
    from disttrace.tracer.analysis.problems import nonfinite_scan as scans
    from disttrace.tracer.analysis.problems.checks import _nonfinite_counts

    monkeypatch.setenv("DISTTRACE_JIT", "1")
    monkeypatch.setattr(scans, "FIRST_ROOM", 1)  # (room for one place at first: grown past it)
    finders = [scans.NONFINITE_TEXT, lambda text: scans.nonfinite_loop(text, [len(text)])[1]]
    if importlib.util.find_spec("numba"):
        finders.append(scans.nonfinite(1))  # (compiled)

    rng = random.Random(7)
    odd = [0, 1, 3, -0, 0.0, 2.5, None, "1", [0], {"nan": 4}]
    events = []
    for i in range(3000):
        ev = {"rank": i % 4, "op": "all_reduce", "start_ns": 100 + i, "end_ns": 200 + i, "group": "world",
              "group_ranks": [0, 1, 2, 3], "group_seq": i // 4, "id": i}
        for side in ("in", "out"):
            if rng.random() < 0.8:
                summary = {"numel": 4, "nan": 0, "inf": 0, "norm": 1.0}
                if rng.random() < 0.1:
                    summary[rng.choice(["nan", "inf"])] = rng.choice(odd)
                if rng.random() < 0.05:
                    summary["values"] = [{"nan": 9}]  # a nested key: not a count
                if rng.random() < 0.05:
                    summary = rng.choice([[1, 2], "text", 5])  # damage: not an object
                ev[side] = summary
        events.append(ev)
    path = tmp_path / "sums.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    age(path)
    parsed = load_trace(str(path), cache=False)
    load_trace(str(path))
    stored = load_trace(str(path))
    assert opened_from_store(stored)
    for name in ("in_", "out"):
        want = [(i, v) for i, v in enumerate(getattr(parsed, name)) if any(_nonfinite_counts(v))]
        assert len(want) > 20
        for t in (parsed, stored):
            for find in finders:
                got = [(i, v) for i, v in getattr(t, name).items(find) if any(_nonfinite_counts(v))]
                assert got == want, (name, find)
        assert list(stored.__dict__[name].items()) == [(i, v) for i, v in enumerate(parsed.__dict__[name])
                                                       if v is not None]


def test_summaries_are_kept_as_json_text_and_survive_appends_and_sorting():
    """JsonColumn (the parse's summaries, as their text): None rows, values orjson cannot write (kept as they are),
    appends after a store open (mapped buffers copied), and take() in a new order all read back as the values."""
    import random

    from disttrace.tracer.data.table.columns import JsonColumn

    rng = random.Random(3)
    deep: list = []
    for _ in range(300):  # nested past orjson's depth limit: kept by row
        deep = [deep]
    values = [None if rng.random() < 0.4 else {"numel": rng.randrange(9), "min": rng.random(), "nan": 0}
              for _ in range(500)]
    values[17], values[230] = deep, {1: "a non-str key"}
    col = JsonColumn()
    col.extend(values[:200])
    for v in values[200:260]:
        col.append(v)
    col.extend(iter(values[260:]))
    assert list(col) == values and col.any() and col.texts() is None
    order = list(range(len(values)))
    rng.shuffle(order)
    moved = col.take(__import__("numpy").array(order))
    assert list(moved) == [values[i] for i in order]
    plain = JsonColumn()
    plain.extend([values[i] for i in range(len(values)) if i not in (17, 230)])
    offsets, data = plain.texts()
    assert bytes(data).count(b'"numel"') == sum(1 for v in list(plain) if v is not None)


@pytest.mark.slow
def test_disttrace_run_writes_the_store_when_the_job_ends(tmp_path):
    """With --store, the job's end, not the first view, pays for the first read and the first analysis (the rank
    files were written just now: the launcher knows that nothing writes them any more); by default a trace under
    STORE_AT_END_BYTES, as this one, is left to the first view, as with --no-store."""
    from harness import run_traced

    from disttrace.tracer.analysis.core import saved_analysis as saved
    from disttrace.tracer.analysis.engine.run import analyze
    from disttrace.tracer.analysis.text.json_report import to_json
    for run_args, stored in ((("--store",), True), ((), False)):
        out = tmp_path / f"trace{len(run_args)}"
        proc = run_traced("rec_steps.py", out, nproc=2, summaries="stats", run_args=run_args, again=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert os.path.isfile(store.cache_path([str(out)], None, True)) == stored
        if not stored:
            age(str(out))  # (a first view stores no rank file written less than RACY_NS ago)
        # opened as the run's last line says (it stored /abs/trace1 and says "disttrace view trace1"), not re-read
        t, parsed = load_parsing(os.path.relpath(out))
        assert opened_from_store(t) and parsed == (not stored)
        # (the files named as the command that wrote the store spelled them: the run's /abs/trace1, else trace1)
        assert_same(load_trace(str(out) if stored else os.path.relpath(out), cache=False), t)
        kept = saved.load(t)  # the analysis the run's end saved: the one this trace's analysis is
        assert (kept is not None) == stored
        if stored:
            assert to_json(kept) == to_json(analyze(load_trace(str(out), cache=False)))


def test_the_source_digest_covers_subfolders(tmp_path):
    # the analysis lives in subfolders (analysis/core/, analysis/waits/, ...): a change in one of them, or a module
    # moved between them, must make the saved analysis stale, as a change at the top does
    def digest(tree: dict[str, str]) -> str:
        root = tmp_path / f"v{len(list(tmp_path.iterdir()))}"
        for name, text in tree.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return store.source_digest(str(root))

    base = {"__init__.py": "", "core/results.py": "A = 1\n", "waits/steps.py": "B = 2\n"}
    same = digest(base)
    assert digest(base) == same
    assert digest({**base, "waits/steps.py": "B = 3\n"}) != same
    moved = {"__init__.py": "", "core/results.py": "A = 1\n", "core/steps.py": "B = 2\n"}
    assert digest(moved) != same
    assert digest({**base, "waits/__pycache__/steps.py": "junk"}) == same  # compiled leftovers are not sources
