"""to_json(a): the report's --json, plain dicts with string rank keys (JSON objects need string keys)."""

from __future__ import annotations

from dataclasses import asdict
from math import isnan

from ..data.events import NONE
from .model import NULL, Analysis
from .tables import CollectiveTable


def to_json(a: Analysis) -> dict:
    t = a.table
    groups = t.groups
    key = {r: str(r) for g in groups for r in g.ranks}  # rank -> its JSON key, made once
    key.update((r, str(r)) for r in t.ranks)
    colls = _collectives(a.collectives, key)
    p, m = a.pipeline, a.p2p
    return {
        "summary": {"events": len(t), "ranks": t.world_ranks(), "groups": [
            {"name": g.name, "ranks": list(g.ranks)} for g in groups],
            "start_ns": a.span_ns[0], "end_ns": a.span_ns[1], "warnings": list(t.warnings), "notes": list(a.notes)},
        "collectives": colls,
        "waits": {str(r): w for r, w in sorted(a.waits.items())},
        "stragglers": [asdict(s) for s in a.stragglers],
        "links": [asdict(link) for link in a.links],
        "p2p": {"messages": len(m), "unmatched": sum(1 for s, r in zip(m.send, m.recv) if s == NONE or r == NONE),
                "late_sender_ns": sum(m.late_sender_ns), "late_receiver_ns": sum(m.late_receiver_ns)},
        "pipeline": None if p is None else {
            "stages": p.stages, "micro_batches": p.micro_batches, "bubble_fraction": p.bubble_fraction,
            "expected_fraction": p.expected_fraction, "per_stage": [asdict(s) for s in p.per_stage],
            "iterations": p.iterations, "slow_stage": p.slow_stage, "slow_factor": p.slow_factor},
        "problems": [_problem(q) for q in a.problems],
        "models": {op: asdict(m) for op, m in a.models.items()},
        "steps": [{"index": s.index, "start_ns": s.start_ns, "end_ns": s.end_ns,
                   "wait_ns": {str(r): w for r, w in sorted(s.wait_ns.items())},
                   "caused_ns": {str(r): w for r, w in sorted(s.caused_ns.items())},
                   "late_rank": s.late_rank, "warmup": s.warmup} for s in a.steps],
        "steps_source": a.steps_source or None,
        "straggler": None if a.straggler is None else asdict(a.straggler),
    }


def _problem(q) -> dict:
    d = {"kind": q.kind, "op": q.op, "group_ranks": list(q.group_ranks), "group_seq": q.group_seq, "ranks": q.ranks,
         "message": q.message, "events": q.events, "time_ns": q.time_ns}
    if q.where:
        d["where"] = {str(r): w for r, w in sorted(q.where.items())}
    return d


def _collectives(ct: CollectiveTable, key: dict[int, str]) -> list[dict]:
    """One dict per instance, read from the table's columns (a view per instance would cost ~20 property reads)."""
    t = ct.events
    groups, rank_c, start_c = t.groups, t.rank, t.start_ns
    ops, kinds = ct.op.values, ct.wait_kind.values
    rows_c, waits_c, offset, missing = ct.rows, ct.waits, ct.offset, ct.missing
    out = []
    append = out.append
    for k, (op, kind, g, seq, nbytes, volume, skew, dur, algbw, busbw, model, slow, root, complete, is_async,
            last) in enumerate(zip(ct.op.codes, ct.wait_kind.codes, ct.gid, ct.group_seq, ct.bytes, ct.volume_bytes,
                                   ct.skew_ns, ct.duration_ns, ct.algbw_gbps, ct.busbw_gbps, ct.model_ns, ct.slow,
                                   ct.root, ct.complete, ct.is_async, ct.last_arrival)):
        rows = rows_c[offset[k]:offset[k + 1]]
        keys = [key[rank_c[i]] for i in rows]
        ends = ct.ends_of(k)
        if NONE in ends:
            ends = [None if e == NONE else e for e in ends]
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
