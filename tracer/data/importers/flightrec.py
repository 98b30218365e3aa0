"""Import PyTorch Flight Recorder dumps: a directory of per-rank dumps -> normalized events in an EventTable.

Flight Recorder (TORCH_FR_BUFFER_SIZE=N) keeps the last N collectives of every gloo / NCCL process group in C++;
`torch._C._distributed_c10d._dump_fr_trace_json()` returns it as JSON, `_dump_fr_trace()` as a pickle (the
format of the automatic dumps, TORCH_FR_DUMP_TEMP_FILE + rank). A dump file's name ends with its rank
(`fr_trace_rank_3`, `nccl_trace_rank_3.json`, ...), as torch's own fr_trace tool expects.

Pickles are read only through `_PlainUnpickler`, which refuses every class: a dump is plain dicts, lists,
tuples, strings and numbers, and nothing read from a trace may run code. JSON dumps are first-class.

What a dump does not hold and how it is filled in (docs/EXPORT.md has the table):
- group members: pg_config (NCCL); gloo's dumps leave it empty, so the default group is every dumped rank and
  any other group the ranks whose dumps mention it;
- end times: NCCL with timing has duration_ms / time_discovered_completed_ns; gloo marks an entry `retired`
  when it finished but records no time, so such an op becomes a zero-length slice at its issue time;
- times are each rank's wall clock (time_created_ns): Flight Recorder does no clock alignment.

Imports neither torch nor textual.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import re

import orjson

from ...errors import TraceError
from ...format import is_user_file
from ..table.event_table import OPS, EventTable, RankInfo

FR_MAJOR = 2            # newest Flight Recorder dump format this was written against ("version": "2.10")
MAX_DUMP_BYTES = 1 << 30
_SNIFF = 4096
_NAME = re.compile(r"^(.*?)(\d+)(\.json|\.pkl|\.pickle)?$")
_INT_RE = re.compile(r"-?\d+")
_LIMIT = 1 << 63

# Flight Recorder's op names (profiling_name after "backend:") -> disttrace's op
_OP = {
    "broadcast": "broadcast", "_broadcast_oop": "broadcast",
    "reduce": "reduce", "_reduce_oop": "reduce",
    "all_reduce": "all_reduce", "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "all_gather": "all_gather", "all_gather_single": "all_gather", "all_gather_v": "all_gather",
    "_all_gather_base": "all_gather", "_allgather_base": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather", "ALLGATHER_coalesced": "all_gather",
    "allgather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_single": "reduce_scatter", "reduce_scatter_v":
    "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced":
    "reduce_scatter", "_reduce_scatter_base": "reduce_scatter", "REDUCE_SCATTER_coalesced": "reduce_scatter",
    "gather": "gather", "scatter": "scatter",
    "all_to_all": "all_to_all", "all_to_all_single": "all_to_all", "all_to_all_v_single": "all_to_all",
    "alltoall": "all_to_all", "alltoall_base": "all_to_all",
    "barrier": "barrier", "all_reduce_barrier": "barrier",
    "send": "send", "recv": "recv",
}

# c10d ScalarType names (input_dtypes) -> (torch dtype name as disttrace writes it, bytes per element)
_DTYPE = {
    "Float": ("float32", 4), "Double": ("float64", 8), "Half": ("float16", 2), "BFloat16": ("bfloat16", 2),
    "Long": ("int64", 8), "Int": ("int32", 4), "Short": ("int16", 2), "Char": ("int8", 1), "Byte": ("uint8", 1),
    "Bool": ("bool", 1), "ComplexFloat": ("complex64", 8), "ComplexDouble": ("complex128", 16),
    "ComplexHalf": ("complex32", 4), "Float8_e4m3fn": ("float8_e4m3fn", 1), "Float8_e5m2": ("float8_e5m2", 1),
    "Float8_e4m3fnuz": ("float8_e4m3fnuz", 1), "Float8_e5m2fnuz": ("float8_e5m2fnuz", 1),
    "UInt16": ("uint16", 2), "UInt32": ("uint32", 4), "UInt64": ("uint64", 8),
}


class _PlainUnpickler(pickle.Unpickler):
    """Reads only plain containers and scalars: any class or function a pickle names is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: only plain data is read from a dump")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused a persistent id: only plain data is read from a dump")


def _candidates(path: str) -> list[tuple[str, int]]:
    """(file, rank from its name) for the files of `path` named like per-rank dumps."""
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}") from None
    out = []
    for n in names:
        m = _NAME.match(n)
        full = os.path.join(path, n)
        if m and os.path.isfile(full):
            out.append((full, int(m.group(2))))
    return out


def source_files(path: str) -> list[str]:
    """The files the events of dump directory `path` come from (what the trace store's fingerprint watches)."""
    return [full for full, _ in _candidates(path)]


