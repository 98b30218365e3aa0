"""Bad input never crashes a reader: real trace files, normalized events files and Flight Recorder dumps, mutated a
few thousand times (deterministic seed), go through everything that reads them.

In process: load_trace -> analyze -> the report's to_json, the events' JSON Lines and the Chrome export; the only
accepted failure is errors.TraceError (the one-line error the CLI prints). For a sample of the mutations the real
commands run in subprocesses (`events`, `report --json`, `export`) with an address-space limit and a timeout:
each answers exit 2 with one line, or 0/1 with valid output and warnings; never a traceback, a hang or a blow-up.

Also here: nothing that reads a trace runs code from it, and trace files are created mode 0600."""

from __future__ import annotations

import io
import json
import os
import pickle
import random
import resource
import shutil
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from harness import disttrace_cmd
from disttrace.tracer.analysis import analyze, to_json
from disttrace.tracer.data.importers.events_files import iter_jsonl
from disttrace.tracer.errors import TraceError
from disttrace.tracer.commands.export import write_chrome
from disttrace.tracer.data.load import load_trace
from harness import traced_fr_run

SEED = int(os.environ.get("DISTTRACE_FUZZ_SEED", 20261122))  # another seed: another few thousand cases
IN_PROCESS = {"trace": 1000, "events": 400, "fr_json": 350, "fr_pickle": 250}   # mutations per input kind
CLI_SAMPLE = 18                                                                # of those, run as real commands
CHILD_AS_LIMIT = 2 << 30                                                       # bytes of address space
CLI_TIMEOUT = 60

# -- mutations --------------------------------------------------------------------------------------------------

ODD_VALUES = [None, True, False, 0, -1, -(2 ** 63), 2 ** 63, 2 ** 64 + 5, 10 ** 30, -(10 ** 25), 1.5, 1e308, -0.0,
              "", "x", "all_reduce", "\u2603", [], [1, "a"], {}, {"k": [None]},
              "9" * 5000, list(range(300))]


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


def _odd(rng: random.Random):
    return rng.choice(ODD_VALUES)


