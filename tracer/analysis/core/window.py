"""The window of a black-box trace: which of its ops the analysis may match (docs/ARCHITECTURE.md, "Black-box rings").

A black-box rank keeps its last ops in a ring (data/importers/ring.py): its records start wherever the ring had
overwritten them, at another op on each rank. An op that one rank's window holds and another's had overwritten is
outside the window: not missing, not a death, not a hang, not a mismatch, not a desync. So:
- collectives: each group's window starts at the latest first op of its members, by the group's own sequence
  numbers ("gs"), never by position from the job's start: a member whose window holds none of the group's ops
  starts it at the first instance begun after its oldest record. Instances before it are left out of matching.
- point-to-point: messages of a (src, dst, tag) are in order on both sides, but a ring's first send is not the
  pair's first message. Where every side of the pair carries its number (`pair_seq`, recorded since 2026-11-29),
  send n pairs with recv n. Else the sides are aligned at the last message known to have arrived: the last recv
  that finished pairs with the last send begun before that recv ended (a later send can be no earlier message's);
  without one, at the ends. Sends and recvs before the other side's first one are outside the window (but for
  an op that never finished, a message that never arrived).
- the end, of a snapshot of a live job (`disttrace snapshot`, SIGUSR1: RankInfo.ring["live"]): each rank's ring
  was copied at another moment, up to seconds apart, while the job went on; and of any trace dir read while its
  job runs (with or without rings: each rank's file read at its own moment). The window ends at the earliest copy
  or read (the least of the ranks' RankInfo.live_ns, `live_end`): an op begun after it is outside the window, and so is
  a collective or a message in flight at it (begun before, not over on every rank by then) that had been in flight
  for less than IN_FLIGHT_NS, or IN_FLIGHT_TIMES the longest op the window saw over: neither a death nor a hang,
  but what the job was doing when it was asked. One in flight for longer is what it looks like: a hang.
Traces without rings (RankInfo.ring None on every rank) are matched from the job's start, and end as above where
they were read while the job ran.

Imports neither torch nor textual; numpy on use.
"""

from __future__ import annotations

from ...data.table import COLLECTIVE_OPS, NONE, EventTable
from ...data.table.columns import order_by, run_starts, typecode
from ...units import fmt_ns


IN_FLIGHT_NS = 1_000_000_000  # a live snapshot's op in flight at its end for less: what the job was doing then
IN_FLIGHT_TIMES = 4           # ... or for less than this many times the longest op the window saw over


def rings(t: EventTable) -> dict[int, dict]:
    """rank -> its ring's window (RankInfo.ring), of the black-box ranks."""
    return {r: info.ring for r, info in t.ranks.items() if getattr(info, "ring", None)}


def live_end(t: EventTable, fin) -> tuple[int, int] | None:
    """(the end of a live snapshot's window, the least time in flight that is not the cut's) or None: not a live
    snapshot. The end: the earliest of the live ranks' copies or reads. `fin`: matching.finished_column(t)."""
    import numpy as np

    ends = [info.live_ns for info in t.ranks.values() if info.live_ns != NONE]
    if not ends:
        return None
    start = np.frombuffer(t.start_ns, np.int64)
    over = (fin != NONE) & (fin >= start)
    longest = int((fin[over] - start[over]).max()) if over.any() else 0
    return min(ends), max(IN_FLIGHT_NS, IN_FLIGHT_TIMES * longest)


def at_the_cut(cut: tuple[int, int], order, heads, start, fin, members):
    """(outside, sizes) of groups of rows, the rows `order` in runs that begin at `heads` (a collective instance's
    rows, a message's sides): which groups are outside a live snapshot's end (see the module's docstring), begun
    after it, or not over on every side by then (fewer than `members` rows, or a row never finished or finishing
    after it) and begun less than cut[1] before it; and each group's number of rows."""
    import numpy as np

    end, slack = cut
    never = np.iinfo(np.int64).max
    first = np.minimum.reduceat(start[order], heads)
    last = np.maximum.reduceat(np.where(fin[order] == NONE, never, fin[order]), heads)
    sizes = np.diff(np.append(heads, len(order)))
    in_flight = (sizes < members) | (last == never) | (last > end)
    return (first > end) | (in_flight & (first > end - slack)), sizes


