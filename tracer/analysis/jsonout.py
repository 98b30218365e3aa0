"""to_json(a): the report's --json, plain dicts with string rank keys (JSON objects need string keys)."""

from __future__ import annotations

from dataclasses import asdict

from ..events import NONE
from .model import Analysis


def to_json(a: Analysis) -> dict:
    t = a.table
    groups = t.groups
    colls = []
    append = colls.append
    key = {r: str(r) for g in groups for r in g.ranks}  # rank -> its JSON key, made once
    key.update((r, str(r)) for r in t.ranks)
    for c in a.collectives:
        keys = [key[r] for r in c.ranks]
        ends = c.ends
        append({
            "op": c.op, "group": groups[c.gid].name, "group_ranks": list(c.group_ranks), "group_seq": c.group_seq,
            "bytes": c.bytes, "volume_bytes": c.volume_bytes,
            "start_ns": dict(zip(keys, c.starts)),
            "end_ns": dict(zip(keys, ends if NONE not in ends else [None if e == NONE else e for e in ends])),
            "wait_ns": dict(zip(keys, c.waits)),
            "wait_kind": c.wait_kind, "skew_ns": c.skew_ns, "duration_ns": c.duration_ns,
            "algbw_gbps": c.algbw_gbps, "busbw_gbps": c.busbw_gbps, "model_ns": c.model_ns, "slow": c.slow,
            "root": c.root, "complete": c.complete, "last_arrival": c.last_arrival, "missing": list(c.missing),
        })
    p = a.pipeline
    return {
        "summary": {"events": len(t), "ranks": t.world_ranks(), "groups": [
            {"name": g.name, "ranks": list(g.ranks)} for g in groups],
            "start_ns": a.span_ns[0], "end_ns": a.span_ns[1], "warnings": list(t.warnings), "notes": list(a.notes)},
        "collectives": colls,
        "waits": {str(r): w for r, w in sorted(a.waits.items())},
        "stragglers": [asdict(s) for s in a.stragglers],
        "links": [asdict(link) for link in a.links],
        "p2p": {"messages": len(a.p2p), "unmatched": sum(1 for m in a.p2p if m.send is None or m.recv is None),
                "late_sender_ns": sum(m.late_sender_ns for m in a.p2p),
                "late_receiver_ns": sum(m.late_receiver_ns for m in a.p2p)},
        "pipeline": None if p is None else {
            "stages": p.stages, "micro_batches": p.micro_batches, "bubble_fraction": p.bubble_fraction,
            "expected_fraction": p.expected_fraction, "per_stage": [asdict(s) for s in p.per_stage]},
        "problems": [{"kind": q.kind, "op": q.op, "group_ranks": list(q.group_ranks), "group_seq": q.group_seq,
                      "ranks": q.ranks, "message": q.message, "events": q.events, "time_ns": q.time_ns}
                     for q in a.problems],
        "models": {op: asdict(m) for op, m in a.models.items()},
    }