def _mutate_obj(rng: random.Random, obj: dict) -> tuple[dict, bytes | None]:
    """One structural mutation of a JSON object; returns (object, raw JSON replacing one value or None)."""
    obj = dict(obj)
    keys = list(obj)
    kind = rng.randrange(7)
    if kind == 0 and keys:                      # wrong type
        obj[rng.choice(keys)] = _odd(rng)
    elif kind == 1 and keys:                    # missing key
        del obj[rng.choice(keys)]
    elif kind == 2 and keys:                    # huge or negative numbers
        obj[rng.choice(keys)] = rng.choice([2 ** 63 - 1, 2 ** 63, 2 ** 80, -(2 ** 63), -5, 10 ** 400 // 10 ** 380])
    elif kind == 3 and keys:                    # deep nesting, beyond and within JSON parsers' limits
        return obj, _deep(rng.choice([300, 2000, 100_000]))
    elif kind == 4:                             # a newer format version
        obj["v"] = rng.choice([2, 99, 2 ** 40])
        if "version" in obj:
            obj["version"] = rng.choice(["3.0", "99.1", 7, None])
    elif kind == 5:                             # extra keys of every type
        obj[rng.choice(["zz", "extra", "in", "out", "shape", "frames"])] = _odd(rng)
    else:                                       # a nested list or dict emptied or replaced
        nested = [k for k in keys if isinstance(obj[k], (list, dict))]
        if nested:
            k = rng.choice(nested)
            obj[k] = rng.choice([[], {}, [obj[k]] * 3, _odd(rng)])
    return obj, None


def _dumps_with(obj: dict, raw: bytes | None, rng: random.Random) -> bytes:
    """JSON of obj (the standard library's encoder: it writes integers past 64 bits, as a hostile file may hold),
    with `raw` JSON text in place of one value."""
    if raw is None:
        return json.dumps(obj, separators=(",", ":")).encode()
    key = rng.choice(list(obj)) if obj else "k"
    obj = dict(obj)
    obj[key] = "@@RAW@@"
    return json.dumps(obj, separators=(",", ":")).encode().replace(b'"@@RAW@@"', raw)


def _bytes_mutation(rng: random.Random, data: bytes) -> bytes:
    n = len(data)
    kind = rng.randrange(6)
    if kind == 0:                               # truncation (a rank killed mid-write)
        return data[:rng.randrange(n + 1)]
    if kind == 1:                               # garbage bytes over a span
        at = rng.randrange(n + 1)
        return data[:at] + rng.randbytes(rng.randrange(1, 64)) + data[at + rng.randrange(64):]
    if kind == 2:                               # a few flipped bytes
        b = bytearray(data)
        for _ in range(rng.randrange(1, 8)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 3:                               # the zero tail of a crashed recorder, or zeros inside
        at = rng.randrange(n + 1)
        return data[:at] + b"\0" * rng.randrange(1, 5000) + (data[at:] if rng.random() < 0.5 else b"")
    if kind == 4:                               # empty file
        return b""
    return rng.randbytes(rng.randrange(1, 2000))  # noise


def mutate_jsonl(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    if rng.random() < 0.35 or len(lines) < 2:
        return _bytes_mutation(rng, data)
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(lines))
        r = rng.random()
        if r < 0.1:
            lines.insert(i, lines[i])           # duplicated record
            continue
        if r < 0.2:
            del lines[i]                        # dropped record
            continue
        try:
            obj = orjson.loads(lines[i])
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            obj, raw = _mutate_obj(rng, obj)
            try:
                lines[i] = _dumps_with(obj, raw, rng)
            except RecursionError:  # a line this case already nested deeply: leave it so
                pass
    return b"\n".join(lines)


def _mutate_fr(rng: random.Random, dump: dict) -> tuple[dict, bytes | None]:
    dump = dict(dump)
    entries = list(dump.get("entries") or [])
    raw = None
    for _ in range(rng.randrange(1, 4)):
        r = rng.random()
        if r < 0.6 and entries:
            i = rng.randrange(len(entries))
            if isinstance(entries[i], dict):
                entries[i], raw = _mutate_obj(rng, entries[i])
                if raw is not None:
                    raw = None if rng.random() < 0.5 else raw
        elif r < 0.7:
            dump["pg_config"] = rng.choice([{}, None, {"0": {"ranks": "[0, 1, x"}}, {"0": {"ranks": "9" * 3000}},
                                            {"0": {"name": [], "ranks": [0, 2 ** 70]}}, _odd(rng)])
        elif r < 0.8:
            entries = entries * rng.choice([0, 2, 8])
        else:
            dump, raw = _mutate_obj(rng, dump)
    if "entries" in dump:
        dump["entries"] = entries
    return dump, raw


def mutate_fr_json(rng: random.Random, data: bytes) -> bytes:
    if rng.random() < 0.35:
        return _bytes_mutation(rng, data)
    dump, raw = _mutate_fr(rng, orjson.loads(data))
    return _dumps_with(dump, raw, rng)


def mutate_fr_pickle(rng: random.Random, data: bytes) -> bytes:
    if rng.random() < 0.4:
        return _bytes_mutation(rng, data)
    dump, _ = _mutate_fr(rng, pickle.loads(data))  # our own real dump: trusted here
    r = rng.random()
    if r < 0.1:
        dump["entries"] = [[[[]]]]
        nested = []
        for _ in range(150):
            nested = [nested]
        dump["pg_status"] = nested
    if r > 0.9:  # one object referred to from many places (pickle's memo): must not cost more than its size
        e = dump["entries"][0] if dump.get("entries") else {}
        dump["entries"] = [e] * 100_000
    return pickle.dumps(dump, protocol=rng.choice([2, 4, 5]))


# -- inputs -----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def seeds(traced, tmp_path_factory):
    """Real inputs: a disttrace trace dir, its normalized events file, Flight Recorder JSON and pickle dumps."""
    trace = traced("ex_p2p.py", nproc=2)
    _, fr = traced_fr_run(traced, tmp_path_factory)
    events = b"".join(iter_jsonl(load_trace([str(trace)])))
    return {
        "trace": {p.name: p.read_bytes() for p in sorted(trace.iterdir()) if p.name.startswith("rank-")},
        "events": {"events.jsonl": events},
        # the dumps (not the trace store's dir that reading them may have left there)
        "fr_json": {p.name: p.read_bytes() for p in sorted((fr / "json").iterdir()) if p.is_file()},
        "fr_pickle": {p.name: p.read_bytes() for p in sorted((fr / "pickle").iterdir()) if p.is_file()},
        "trace_dir": trace,
    }


MUTATORS = {"trace": mutate_jsonl, "events": mutate_jsonl, "fr_json": mutate_fr_json, "fr_pickle": mutate_fr_pickle}


def _cases(seeds):
    """(kind, files) for every mutation, deterministic for SEED."""
    rng = random.Random(SEED)
    for kind, n in IN_PROCESS.items():
        files = seeds[kind]
        for _ in range(n):
            name = rng.choice(sorted(files))
            yield kind, {**files, name: MUTATORS[kind](rng, files[name])}


def _write(dirpath: Path, kind: str, files: dict) -> str:
    """Write a case into dirpath (emptied first); returns the path to give the reader."""
    shutil.rmtree(dirpath, ignore_errors=True)
    dirpath.mkdir(parents=True)
    for name, data in files.items():
        (dirpath / name).write_bytes(data)
    return str(dirpath / "events.jsonl") if kind == "events" else str(dirpath)


def read_everything(path: str) -> str:
    """What the commands do, in process; returns 'ok' or 'error' (a TraceError). Anything else raises."""
    try:
        table = load_trace([path])
    except TraceError as e:
        msg = str(e)
        assert msg and "\n" not in msg, repr(msg)
        return "error"
    for line in iter_jsonl(table):          # disttrace events
        assert line.endswith(b"\n")
    a = analyze(table)
    orjson.dumps(to_json(a))                # disttrace report --json
    buf = io.BytesIO()
    write_chrome(a, buf)                    # disttrace export
    doc = orjson.loads(buf.getvalue())
    assert len([e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] != "schedule"]) == len(table)
    return "ok"


@pytest.mark.slow
def test_mutated_inputs_never_crash_the_readers(seeds, tmp_path):
    outcomes: dict[str, dict[str, int]] = {}
    failures = []
    t0 = time.monotonic()
    for k, (kind, files) in enumerate(_cases(seeds)):
        path = _write(tmp_path / "case", kind, files)
        try:
            result = read_everything(path)
        except Exception as e:  # noqa: BLE001 - collected and reported below
            result = "crash"
            if len(failures) < 10:
                failures.append(f"case {k} ({kind}): {type(e).__name__}: {str(e)[:200]}")
            keep = tmp_path / f"crash-{k}"
            if not keep.exists():
                shutil.copytree(tmp_path / "case", keep)
        outcomes.setdefault(kind, {}).setdefault(result, 0)
        outcomes[kind][result] += 1
    elapsed = time.monotonic() - t0
    print(f"\nfuzz: {sum(IN_PROCESS.values())} mutations in {elapsed:.1f} s: {outcomes}")
    assert not failures, "\n".join(failures)
    # the mutations are not all rejected outright: most of them leave something readable
    for kind, res in outcomes.items():
        assert res.get("ok", 0) > 0.3 * IN_PROCESS[kind], (kind, res)


def _limit_child():
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_AS_LIMIT, CHILD_AS_LIMIT))