def collective_starts(t: EventTable, rows, gid, seq, start) -> dict[int, int]:
    """gid -> the first group_seq of the group's window, for the groups that have one (a ring among their
    members). `rows`: the collective rows; gid, seq, start: numpy columns of those rows."""
    import numpy as np

    boxes = rings(t)
    if not boxes or not len(rows):
        return {}
    rank = np.frombuffer(t.rank, np.int32)[rows].astype(np.int64)
    order = order_by(rank, gid, seq)  # each (rank, group)'s first row: its lowest group_seq
    at = order[run_starts(rank[order], gid[order])]
    first = dict(zip(zip(rank[at].tolist(), gid[at].tolist()), seq[at].tolist()))
    out = {}
    for g in set(gid.tolist()):
        members = [r for r in t.groups[g].ranks if r in boxes] if t.groups[g].ranks else \
            sorted({r for (r, gg) in first if gg == g and r in boxes})
        if not members:
            continue
        mine = gid == g
        out[g] = max(first[(r, g)] if (r, g) in first else
                     _first_after(seq[mine], start[mine], boxes[r].get("start_ns", NONE)) for r in members)
    return out


def _first_after(seq, start, since: int) -> int:
    """The first group_seq of the instances begun (by any member) at or after `since`: where a member whose ring
    holds none of the group's ops starts the group's window (beyond the last instance: none is in it)."""
    import numpy as np

    order = np.argsort(seq, kind="stable")
    s, st = seq[order], start[order]
    cuts = np.flatnonzero(np.diff(s)) + 1
    firsts = np.minimum.reduceat(st, np.concatenate(([0], cuts))) if len(s) else st
    later = np.flatnonzero(firsts >= since)
    uniq = s[np.concatenate(([0], cuts))] if len(s) else s
    return int(uniq[later[0]]) if len(later) else int(s.max()) + 1 if len(s) else 0


def align_p2p(t: EventTable, src, dst, tag, is_send, row, nth, start, fin):
    """(keep, nth): which message sides of build_p2p's columns are in the window, and their order numbers with the
    recvs' moved onto their sends' (see the module's docstring). Unchanged where neither rank has a ring, but
    for a live read's end."""
    import numpy as np

    boxes = rings(t)
    keep = np.ones(len(row), bool)
    nth = nth.copy()
    unc = {r: max(0, info.clock_uncertainty_ns) for r, info in t.ranks.items()}
    numbers = np.frombuffer(t.pair_seq, np.int64)[row]
    done = fin[row] != NONE
    order = order_by(src, dst, tag, ~is_send, nth)  # each pair and tag's sends, then its recvs, in order
    cuts = np.flatnonzero(run_starts(src[order], dst[order], tag[order])).tolist() + [len(order)] if boxes else []
    for a, b in zip(cuts, cuts[1:]):
        s_, d_ = int(src[order[a]]), int(dst[order[a]])
        if s_ not in boxes and d_ not in boxes:
            continue
        mine = order[a:b]
        sends, recvs = mine[is_send[mine]], mine[~is_send[mine]]
        if (numbers[mine] != NONE).all():  # numbered: send n is recv n's message
            nth[mine] = numbers[mine]
            first_send = nth[sends].min() if len(sends) else None
            first_recv = nth[recvs].min() if len(recvs) else None
            # (an op never finished is never outside: had its peer's op been overwritten, it would have completed)
            for side, other in ((sends, first_recv), (recvs, first_send)):
                keep[side[done[side] & ((nth[side] < other) if other is not None else True)]] = False
            continue
        shift = _shift(row[sends], row[recvs], start, fin, unc.get(s_, 0) + unc.get(d_, 0))
        nth[recvs] -= shift
        keep[recvs[(nth[recvs] < 0) & done[recvs]]] = False
        keep[sends[(nth[sends] + shift < 0) & done[sends]]] = False
    cut = live_end(t, fin)
    if cut is not None:
        keep &= ~_messages_at_the_cut(cut, src, dst, tag, nth, keep, start[row], fin[row])
    return keep, nth


def _messages_at_the_cut(cut, src, dst, tag, nth, keep, start, fin):
    """Which message sides (of those kept) are of messages outside a live snapshot's end (at_the_cut)."""
    import numpy as np

    idx = np.flatnonzero(keep)
    out = np.zeros(len(keep), bool)
    if not len(idx):
        return out
    order = idx[order_by(src[idx], dst[idx], tag[idx], nth[idx])]
    heads = np.flatnonzero(run_starts(src[order], dst[order], tag[order], nth[order]))
    outside, sizes = at_the_cut(cut, order, heads, start, fin, 2)
    out[order] = np.repeat(outside, sizes)
    return out


def _shift(sends, recvs, start, fin, slack: int) -> int:
    """How many more of the pair's recvs than sends the windows hold before their common messages: recv j pairs
    with send j - shift."""
    import numpy as np

    done = np.flatnonzero(fin[recvs] != NONE)
    if len(done) and len(sends):
        j = int(done[-1])
        before = np.flatnonzero(start[sends] <= fin[recvs[j]] + slack)
        if len(before):
            return j - int(before[-1])
    return len(recvs) - len(sends)


