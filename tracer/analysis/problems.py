"""Problems a person must act on: hang, mismatch, divergence, unmatched P2P, clock violations.

Each names the op, group and group_seq, the ranks concerned, and says in one sentence what to look at."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ..events import NONE, EventTable
from .matching import finished_at, last_event_of_rank
from .model import CollectiveInstance, P2PMatch, Problem
from .units import fmt_bytes, fmt_ns, fmt_ranks

if TYPE_CHECKING:
    from .tables import CollectiveTable, P2PTable

# ops whose every rank must pass the same dtype / byte count / shape
_SAME_INPUT = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather"})
_SAME_OUTPUT = frozenset({"all_reduce", "broadcast"})


def where(t: EventTable, i: int) -> str:
    """'all_reduce #3 of group world' (collectives) or 'send to rank 1' (P2P)."""
    op = t.op[i]
    if t.group_seq[i] != NONE:
        return f"{op} #{t.group_seq[i]} of group {t.groups[t.gid[i]].name}"
    if op in ("send", "recv"):
        return f"{op} {'to' if op == 'send' else 'from'} rank {t.peer[i]}"
    return op


def _site(t: EventTable, i: int) -> str:
    return f" at {t.site[i]}" if t.site[i] else ""


def _mismatches(t: EventTable, c: CollectiveInstance) -> list[str]:
    rows = c.events
    op, dtype, root, nbytes, shape = t.op, t.dtype, t.root, t.bytes, t.shape
    idx = list(rows.values())
    i0 = idx[0]
    sig0 = (op[i0], dtype[i0], root[i0], nbytes[i0], shape[i0])
    if all((op[i], dtype[i], root[i], nbytes[i], shape[i]) == sig0 for i in idx):
        return []  # the common case, checked cheaply
    what = []
    for name, col in (("op", t.op), ("dtype", t.dtype), ("root", t.root)):
        vals = {r: col[i] for r, i in rows.items()}
        if name == "dtype" and (c.op not in _SAME_INPUT or not all(vals.values())):
            continue
        if name == "root" and all(v == NONE for v in vals.values()):
            continue
        if len(set(vals.values())) > 1:
            what.append(_describe_values(name, vals))
    if c.op in _SAME_INPUT and len({t.op[i] for i in rows.values()}) == 1:
        vals = {r: t.bytes[i] for r, i in rows.items()}
        if len(set(vals.values())) > 1:
            what.append(_describe_values("bytes", vals, fmt_bytes))
        # a shape is a list of ints; anything else in a damaged trace is not compared
        shapes = {r: tuple(t.shape[i]) for r, i in rows.items()
                  if isinstance(t.shape[i], list) and all(type(d) is int for d in t.shape[i])}
        if len(shapes) == len(rows) and len(set(shapes.values())) > 1:
            what.append(_describe_values("shape", {r: list(s) for r, s in shapes.items()}))
    return what


def _describe_values(name: str, vals: dict, fmt=str) -> str:
    by_value: dict = {}
    for r, v in sorted(vals.items()):
        by_value.setdefault(v if not isinstance(v, list) else tuple(v), []).append(r)
    parts = [f"{fmt_ranks(rs)} {name} {fmt(list(v) if isinstance(v, tuple) else v)}" for v, rs in by_value.items()]
    return "; ".join(parts)


def find_problems(t: EventTable, collectives: CollectiveTable, p2p: P2PTable,
                  suspects: set[int] | None = None) -> list[Problem]:
    """suspects: indices of the instances whose ranks' arguments differ (None: check every instance)."""
    problems: list[Problem] = []
    last = None
    cascade: dict[int, Problem] = {}  # group -> its first op mismatch; later ones only counted
    cascade_n: Counter = Counter()
    has_out = t.out.any()  # no summaries recorded: no divergence to look for
    complete_c, op_c = collectives.complete, collectives.op
    for k in range(len(collectives)):
        # most instances have nothing to look at: no view is made for them
        if complete_c[k] and suspects is not None and k not in suspects and not (has_out and op_c[k] in _SAME_OUTPUT):
            continue
        c = collectives[k]
        rows = c.events
        if len(rows) > 1 and (suspects is None or k in suspects):
            what = _mismatches(t, c)
            if what:
                is_op = len({t.op[i] for i in rows.values()}) > 1
                if is_op and c.gid in cascade:
                    cascade_n[c.gid] += 1
                    continue
                p = Problem("mismatch", c.op, c.group_ranks, c.group_seq, sorted(rows),
                            f"{c.op} #{c.group_seq} of group {t.groups[c.gid].name} disagrees across ranks: "
                            f"{'; '.join(what)}. Every rank must make the same call with the same arguments here"
                            f"{_site(t, next(iter(rows.values())))}.",
                            sorted(rows.values()), min(c.start_ns.values()))
                problems.append(p)
                if is_op:
                    cascade[c.gid] = p
                continue  # a mismatch explains the hang that usually follows it
        if not c.complete:
            if last is None:
                last = last_event_of_rank(t)
            problems.append(_hang(t, c, last))
        elif has_out and c.op in _SAME_OUTPUT:
            p = _divergence(t, c)
            if p:
                problems.append(p)
    for gid, n in cascade_n.items():
        p = cascade[gid]
        p.message += (f" {n} later collective(s) of this group also disagree: the ranks' sequences of calls diverged "
                      f"here (a rank skipped or added a collective).")
    problems += _p2p_problems(t, p2p)
    problems += _clock_violations(t, collectives, p2p)
    return problems