def _run_cli(args: list[str]) -> subprocess.CompletedProcess:
    """`disttrace ARGS` under the address-space limit; a hang comes back as exit code 124."""
    try:
        return subprocess.run(disttrace_cmd(*args), capture_output=True, text=True, timeout=CLI_TIMEOUT,
                              preexec_fn=_limit_child, env={**os.environ, "COLUMNS": "120"})
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"hung: no answer in {CLI_TIMEOUT} s")


@pytest.mark.slow
def test_commands_on_mutated_inputs_answer_cleanly(seeds, tmp_path):
    cases = list(_cases(seeds))
    rng = random.Random(SEED + 1)
    sample = rng.sample(range(len(cases)), CLI_SAMPLE)
    commands = ("events", "report", "export")
    seen: dict[str, set] = {c: set() for c in commands}
    failures = []
    for n, k in enumerate(sample):
        kind, files = cases[k]
        path = _write(tmp_path / f"c{n}", kind, files)
        cmd = commands[n % len(commands)]
        out = tmp_path / f"c{n}.json"
        args = {"events": ["events", path], "report": ["report", "--json", path],
                "export": ["export", path, "-o", str(out)]}[cmd]
        p = _run_cli(args)
        try:
            _check_answer(cmd, p, out)
            seen[cmd].add(p.returncode)
        except AssertionError as e:
            failures.append(f"case {k} ({kind}) `disttrace {' '.join(args)}`: rc={p.returncode}: {e}\n"
                            f"{p.stderr[-600:]}")
    assert not failures, "\n".join(failures)
    assert all(seen.values()), seen  # every command ran on some case