def window_summary(t: EventTable, instance_of=None, p2p_of=None, steps=(), marked: bool = False) -> dict | None:
    """What a black-box trace's windows hold (the report's summary "window"; None: no rings): per rank its ops, and
    over the ranks the fewest and most ops, the steps every rank holds whole (the first and last by the job's
    numbers where it `marked` them, else how many the analysis found in the window: Step objects), the
    time from the latest window's start to the last record, the ends and waits dropped (their begin overwritten),
    and the ops one rank's window holds but a peer's had overwritten (`outside`: not matched; from the analysis'
    instance_of and p2p_of)."""
    import numpy as np

    boxes = rings(t)
    if not boxes:
        return None
    outside = 0
    if instance_of is not None and p2p_of is not None and len(t):
        codes = np.frombuffer(t.op.codes, typecode(t.op.codes))
        is_coll = np.array([v in COLLECTIVE_OPS for v in t.op.values] + [False], bool)[codes]
        is_p2p = np.array([v in ("send", "recv") for v in t.op.values] + [False], bool)[codes]
        seq = np.frombuffer(t.group_seq, np.int64)
        outside = int((is_coll & (seq >= 0) & (np.frombuffer(instance_of, np.int32) < 0)).sum()
                      + (is_p2p & (np.frombuffer(p2p_of, np.int32) < 0)).sum())
    starts = [b["start_ns"] for b in boxes.values() if b.get("start_ns", NONE) != NONE]
    ends = [b["end_ns"] for b in boxes.values() if b.get("end_ns", NONE) != NONE]
    common = (max(starts), max(ends)) if starts and ends else (NONE, NONE)
    inside = [s.index for s in steps if not s.outside]
    ops = [b.get("ops", 0) for b in boxes.values()]
    asked = {b.get("ring_ops") for b in boxes.values()} - {None}
    return {"ranks": sorted(boxes), "ops": {str(r): boxes[r].get("ops", 0) for r in sorted(boxes)},
            "min_ops": min(ops), "max_ops": max(ops), "ring_ops": max(asked) if asked else None,
            "wrapped": sorted(r for r, b in boxes.items() if b.get("wraps")),
            "dropped": sum(b.get("dropped", 0) for b in boxes.values()),
            "steps": [inside[0], inside[-1]] if marked and inside else None, "found_steps": len(inside),
            "start_ns": common[0], "end_ns": common[1],
            "span_ns": common[1] - common[0] if common[0] != NONE and common[1] > common[0] else 0,
            "outside": outside, "live": any(b.get("live") for b in boxes.values())}


def live_read_sentence(ranks: list[int]) -> str:
    """The report's line on a trace read while its job ran (RankInfo.live_ns of its own files, not a snapshot's)."""
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
    return (f"the job was running ({who} on this host): each rank's file was read at its own moment, so the trace "
            "ends at the earliest read; what was in flight then, or begun after, is left out (not a hang, not a "
            "death). Report again for a later view, or once the job has ended for the whole run.")


def window_sentence(w: dict) -> str:
    """The report's line on a black-box trace: what its windows hold."""
    ops = f"{w['min_ops']:,}" if w["min_ops"] == w["max_ops"] else f"{w['min_ops']:,}–{w['max_ops']:,}"
    steps = (f"steps {w['steps'][0]:,}–{w['steps'][1]:,}" if w["steps"] else
             f"{w['found_steps']} step(s) found" if w["found_steps"] else "no steps found")
    if not w["wrapped"]:  # (no ring has wrapped yet: they hold the whole run)
        parts = [f"black-box trace: no ring has wrapped, they hold every op of the run ({ops} a rank, {steps})"]
    else:
        parts = [f"black-box trace: a window, not the whole run: the rings hold the last {ops} ops of each rank "
                 f"({steps}, {fmt_ns(w['span_ns'])} held by every rank)"]
    if w.get("live"):
        parts.append("a snapshot of the job as it ran: each rank's ring was copied at another moment, and the window "
                     "ends at the earliest copy (what was in flight then is not a hang)")
    if w["outside"]:
        why = "a peer's had overwritten, or had not recorded when it was copied" if w.get("live") else \
            "a peer's had overwritten"
        parts.append(f"{w['outside']:,} op(s) that one rank's ring holds and {why} are outside the window (not "
                     f"matched, not missing)")
    if w["dropped"]:
        parts.append(f"{w['dropped']:,} end(s) whose begin the ring had overwritten dropped")
    return "; ".join(parts) + "."


__all__ = ["align_p2p", "at_the_cut", "collective_starts", "live_end", "live_read_sentence", "rings",
           "window_sentence", "window_summary"]