def _kind(head: bytes) -> str | None:
    """'json' or 'pickle' from a file's first bytes, or None."""
    stripped = head.lstrip()
    if stripped.startswith(b"{"):
        return "json" if b'"entries"' in head or b'"version"' in head or len(head) < _SNIFF else None
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return "pickle"
    return None


def is_fr_dir(path: str) -> bool:
    """Whether `path` is a directory holding at least one file that looks like a Flight Recorder dump."""
    try:
        cands = _candidates(path)
    except TraceError:
        return False
    for full, _ in cands:
        try:
            with open(full, "rb") as f:
                if _kind(f.read(_SNIFF)):
                    return True
        except OSError:
            continue
    return False


def _read_dump(full: str) -> dict:
    """The dump in one file as a dict; raises ValueError (with a short reason) on anything else."""
    try:
        size = os.path.getsize(full)
        if size > MAX_DUMP_BYTES:
            raise ValueError(f"larger than {MAX_DUMP_BYTES >> 20} MiB")
        with open(full, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(e.strerror or str(e)) from None
    kind = _kind(data[:_SNIFF])
    if kind == "json":
        try:
            dump = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise ValueError(f"not valid JSON ({str(e).splitlines()[0][:80]})") from None
    elif kind == "pickle":
        _check_memo(data)
        try:
            dump = _PlainUnpickler(io.BytesIO(data)).load()
        except pickle.UnpicklingError as e:
            raise ValueError(str(e)[:160]) from None
        except Exception as e:  # noqa: BLE001 - a damaged pickle fails in many ways (EOF, struct, memo keys...)
            raise ValueError(f"not a readable pickle ({type(e).__name__})") from None
    else:
        raise ValueError("neither a JSON nor a pickle Flight Recorder dump")
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        raise ValueError("no 'entries' list in it")
    return dump


def _check_memo(data: bytes) -> None:
    """Refuse a pickle whose memo indices exceed its size: the C unpickler sizes its memo table by the largest
    index, so ten bytes naming index 2**29 would make it allocate and clear gigabytes."""
    limit = len(data)
    try:
        for op, arg, _pos in pickletools.genops(data):
            if op.name in _MEMO_OPS and (not isinstance(arg, int) or arg > limit):
                raise ValueError("a memo index larger than the file (not a real dump)")
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - genops meets a damaged pickle in many ways
        raise ValueError(f"not a readable pickle ({type(e).__name__})") from None


_MEMO_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"})


def _version_major(v) -> int | None:
    m = _INT_RE.match(str(v)) if isinstance(v, (str, int, float)) else None
    return int(m.group()) if m and len(m.group()) < 6 else None


def _ranks_of(value) -> tuple[int, ...]:
    """pg_config's ranks: '[0, 1]' (a string, as Flight Recorder writes it) or a list."""
    if isinstance(value, str):
        if len(value) > 1 << 20:
            return ()
        vals = [int(x) for x in _INT_RE.findall(value)]
    elif isinstance(value, (list, tuple)):
        vals = [x for x in value if type(x) is int]
    else:
        return ()
    return tuple(sorted({v for v in vals if 0 <= v < _LIMIT}))


def _pg(entry: dict) -> tuple[str, str]:
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        name = pg[0]
        desc = pg[1] if len(pg) > 1 else ""
    else:
        name, desc = entry.get("pg_id", ""), ""
    if not isinstance(name, (str, int)) or not isinstance(desc, (str, int)):
        raise TypeError("process_group")
    return str(name)[:200], str(desc)[:200]


def _int(v, lo: int = 0) -> int:
    if type(v) is not int or not lo <= v < _LIMIT:
        raise ValueError("integer out of range")
    return v


MAX_DIMS = 64  # a tensor of more dimensions is not a real dump's


def _nbytes(sizes, dtypes, cache: dict) -> tuple[int, str | None, list | None]:
    """Bytes of the tensors described by sizes [[d0, d1, ...], ...] and dtypes ['Float', ...].

    `cache` (keyed by the lists' ids) keeps a pickle that refers to one big list from many entries (pickle's
    memo makes that cheap to write) from costing more work than its size."""
    key = (id(sizes), id(dtypes))
    hit = cache.get(key)
    if hit is not None:
        return hit
    if not isinstance(sizes, list) or not isinstance(dtypes, list):
        raise TypeError("sizes")
    total, dtype, shape = 0, None, None
    for k, dims in enumerate(sizes):
        if not isinstance(dims, list) or len(dims) > MAX_DIMS:
            raise TypeError("sizes")
        n = 1
        for d in dims:
            n *= _int(d)
            if n >= _LIMIT:
                raise ValueError("tensor too large")
        name = dtypes[k] if k < len(dtypes) else (dtypes[0] if dtypes else None)
        known = _DTYPE.get(name) if isinstance(name, str) else None
        total += n * (known[1] if known else 0)
        if total >= _LIMIT:
            raise ValueError("tensors too large")
        if dtype is None:
            dtype = known[0] if known else (str(name).lower()[:40] if name is not None else None)
            shape = list(dims)
    cache[key] = out = (total, dtype, shape)
    return out


def _site(frames) -> str | None:
    """The first frame outside torch: the user's call (frames are innermost first)."""
    if not isinstance(frames, list):
        return None
    for fr in frames[:256]:
        if not isinstance(fr, dict):
            continue
        fn, line, name = fr.get("filename"), fr.get("line"), fr.get("name")
        if not isinstance(fn, str) or not is_user_file(fn):
            continue
        return f"{fn[:300]}:{line if type(line) is int else '?'} in {str(name)[:100]}"
    return None


class _Dump:
    __slots__ = ("path", "rank", "data", "backend")

    def __init__(self, path, rank, data):
        self.path, self.rank, self.data, self.backend = path, rank, data, ""


def load_fr_dir(path: str, table: EventTable) -> None:
    """Append the events of the Flight Recorder dumps in directory `path` to `table` (unsorted; the caller sorts).

    Unreadable files and malformed entries are skipped with a warning; raises TraceError when nothing is readable."""
    dumps: dict[int, _Dump] = {}
    for full, rank in _candidates(path):
        try:
            data = _read_dump(full)
        except ValueError as e:
            table.warnings.append(f"{full}: skipped, not a readable Flight Recorder dump: {e}")
            continue
        if type(data.get("rank")) is int and 0 <= data["rank"] < _LIMIT:
            rank = data["rank"]
        if rank in dumps:
            table.warnings.append(f"{full}: a second dump of rank {rank}; using {os.path.basename(dumps[rank].path)}")
            continue
        major = _version_major(data.get("version"))
        if major is not None and major > FR_MAJOR:
            table.warnings.append(f"{full}: Flight Recorder format {str(data.get('version'))[:20]} is newer than "
                                  f"this disttrace knows ({FR_MAJOR}.x); reading the fields it knows")
        dumps[rank] = _Dump(full, rank, data)
    if not dumps:
        raise TraceError(f"{path}: no readable Flight Recorder dumps in it")
    members, inferred = _memberships(dumps)
    if inferred:
        table.warnings.append(f"{path}: the dumps carry no member lists for groups {', '.join(sorted(inferred))}: "
                              "members taken from which ranks' dumps mention them")
    events: list[dict] = []
    for rank in sorted(dumps):
        events += _dump_events(dumps[rank], members, table)
    if not events:
        raise TraceError(f"{path}: the Flight Recorder dumps hold no collectives")
    _bound_unknown_ends(events)
    for ev in events:
        table.append(ev)  # every value was checked by _event: append cannot fail half-way


def _bound_unknown_ends(events: list[dict]) -> None:
    """gloo's finished entries carry no end time. A collective cannot finish on any rank before its last rank
    arrived, so their end is set to that lower bound: the latest start of the same (group, group_seq). This keeps
    the waits right (latest start - own start) and never puts an end before a peer's start."""
    latest: dict[tuple, int] = {}
    for ev in events:
        if ev["group_seq"] is not None:
            key = (ev["group"], ev["group_seq"])
            latest[key] = max(latest.get(key, 0), ev["start_ns"])
    for ev in events:
        if ev.get("fr_end") == "unknown":
            if ev["group_seq"] is not None:
                ev["end_ns"] = latest[(ev["group"], ev["group_seq"])]
            ev["fr_end"] = "lower_bound"


def _memberships(dumps: dict[int, _Dump]) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """Group name -> global ranks: from pg_config when it lists them, else inferred (see module doc)."""
    members: dict[str, tuple[int, ...]] = {}
    mentioned: dict[str, set[int]] = {}
    default: set[str] = set()
    for d in dumps.values():
        cfg = d.data.get("pg_config")
        parsed: dict[int, tuple[int, ...]] = {}  # by id: a crafted pickle may share one huge string
        if isinstance(cfg, dict):
            for key, c in cfg.items():
                if isinstance(c, dict):
                    raw = c.get("ranks")
                    ranks = parsed.get(id(raw))
                    if ranks is None:
                        ranks = parsed[id(raw)] = _ranks_of(raw)
                    name = c.get("name") if isinstance(c.get("name"), (str, int)) and c.get("name") != "" else key
                    if ranks and str(name)[:200] not in members:
                        members[str(name)[:200]] = ranks
        for e in d.data["entries"]:
            try:
                name, desc = _pg(e)
            except (TypeError, AttributeError):
                continue
            mentioned.setdefault(name, set()).add(d.rank)
            if desc == "default_pg":
                default.add(name)
    inferred = set()
    everyone = tuple(sorted(dumps))
    for name, ranks in mentioned.items():
        if name not in members:
            members[name] = everyone if name in default else tuple(sorted(ranks))
            if name not in default:
                inferred.add(name)
    return members, inferred


def _dump_events(d: _Dump, members: dict[str, tuple[int, ...]], table: EventTable) -> list[dict]:
    out: list[dict] = []
    skipped, unknown = 0, set()
    backend = ""
    seen: set[int] = set()
    cache: dict = {}
    for e in d.data["entries"]:
        if id(e) in seen:  # the same object twice: only a crafted pickle does that
            skipped += 1
            continue
        seen.add(id(e))
        try:
            ev = _event(e, d.rank, members, cache)
        except _Unmapped as u:
            unknown.add(str(u)[:40])
            continue
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError):
            skipped += 1
            continue
        b = ev.pop("_backend")
        backend = backend or b
        out.append(ev)
    table.ranks[d.rank] = RankInfo(rank=d.rank, backend=backend, source=d.path)
    if skipped:
        table.warnings.append(f"{d.path}: skipped {skipped} malformed Flight Recorder entr{'y' if skipped == 1 else 'ies'}")
    if unknown:
        table.warnings.append(f"{d.path}: skipped entries of kinds disttrace does not map: {', '.join(sorted(unknown))}")
    return out


