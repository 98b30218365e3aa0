"""to_json(a): the report's --json, plain dicts with string rank keys (JSON objects need string keys).

Its keys are a "summary", then the fields of Analysis in their order, each in its plain form (`plain`) but where
core/results.py's field metadata leaves it out and the few whose JSON is not their plain form (`_EXPLICIT`)."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from math import isnan

from ...data.table import NONE
from ..core.results import JSON_IF_SET, NOT_IN_JSON, NULL, Analysis
from ..core.tables import CollectiveTable, P2PTable
from ..core.window import window_summary

_IN_SUMMARY = frozenset({"span_ns", "notes"})  # fields the summary holds


def to_json(a: Analysis, run=None, memory=None) -> dict:
    """`run`: the whole run over the black box's aggregates (waits/whole_run.py), its "run" key when set; `memory`:
    the memory analysis (memory/analyse.py's MemoryReport, of a trace recorded with --memory), its "memory" key."""
    t = a.table
    out = {"summary": {"events": len(t), "ranks": t.world_ranks(), "groups": [
        {"name": g.name, "ranks": list(g.ranks)} for g in t.groups],
        "start_ns": a.span_ns[0], "end_ns": a.span_ns[1], "warnings": list(t.warnings), "notes": list(a.notes)}}
    window = window_summary(t, a.instance_of, a.p2p_of, a.steps, a.steps_source == "marker")
    if window is not None:  # a black-box trace's windows (core/window.py); a whole trace has no "window"
        out["summary"]["window"] = window
    for name, v in _json_items(a):
        if name not in _IN_SUMMARY:
            explicit = _EXPLICIT.get(name)
            out[name] = plain(v) if explicit is None else explicit(a, v)
    if run is not None:  # (a run of weeks: its windows merged to at most whole_run.JSON_WINDOWS)
        from ..waits.whole_run import coarsened

        out["run"] = plain(coarsened(run))
    if memory is not None:
        out["memory"] = plain(memory)
    return out


def plain(v):
    """v as JSON values: a dataclass as a dict of its fields (as core/results.py's metadata says), a dict keyed by rank
    with string keys in rank order, lists and tuples as lists."""
    if type(v) in _SCALARS:  # most values (a step's dicts hold a number per rank): answered first
        return v
    if is_dataclass(v):
        return {name: plain(x) for name, x in _json_items(v)}
    if isinstance(v, dict):
        if v and isinstance(next(iter(v)), int):
            return {str(k): plain(x) for k, x in sorted(v.items())}
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v


_SCALARS = frozenset({int, float, str, bool, type(None)})
_FIELDS: dict[type, list[tuple[str, bool]]] = {}  # dataclass -> (name, left out when empty) of its JSON's fields


def _json_items(obj) -> list[tuple[str, object]]:
    """(name, value) of the fields of a dataclass instance that its JSON has (core/results.py's field metadata)."""
    cls = type(obj)
    spec = _FIELDS.get(cls)
    if spec is None:
        spec = _FIELDS[cls] = [(f.name, f.metadata.get("json") == JSON_IF_SET["json"]) for f in fields(cls)
                               if f.metadata.get("json") != NOT_IN_JSON["json"]]
    return [(name, v) for name, if_set in spec if (v := getattr(obj, name)) or not if_set]


def _rank_keys(a: Analysis) -> dict[int, str]:
    """rank -> its JSON key, made once."""
    t = a.table
    key = {r: str(r) for g in t.groups for r in g.ranks}
    key.update((r, str(r)) for r in t.ranks)
    return key


def _p2p(a: Analysis, m: P2PTable) -> dict:
    """The messages in sum (each message's waits are in its rows' events)."""
    return {"messages": len(m), "unmatched": sum(1 for s, r in zip(m.send, m.recv) if s == NONE or r == NONE),
            "late_sender_ns": sum(m.late_sender_ns), "late_receiver_ns": sum(m.late_receiver_ns)}


def _collectives(a: Analysis, ct: CollectiveTable) -> list[dict]:
    """One dict per instance, read from the table's columns (a view per instance would cost ~20 property reads)."""
    key = _rank_keys(a)
    t = ct.events
    groups, rank_c, start_c, end_c = t.groups, t.rank, t.start_ns, t.end_ns
    ops, kinds = ct.op.values, ct.wait_kind.values
    rows_c, waits_c, offset, missing = ct.rows, ct.waits, ct.offset, ct.missing
    out = []
    append = out.append
    for k, (op, kind, g, seq, nbytes, volume, skew, dur, algbw, busbw, model, slow, root, complete,
            last) in enumerate(zip(ct.op.codes, ct.wait_kind.codes, ct.gid, ct.group_seq, ct.bytes, ct.volume_bytes,
                                   ct.skew_ns, ct.duration_ns, ct.algbw_gbps, ct.busbw_gbps, ct.model_ns, ct.slow,
                                   ct.root, ct.complete, ct.last_arrival)):
        rows = rows_c[offset[k]:offset[k + 1]]
        keys = [key[rank_c[i]] for i in rows]
        ends = list(map(end_c.__getitem__, rows))
        if NONE in ends:  # the instance's own ends (an async op's wait() return where its end is unknown), or null
            ends = [None if e == NONE else e for e in ct.ends_of(k)]
        grp = groups[g]
        append({
            "op": ops[op], "group": grp.name, "group_ranks": list(grp.ranks), "group_seq": seq,
            "bytes": nbytes, "volume_bytes": volume,
            "start_ns": dict(zip(keys, map(start_c.__getitem__, rows))),
            "end_ns": dict(zip(keys, ends)),
            "wait_ns": dict(zip(keys, waits_c[offset[k]:offset[k + 1]])),
            "wait_kind": kinds[kind], "skew_ns": skew, "duration_ns": None if dur == NULL else dur,
            "algbw_gbps": None if isnan(algbw) else algbw, "busbw_gbps": None if isnan(busbw) else busbw,
            "model_ns": None if isnan(model) else model, "slow": bool(slow),
            "root": None if root == NONE else root, "complete": bool(complete), "last_arrival": last,
            "missing": list(missing.get(k, ())),
        })
    return out


# the fields whose JSON is not their plain form: (analysis, value) -> JSON
_EXPLICIT = {
    "collectives": _collectives,
    "p2p": _p2p,
    "steps_source": lambda a, v: v or None,  # "": none found
}