def _check_answer(cmd: str, p: subprocess.CompletedProcess, out: Path) -> None:
    """Exit 2 with one line, or 0/1 with valid output (and warnings, each a line of its own); no traceback."""
    assert "Traceback" not in p.stderr, "a traceback"
    assert p.returncode in (0, 1, 2), "unexpected exit code"
    if p.returncode == 2:
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"disttrace {cmd}: error: "), "not one error line"
        return
    assert all(x.startswith("disttrace") for x in p.stderr.strip().splitlines()), "stray output on stderr"
    if cmd == "events":
        assert all(orjson.loads(x) for x in p.stdout.splitlines()), "events output is not JSON Lines"
    elif cmd == "report":
        assert isinstance(orjson.loads(p.stdout), dict), "report --json is not a JSON object"
    else:
        assert orjson.loads(out.read_bytes())["traceEvents"], "export wrote no events"


# -- minimal reproducers of what the fuzzing found (each crashed a reader before it was fixed) --------------------

_EV = {"v": 1, "rank": 0, "op": "all_reduce", "group": "0", "group_ranks": [0, 1], "group_seq": 0, "bytes": 4,
       "start_ns": 10, "end_ns": 20}
_META = {"k": "meta", "v": 1, "rank": 0, "world_size": 1, "host": "h", "pid": 1}
_GROUP = {"k": "group", "g": 0, "name": "0", "ranks": [0]}
_BEGIN = {"k": "b", "i": 0, "op": "barrier", "g": 0, "gs": 0, "t": 100, "bytes": 0}
_END = {"k": "e", "i": 0, "t": 200}