def _hang(t: EventTable, c: CollectiveInstance, last: dict[int, int]) -> Problem:
    name = f"{c.op} #{c.group_seq} of group {t.groups[c.gid].name}"
    entered = sorted(c.events)
    failed = [r for r, i in c.events.items() if t.status[i] != "ok" or finished_at(t, i) == NONE]
    rows = sorted(c.events.values())
    if c.missing:
        waves = []
        for r in c.missing:
            i = last.get(r)
            if i is None:
                waves.append(f"rank {r} has no events")
            else:
                rows.append(i)
                end = finished_at(t, i)
                first = min(c.start_ns.values())
                if end == NONE:
                    state = "it is still in it"
                elif end <= first:
                    state = f"it finished {fmt_ns(first - end)} before the others entered this one"
                else:
                    state = f"it finished {fmt_ns(end - first)} after the others had entered this one"
                waves.append(f"rank {r}'s last event is {where(t, i)}{_site(t, i)} ({state})")
        msg = (f"{name} never completed: {fmt_ranks(entered)} entered it"
               f"{_site(t, rows[0])} but {fmt_ranks(c.missing)} never did; {'; '.join(waves)}. "
               f"Look at why {fmt_ranks(c.missing)} did not reach this call.")
        ranks = list(c.missing)
    else:
        errors = {t.error[c.events[r]] for r in failed if t.error[c.events[r]]}
        err = f" (error: {str(next(iter(errors)))[:160]})" if errors else ""
        msg = (f"{name} never finished on {fmt_ranks(failed)} although every rank entered it{err}; "
               f"check the backend and the peers' processes.")
        ranks = failed
    return Problem("hang", c.op, c.group_ranks, c.group_seq, ranks, msg, rows, min(c.start_ns.values()))


def _divergence(t: EventTable, c: CollectiveInstance) -> Problem | None:
    sums = {}
    for r, i in c.events.items():
        out = t.out[i]
        if isinstance(out, dict) and out.get("checksum") is not None:
            sums[r] = out["checksum"]
    if len(sums) < 2 or len(set(sums.values())) < 2:
        return None
    majority, _ = Counter(sums.values()).most_common(1)[0]
    odd = sorted(r for r, s in sums.items() if s != majority)
    if len(odd) * 2 == len(sums):  # a tie: name everyone
        odd = sorted(sums)
    return Problem("divergence", c.op, c.group_ranks, c.group_seq, odd,
                   f"after {c.op} #{c.group_seq} of group {t.groups[c.gid].name} the output of {fmt_ranks(odd)} "
                   f"differs from the other ranks' (checksums differ): the replicas are no longer identical.",
                   sorted(c.events.values()), max(c.start_ns.values()))