class _Unmapped(Exception):
    pass


_EMPTY: list = []


def _event(e: dict, rank: int, members: dict[str, tuple[int, ...]], cache: dict) -> dict:
    """One Flight Recorder entry -> a normalized event dict whose values are all valid for EventTable.append."""
    prof = e["profiling_name"]
    if not isinstance(prof, str):
        raise TypeError("profiling_name")
    backend, _, name = prof.partition(":")
    parts = name.split(" ")
    op = _OP.get(parts[0])
    if op is None:
        raise _Unmapped(parts[0] or prof)
    assert op in OPS
    pg_name, desc = _pg(e)
    ranks = members.get(pg_name, ())
    group = "world" if desc == "default_pg" else pg_name  # as the reader names torch's default group
    peer = None
    if op in ("send", "recv") and len(parts) > 1:
        a, sep, b = parts[1].partition("->" if op == "send" else "<-")
        local = int(b) if sep and b.strip().isdigit() and len(b) < 10 else None
        if local is not None:
            peer = ranks[local] if local < len(ranks) else None
    nbytes, dtype, shape = _nbytes(e.get("input_sizes") or _EMPTY, e.get("input_dtypes") or _EMPTY, cache)
    if nbytes == 0 and op == "recv":
        nbytes, dtype, shape = _nbytes(e.get("output_sizes") or _EMPTY, e.get("output_dtypes") or _EMPTY, cache)
    start = _int(e["time_created_ns"])
    state = e.get("state")
    retired = e.get("retired") is True
    done = state == "completed" or retired
    started = e.get("time_discovered_started_ns")
    completed = e.get("time_discovered_completed_ns")
    dur = e.get("duration_ms")
    end = None
    timing = None
    if type(dur) in (int, float) and 0 <= dur < 1e12:
        t0 = started if type(started) is int and started >= start else start
        end = _int(t0 + int(dur * 1e6))
        timing = "duration_ms"
    elif type(completed) is int and completed >= start:
        end = _int(completed)
        timing = "discovered_completed"
    elif done:
        end = start
        timing = "unknown"  # gloo: finished (retired) but no time recorded
    gseq = None
    if op not in ("send", "recv"):
        cs = e.get("collective_seq_id")
        gseq = _int(cs) - 1 if type(cs) is int and cs >= 1 else None
    seq = e.get("op_id")
    rid = e.get("record_id")
    ev = {
        "rank": rank, "op": op, "api": "fr:" + prof[:80], "group": group, "group_ranks": list(ranks),
        "group_seq": gseq, "seq": _int(seq) if type(seq) is int and 0 <= seq < _LIMIT else None,
        "peer": peer, "bytes": nbytes, "dtype": dtype, "shape": shape, "start_ns": start, "end_ns": end,
        "status": "ok" if done else "unfinished", "site": _site(e.get("frames")),
        "id": rid if type(rid) is int and 0 <= rid < _LIMIT else None,
        "fr_state": str(state)[:20] if state is not None else None,
        "_backend": backend[:20],
    }
    if timing:
        ev["fr_end"] = timing
    if op in ("send", "recv"):
        p2p = e.get("p2p_seq_id")
        if type(p2p) is int and 0 <= p2p < _LIMIT:
            ev["fr_p2p_seq"] = p2p
    return ev


__all__ = ["is_fr_dir", "load_fr_dir", "source_files"]