def _lines(*objs) -> bytes:
    return b"".join((o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n" for o in objs)


def _with_raw(obj: dict, key: str, raw: bytes) -> bytes:
    return json.dumps({**obj, key: "@@"}).encode().replace(b'"@@"', raw)


REPRODUCERS = {
    # normalized events files (disttrace events FILE.jsonl)
    "events: a bad value after the first columns were appended": ("events", _lines(_EV, {**_EV, "group_seq": "x"})),
    "events: group_ranks holding a list": ("events", _lines(_EV, {**_EV, "group_ranks": [[0]]})),
    "events: nesting past orjson's 255 levels in a summary": ("events", _lines(_with_raw(_EV, "in", _deep(300)))),
    "events: shapes that are lists of lists": ("events", _lines({**_EV, "shape": [[1]]},
                                                                {**_EV, "rank": 1, "shape": [[2]]})),
    # disttrace trace dirs (rank files)
    "trace: bytes past 64 bits": ("trace", _lines(_META, _GROUP, {**_BEGIN, "bytes": 2 ** 63}, _END)),
    "trace: a site nested 1000 deep": ("trace", _lines(_META, _GROUP, _with_raw(_BEGIN, "site", _deep(1000)), _END)),
    "trace: a begin whose id is a list": ("trace", _lines(_META, _GROUP, _BEGIN, {**_BEGIN, "i": [1]}, _END)),
    "trace: a clock offset that is a list": ("trace", _lines(_META, _GROUP, {"k": "clock", "phase": "start",
                                                                              "offset_ns": [1]}, _BEGIN, _END)),
    "trace: clock mono_ns of the wrong type": ("trace", _lines(_META, _GROUP, {"k": "clock", "phase": "start",
                                                                                "offset_ns": 0, "mono_ns": [5]},
                                                               {"k": "clock", "phase": "end", "offset_ns": 1,
                                                                "mono_ns": 9}, _BEGIN, _END)),
    "trace: a meta pid that is a list": ("trace", _lines({**_META, "pid": [1]}, _GROUP, _BEGIN, _END)),
    "trace: an op that ends before it begins": ("trace", _lines(_META, _GROUP, _BEGIN, _END,
                                                                {**_BEGIN, "i": 1, "gs": 1, "t": 300},
                                                                {**_END, "i": 1, "t": 250})),
    "trace: a meta world_size of 5000 digits": ("trace", _lines({**_META, "world_size": "9" * 5000}, _GROUP, _BEGIN,
                                                                _END)),
}


@pytest.mark.parametrize("name", sorted(REPRODUCERS))
def test_reproducers_of_fuzz_findings(name, tmp_path):
    kind, data = REPRODUCERS[name]
    files = {"events.jsonl": data} if kind == "events" else {"rank-00000-h-1.jsonl": data}
    assert read_everything(_write(tmp_path / "case", kind, files)) in ("ok", "error")


# -- reading never runs code; what is written is private ----------------------------------------------------------

class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.mark.slow
@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_no_command_runs_code_from_a_pickled_dump(tmp_path, protocol):
    marker = tmp_path / "ran"
    d = tmp_path / "fr"
    d.mkdir()
    payloads = [{"version": "2.10", "entries": [_Evil(str(marker))]}, _Evil(str(marker))]
    for rank, obj in enumerate(payloads):
        (d / f"fr_trace_rank_{rank}").write_bytes(pickle.dumps(obj, protocol=protocol))
    for args in (["events", str(d)], ["report", "--json", str(d)], ["export", str(d), "-o", str(tmp_path / "o")]):
        p = _run_cli(args)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        # protocols 2+ look like Flight Recorder dumps and are refused when read; protocol 0 is not even taken for one
        assert ("no readable Flight Recorder dumps" if protocol >= 2 else "not a disttrace trace") in p.stderr
    with pytest.raises(TraceError):
        load_trace([str(d)])
    assert not marker.exists()


@pytest.mark.slow
def test_a_pickle_memo_bomb_is_refused_before_it_allocates(tmp_path):
    """Ten bytes that name memo index 2**29 would make the C unpickler allocate and clear 4 GiB."""
    d = tmp_path / "fr"
    d.mkdir()
    (d / "fr_trace_rank_0").write_bytes(b"\x80\x02}q\x00X\x01\x00\x00\x00aNr" + struct.pack("<I", 1 << 29) + b"s.")
    (d / "fr_trace_rank_1.json").write_bytes(orjson.dumps({"version": "2.10", "entries": [
        {"profiling_name": "gloo:barrier", "process_group": ["0", "default_pg"], "collective_seq_id": 1,
         "time_created_ns": 5, "state": "scheduled", "retired": True}]}))
    p = _run_cli(["events", str(d)])  # under the 2 GiB address-space limit
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "memo index larger than the file" in p.stderr and len(p.stdout.splitlines()) == 1


@pytest.mark.slow
def test_trace_files_are_private(seeds):
    trace = seeds["trace_dir"]
    ranks = [p for p in trace.iterdir() if p.name.startswith("rank-")]
    assert len(ranks) == 2
    for p in ranks:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


if __name__ == "__main__":  # pragma: no cover - `PYTHONPATH=tests python tests/data/test_fuzz.py CASE_DIR`: replay one saved case
    print(read_everything(sys.argv[1]))


def _read_back(path: str) -> tuple:
    """All that a read gives: each event's JSON line, the warnings, the ranks (damage included) and groups; or the
    error."""
    try:
        t = load_trace([path], cache=False)
    except TraceError as e:
        return ("error", str(e))
    return b"".join(iter_jsonl(t)), t.warnings, sorted(t.ranks.items()), t.groups


def _differential(seeds, tmp_path, monkeypatch, kinds: tuple, one: dict, other: dict) -> None:
    """Each mutated case of `kinds` read twice, with the attributes `one` and then `other` set ({(module, name):
    value}): the same table both ways, else the first differing case is kept in tmp_path."""
    differ = []
    for k, (kind, files) in enumerate(_cases(seeds)):
        if kind not in kinds:
            continue
        path = _write(tmp_path / "case", kind, files)
        reads = []
        for patches in (one, other):
            with monkeypatch.context() as m:
                for (module, name), value in patches.items():
                    m.setattr(module, name, value)
                reads.append(_read_back(path))
        if reads[0] != reads[1]:
            differ.append(k)
            if len(differ) == 1:
                shutil.copytree(tmp_path / "case", tmp_path / f"differ-{k}")
    assert not differ, f"cases read differently: {differ[:20]} (the first kept in {tmp_path})"


@pytest.mark.slow
def test_the_column_readers_read_what_the_event_by_event_ones_do(seeds, tmp_path, monkeypatch):
    """Differential: the readers make an intact file's columns at once (data/importers/rank_files._columns for rank
    files, data/table/rows._columns for events files) and fall back to event by event, skipping the bad ones, on anything
    odd. On every mutated trace dir and events file, both ways must read the same, and the columns' way must
    have run on most cases (else this would compare the fallback with itself). (Rank files by orjson's dicts:
    the typed records are compared with them below.)"""
    from disttrace.tracer.data.importers import rank_batches
    from disttrace.tracer.data.importers import rank_files as reader
    from disttrace.tracer.data.table import rows

    used = {"yes": 0, "no": 0}

    def counted(fn):
        def run(*args, **kwargs):
            try:
                out = fn(*args, **kwargs)
            except Exception:
                used["no"] += 1
                raise
            used["yes"] += 1
            return out
        return run

    def refuse(*args, **kwargs):
        raise ValueError("event by event")

    dicts = {(rank_batches, "decode"): lambda *a: None}
    at_once = {(reader, "_columns"): counted(reader._columns), (rows, "_columns"): counted(rows._columns)}
    _differential(seeds, tmp_path, monkeypatch, ("trace", "events"), {**dicts, **at_once},
                  {**dicts, (reader, "_columns"): refuse, (rows, "_columns"): refuse})
    assert used["yes"] > 2 * used["no"], used


@pytest.mark.slow
def test_the_typed_records_read_what_orjsons_dicts_do(seeds, tmp_path, monkeypatch):
    """Differential: a rank file's begins, ends and waits are decoded by msgspec into typed records and made into
    columns from them (data/importers/rank_batches.py), or, on anything odd, the file is read again by orjson. On every
    mutated trace dir both ways must read the same, and the typed records' way must have made most files'
    columns (else this would compare the careful path with itself)."""
    from disttrace.tracer.data.importers import rank_batches

    made = {"yes": 0, "no": 0}
    columns = rank_batches.columns

    def counted(*args, **kwargs):
        out = columns(*args, **kwargs)
        made["no" if out is None else "yes"] += 1
        return out

    _differential(seeds, tmp_path, monkeypatch, ("trace",), {(rank_batches, "columns"): counted},
                  {(rank_batches, "decode"): lambda *a: None})
    assert made["yes"] > 2 * made["no"], made


def test_the_typed_records_read_every_key_of_the_format_as_orjsons_dicts_do(tmp_path, monkeypatch):
    """The keys the real traces of the fuzz cases rarely hold, as the recorder writes them: a recv from any
    source (its peer at its end), CUDA summaries resolved after the fact ("s"), the keys kept in `extra`
    (origin, th, bound, dev), an error, a wait, step markers, an unknown group; read through the typed records
    (which must take this file) and through orjson's dicts: the same table."""
    from disttrace.tracer.data.importers import rank_batches

    summary = {"numel": 4, "min": -1.5, "max": 2.25, "mean": 0.1, "norm": 3.0, "nan": 0, "inf": 0, "checksum": 7}
    recs = [{"k": "meta", "v": 2, "rank": 0, "world_size": 2, "host": "h", "pid": 1, "mono_ns": 0, "wall_ns": 0},
            {"k": "clock", "phase": "start", "offset_ns": 0, "uncertainty_ns": 0, "mono_ns": 0, "window": 0},
            {"k": "group", "g": 0, "name": "0", "desc": "default_pg", "ranks": [0, 1], "backend": "gloo"},
            {"k": "b", "i": 0, "op": "all_reduce", "api": "all_reduce", "g": 0, "gs": 0, "bytes": 16,
             "dtype": "float32", "shape": [4], "t": 1000, "site": "a.py:1 in f", "in": summary, "origin": "ddp.x",
             "th": 7},
            {"k": "e", "i": 0, "t": 2000, "seq": 1, "out": summary, "dev": 500},
            {"k": "step", "t": 2500, "n": 1, "src": "api"},
            {"k": "b", "i": 1, "op": "recv", "api": "irecv", "peer": -1, "tag": 3, "bytes": 8, "dtype": "int64",
             "shape": [1], "async": True, "t": 3000, "site": None},
            {"k": "w", "i": 1, "t0": 3100, "t1": 3900},
            {"k": "e", "i": 1, "t": 3800, "seq": 2, "peer": 1},
            {"k": "b", "i": 2, "op": "broadcast", "g": 5, "root": 1, "bytes": 4, "dtype": "float32", "shape": [],
             "t": 4000},
            {"k": "e", "i": 2, "t": 4500, "st": "error", "err": "RuntimeError: peer gone", "bound": True},
            {"k": "s", "i": 2, "which": "in", "s": summary},
            {"k": "b", "i": 3, "op": "barrier", "api": "barrier", "g": 0, "gs": 1, "t": 5000},
            {"k": "left", "t": 6000, "how": "destroy"}]
    (tmp_path / "rank-00000-h-1.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    made = []
    columns = rank_batches.columns
    monkeypatch.setattr(rank_batches, "columns", lambda *a: made.append(columns(*a)) or made[-1])
    typed = _read_back(str(tmp_path))
    assert made and made[0] is not None
    monkeypatch.setattr(rank_batches, "decode", lambda *a: None)
    assert typed == _read_back(str(tmp_path))


def test_times_are_aligned_in_numpy_as_one_at_a_time():
    """The column reader aligns a rank's times in numpy (reader._aligned); the same arithmetic as the alignment of
    one time (reader._offset_fn), rounding included, before, between and past the clock's measurements."""
    import numpy as np

    from disttrace.tracer.data.importers import rank_files as reader

    rng = random.Random(SEED)
    for case in range(300):
        rf = reader._RankFile("rank-x.jsonl")
        t0 = rng.randrange(1, 2 ** 50)
        t1 = t0 + rng.choice([1, 2, 3, 1000, rng.randrange(1, 2 ** 40)])
        o0, o1 = (rng.randrange(-2 ** 40, 2 ** 40) for _ in range(2))
        if case % 3:
            o1 = o0 + rng.choice([1, -1, 3, (t1 - t0) // 2])  # slopes whose products land on halves
        rf.clock["start"] = {"offset_ns": o0, "mono_ns": t0}
        if case % 5:
            rf.clock["end"] = {"offset_ns": o1, "mono_ns": t1}
        times = [rng.randrange(max(t0 - 10 ** 6, 0), t1 + 10 ** 6) for _ in range(50)] + [t0, t1, (t0 + t1) // 2]
        align = reader._offset_fn(rf)[0]
        assert reader._aligned(np.array(times, np.int64), reader._clock(rf)).tolist() == list(map(align, times))