def _p2p_problems(t: EventTable, p2p: P2PTable) -> list[Problem]:
    unmatched: dict[tuple[int, int], list[P2PMatch]] = {}
    out = []
    for m in p2p:
        if m.send is None or m.recv is None:
            unmatched.setdefault((m.src, m.dst), []).append(m)
        elif t.bytes[m.send] and t.bytes[m.recv] and t.bytes[m.send] != t.bytes[m.recv]:
            out.append(Problem("mismatch", "send", (m.src, m.dst), None, [m.src, m.dst],
                               f"message #{m.order} from rank {m.src} to rank {m.dst}: the send has "
                               f"{fmt_bytes(t.bytes[m.send])} but the recv expects {fmt_bytes(t.bytes[m.recv])}"
                               f"{_site(t, m.send)}.", [m.send, m.recv], t.start_ns[m.send]))
    for (src, dst), ms in unmatched.items():
        sends = [m.send for m in ms if m.send is not None]
        recvs = [m.recv for m in ms if m.recv is not None]
        rows = sends + recvs
        if sends:
            i = sends[0]
            msg = (f"{len(sends)} send(s) from rank {src} to rank {dst} have no matching recv on rank {dst} "
                   f"(first{_site(t, i)}, {fmt_bytes(t.bytes[i])})")
        elif src < 0:  # a recv from any source that never got a message
            i = recvs[0]
            msg = (f"{len(recvs)} recv(s) on rank {dst} from any rank never received a message "
                   f"(first{_site(t, i)}, {fmt_bytes(t.bytes[i])})")
        else:
            i = recvs[0]
            msg = (f"{len(recvs)} recv(s) on rank {dst} from rank {src} have no matching send on rank {src} "
                   f"(first{_site(t, i)}, {fmt_bytes(t.bytes[i])})")
        if sends and recvs:
            msg += f", and {len(recvs)} recv(s) the other way round"
        out.append(Problem("unmatched", t.op[i], (src, dst), None, sorted({r for r in (src, dst) if r >= 0}),
                           msg + ": every send needs a recv with the same peer and tag, in the same order.",
                           rows, t.start_ns[i]))
    return out


def _clock_violations(t: EventTable, collectives: CollectiveTable, p2p: P2PTable) -> list[Problem]:
    """Effects before causes: a recv done before its send began, a collective done before its last rank arrived.
    The tolerance is the clock alignment's own uncertainty."""
    unc = {r: info.clock_uncertainty_ns for r, info in t.ranks.items()}
    worst: dict[tuple[int, int], list] = {}  # (early rank, late rank) -> [count, worst ns, rows]

    def note(early: int, late: int, by: int, rows: list[int]) -> None:
        if by <= unc.get(early, 0) + unc.get(late, 0):
            return
        w = worst.setdefault((early, late), [0, 0, rows])
        w[0] += 1
        if by > w[1]:
            w[1], w[2] = by, rows

    for m in p2p:
        if m.send is not None and m.recv is not None:
            end = finished_at(t, m.recv)
            if end != NONE and end < t.start_ns[m.send]:
                note(m.dst, m.src, t.start_ns[m.send] - end, [m.send, m.recv])
    kinds, complete_c, offset, row_c = collectives.wait_kind, collectives.complete, collectives.offset, collectives.rows
    nxn = {code for code, kind in enumerate(kinds.values) if kind in ("wait_at_nxn", "wait_at_barrier")}
    start_c = t.start_ns
    for k, code in enumerate(kinds.codes):
        if not complete_c[k] or code not in nxn or offset[k + 1] - offset[k] < 2:
            continue
        rows = row_c[offset[k]:offset[k + 1]]
        latest = max(map(start_c.__getitem__, rows))
        ends = collectives.ends_of(k)  # complete: every rank finished
        if min(ends) >= latest:
            continue
        c = collectives[k]
        for r, e, i in zip(c.ranks, ends, rows):
            if e < latest:
                note(r, c.last_arrival, latest - e, [i, c.row_of(c.last_arrival)])
    out = []
    for (early, late), (n, by, rows) in sorted(worst.items()):
        out.append(Problem("clock", None, (early, late), None, [early, late],
                           f"{n} event(s) on rank {early} finish before their cause on rank {late} began (by up to "
                           f"{fmt_ns(by)}): the two ranks' clocks are not aligned (different hosts without a clock "
                           f"sync?); waits between them are not trustworthy.", rows, t.start_ns[rows[0]]))
    return out
