"""Problems a person must act on: a mismatch, a rank that died, a hang, an op that raised, the first non-finite
values, diverged replicas, unmatched P2P messages, clock violations.

Each names the op, group and group_seq, the ranks concerned, and says in one sentence what to look at. They come
worst first: what stopped or broke the job (mismatch, died, hang, error), then what made its results wrong
(nonfinite, divergence), then unmatched messages and clock violations; within each, in the order they happened
(the cause usually first: a size mismatch, then the error and the death it led to).

Damage is never a finding. A collective that never completed is a hang only when a rank really stopped short of
it: a rank with no record of it that entered later collectives of the group lost that record, a rank that never
finished it but finished later ones lost its end (both said in the warnings); a rank whose trace stops while the
others went on (finished ops it never reached) is one `died` problem, which takes in every collective left
incomplete by its absence; and what a damaged file (a skipped record, a torn end) leaves unexplained is withheld
with a warning rather than claimed."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from ...data.table.columns import as_int64, order_by, repeat_each, run_starts
from ...data.table import NONE, EventTable, stacks_site
from ..core.matching import finished_at, finished_column, last_event_of_rank
from ..core.window import rings
from . import nonfinite_scan
from ..core.results import CollectiveInstance, P2PMatch, Problem
from ...units import fmt_bytes, fmt_ns, fmt_ranks

if TYPE_CHECKING:
    from ..core.tables import CollectiveTable, P2PTable

# ops whose every rank must pass the same dtype / byte count / shape
_SAME_INPUT = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather"})
_SAME_OUTPUT = frozenset({"all_reduce", "broadcast"})
# the order problems are listed in: by class (the job broke, its results are wrong, the rest), then by time
_CLASS = {"mismatch": 0, "died": 0, "hang": 0, "error": 0, "nonfinite": 1, "divergence": 1, "unmatched": 2,
          "clock": 2}
_KIND_ORDER = {k: n for n, k in enumerate(_CLASS)}  # ties: the cause before what follows from it


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
        # no bytes and no dtype: a size the trace does not know (an imported kernel without its host op)
        vals = {r: t.bytes[i] for r, i in rows.items() if t.bytes[i] or t.dtype[i]}
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


def find_problems(t: EventTable, collectives: CollectiveTable, p2p: P2PTable, suspects: set[int], nonfinite: tuple,
                  step_of) -> list[Problem]:
    """suspects: indices of the instances whose ranks' arguments differ (comms/collectives.py); nonfinite: the rows
    nonfinite_rows found; step_of: each row's step (each problem is in the latest step of its events). Damage the
    analysis finds (lost records) is added to t.warnings."""
    problems: list[Problem] = []
    incomplete: list[tuple[int, bool]] = []  # instances that never completed; True: a mismatch explains it
    cascade: dict[int, Problem] = {}  # group -> its first op mismatch; later ones only counted
    cascade_n: Counter = Counter()
    has_out = t.out.any()  # no summaries recorded: no divergence to look for
    complete_c, op_c = collectives.complete, collectives.op
    for k in range(len(collectives)):
        # most instances have nothing to look at: no view is made for them
        if complete_c[k] and k not in suspects and not (has_out and op_c[k] in _SAME_OUTPUT):
            continue
        c = collectives[k]
        rows = c.events
        if len(rows) > 1 and k in suspects:
            what = _mismatches(t, c)
            if what:
                if not c.complete:
                    incomplete.append((k, True))  # a mismatch explains the hang that usually follows it
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
                continue
        if not c.complete:
            incomplete.append((k, False))
        elif has_out and c.op in _SAME_OUTPUT:
            p = _divergence(t, c)
            if p:
                problems.append(p)
    for gid, n in cascade_n.items():
        p = cascade[gid]
        p.message += (f" {n} later collective(s) of this group also disagree: the ranks' sequences of calls diverged "
                      f"here (a rank skipped or added a collective).")
    reach = _Reach(t) if incomplete or _unmatched(p2p) else None
    dead: dict[int, _Death] = {}
    gave_up: set[int] = set()  # rows that timed out waiting in a hang: that hang's, not errors of their own
    if incomplete:
        problems += _stalls(t, collectives, incomplete, reach, dead, gave_up)
    problems += _errors(t, gave_up)
    problems += _nonfinite(t, nonfinite)
    problems += _p2p_problems(t, p2p, dead)
    problems += [_died(t, d, reach) for d in dead.values()]
    problems += _clock_violations(t, collectives, p2p)
    problems.sort(key=lambda q: (_CLASS.get(q.kind, 3), q.time_ns if q.time_ns is not None else 0,
                                 _KIND_ORDER.get(q.kind, 99)))
    for q in problems:  # (the latest step any of its events is in: where a hang or a death stopped the job)
        q.step = max((step_of[i] for i in q.events if 0 <= i < len(step_of) and step_of[i] >= 0), default=None)
    return problems


class _Reach:
    """How far each rank got: per (rank, group) the highest group_seq it entered and the highest it finished; per
    rank its last event and the time of its last sign of life (an op's start or end, a stacks record)."""

    def __init__(self, t: EventTable):
        import numpy as np

        # (in numpy: a Python loop over every row is slow on a large trace, and a hung job's trace is what this is for)
        rank, gid = (np.frombuffer(c, np.int32).astype(np.int64) for c in (t.rank, t.gid))
        seq, start = np.frombuffer(t.group_seq, np.int64), np.frombuffer(t.start_ns, np.int64)
        end = finished_column(t)
        self.entered = _highest(seq, seq >= 0, rank, gid)
        self.done = _highest(seq, (seq >= 0) & (end != NONE), rank, gid)
        live = np.maximum(start, end)
        alive = {r: v for (r,), v in _highest(live, live > -1, rank).items()}
        for r, recs in t.stacks.items():
            alive[r] = max([alive.get(r, -1)] + [rec["t"] for rec in recs])
        self.alive = alive
        self.last = last_event_of_rank(t)


def _highest(values, keep, *keys) -> dict[tuple, int]:
    """The largest of `values` over the rows `keep` of each distinct tuple of `keys` (numpy columns)."""
    import numpy as np

    rows = np.flatnonzero(keep)
    if not len(rows):
        return {}
    rows = rows[order_by(*(k[rows] for k in keys))]
    ks = [k[rows] for k in keys]
    first = np.flatnonzero(run_starts(*ks))
    top = np.maximum.reduceat(values[rows], first)
    return dict(zip(zip(*(k[first].tolist() for k in ks)), top.tolist()))


class _Death:
    """A rank whose trace stops while the others went on, and the collectives left incomplete by its absence."""

    def __init__(self, rank: int):
        self.rank = rank
        self.instances: list[int] = []   # collectives it never entered or never finished
        self.later = 0                   # of those, the ones it never entered: the others went on without it
        self.messages = 0                # P2P messages whose side on this rank is missing


def _blocked(t: EventTable, ct: CollectiveTable, k: int, reach: _Reach):
    """(absent, stuck, lost) ranks of instance k: those that never entered it and entered nothing later in its
    group, those inside it that never finished it nor anything later in its group, and those whose record of it
    was lost (they entered, or finished, later collectives of the group)."""
    g, s = ct.gid[k], ct.group_seq[k]
    absent, stuck, lost = [], [], []
    for r in ct.missing.get(k, ()):
        if reach.entered.get((r, g), -1) > s:
            lost.append((r, "begin"))
        else:
            absent.append(r)
    for i in ct.rows_of(k):
        if finished_at(t, i) == NONE:
            r = t.rank[i]
            if reach.done.get((r, g), -1) > s:
                lost.append((r, "end"))
            else:
                stuck.append(r)
    return absent, stuck, lost


def _stalls(t: EventTable, ct: CollectiveTable, incomplete: list[tuple[int, bool]], reach: _Reach,
            dead: dict[int, _Death], gave_up: set[int]) -> list[Problem]:
    """The collectives that never completed: the deaths they show (into `dead`), the hangs they are (the rows
    that timed out in them into `gave_up`), and the lost or damaged records they hold (warnings)."""
    blocked = {k: _blocked(t, ct, k, reach) for k, _ in incomplete}
    for k, (absent, stuck, _) in blocked.items():
        for r in absent + stuck:
            if r not in dead and _died_before(t, ct, k, r, reach):
                dead[r] = _Death(r)
    lost: dict[tuple[int, str], list[int]] = {}  # (rank, "begin" or "end") -> instances that lack that record
    withheld: dict[int, list[int]] = {}
    out = []
    for k, explained in incomplete:
        absent, stuck, lost_here = blocked[k]
        for key in lost_here:
            lost.setdefault(key, []).append(k)
        gone = [r for r in absent + stuck if r in dead]
        for r in gone:
            dead[r].instances.append(k)
            dead[r].later += r in absent
        # a hang names who never came (and is not dead); those inside it wait for them, or for the dead
        waited = [r for r in absent if r not in dead] or ([] if gone else stuck)
        if explained or not waited:
            continue
        if all(r in t.ranks and t.ranks[r].damage for r in waited):
            for r in waited:
                withheld.setdefault(r, []).append(k)  # its file lost records: perhaps this one's
            continue
        out.append(_hang(t, ct[k], reach, [r for r in absent if r not in dead], [] if gone else stuck))
        gave_up.update(i for i in ct.rows_of(k) if _timed_out(t, i))
    for (r, what), ks in sorted(lost.items()):
        _warn(t, f"rank {r}: {len(ks)} collective(s) lack its {what} record although it "
                 f"{'entered' if what == 'begin' else 'finished'} later ones of the same group (first: "
                 f"{_name(t, ct, ks[0])}): the record was lost; not reported as a hang")
    for r, ks in sorted(withheld.items()):
        _warn(t, f"rank {r}: {len(ks)} collective(s) it never entered or finished (first: {_name(t, ct, ks[0])}) "
                 f"are not reported as hangs: its file is damaged ({t.ranks[r].damage})")
    return out


def _died_before(t: EventTable, ct: CollectiveTable, k: int, r: int, reach: _Reach) -> bool:
    """Whether rank r's trace stops at instance k while the others went on: another rank finished its part of k
    (done, or raised), after r's last sign of life; r did not leave the job cleanly, and no stacks record shows it
    alive elsewhere once k began."""
    info = t.ranks.get(r)
    if info is not None and info.left:
        return False
    # a timeout says only that r did not come in time, not that it is gone
    ends = [e for i in ct.rows_of(k) if t.rank[i] != r and (e := finished_at(t, i)) != NONE and not _timed_out(t, i)]
    if not ends:
        return False  # nobody went on: they all wait, or gave up waiting (a hang)
    begun = min(ct.starts_of(k))
    if any(rec["t"] >= begun for rec in t.stacks.get(r, ())):
        return False
    slack = sum(t.ranks[x].clock_uncertainty_ns for x in {r, *map(t.rank.__getitem__, ct.rows_of(k))} if x in t.ranks)
    return reach.alive.get(r, -1) <= max(ends) + slack


_TIMEOUT = re.compile(r"timed? ?out|timeout", re.IGNORECASE)


def _timed_out(t: EventTable, i: int) -> bool:
    """Whether row i ended in the backend's timeout (gloo's "Timed out waiting", NCCL's watchdog timeout)."""
    return t.status[i] == "error" and bool(_TIMEOUT.search(str(t.error[i] or "")))


def _name(t: EventTable, ct: CollectiveTable, k: int) -> str:
    return f"{ct.op[k]} #{ct.group_seq[k]} of group {t.groups[ct.gid[k]].name}"


def _warn(t: EventTable, msg: str) -> None:
    if msg not in t.warnings:  # the analysis may run twice on one table (the viewer's --follow)
        t.warnings.append(msg)


def _stacks_at(t: EventTable, ranks, since_ns: int) -> dict[int, str]:
    """rank -> where its latest stacks record at or after since_ns shows it (the watchdog's, during a hang)."""
    out = {}
    for r in ranks:
        recs = [rec for rec in t.stacks.get(r, ()) if rec["t"] >= since_ns]
        if recs:
            out[r] = stacks_site(max(recs, key=lambda rec: rec["t"]))
    return out


def _hang(t: EventTable, c: CollectiveInstance, reach: _Reach, absent: list[int], stuck: list[int]) -> Problem:
    name = f"{c.op} #{c.group_seq} of group {t.groups[c.gid].name}"
    entered = sorted(c.events)
    rows = sorted(c.events.values())
    first = min(c.start_ns.values())
    at = _stacks_at(t, c.group_ranks, first)
    if absent:
        waves = []
        for r in absent:
            i = reach.last.get(r)
            if i is None:
                waves.append(f"rank {r} has no events")
            else:
                rows.append(i)
                end = finished_at(t, i)
                if end == NONE:
                    state = "it is still in it"
                elif end <= first:
                    state = f"it finished {fmt_ns(first - end)} before the others entered this one"
                else:
                    state = f"it finished {fmt_ns(end - first)} after the others had entered this one"
                left = t.ranks[r].left if r in t.ranks else False
                waves.append(f"rank {r}'s last event is {where(t, i)}{_site(t, i)} ({state}"
                             f"{'; then it left the job' if left else ''})")
            if r in at:
                waves[-1] += f", and its stack shows it at {at[r]}"
        msg = (f"{name} never completed: {fmt_ranks(entered)} entered it"
               f"{_site(t, rows[0])} but {fmt_ranks(absent)} never did; {'; '.join(waves)}. "
               f"Look at why {fmt_ranks(absent)} did not reach this call.")
        ranks = list(absent)
    else:
        failed = sorted(r for r, i in c.events.items() if t.status[i] == "error" and not _timed_out(t, i))
        also = f" ({fmt_ranks(failed)} raised an error in it)" if failed else ""
        msg = (f"{name} never finished on {fmt_ranks(stuck)} although every rank entered it{also}; "
               f"check the backend and the peers' processes.")
        ranks = sorted(stuck)
    timeouts = sorted(i for i in c.events.values() if _timed_out(t, i))
    if timeouts:
        who = fmt_ranks(t.rank[i] for i in timeouts)
        msg += (f" {who[0].upper()}{who[1:]} gave up waiting: "
                f"{short_error(t.error[timeouts[0]]).rstrip('.')}.")
    others = {r: w for r, w in at.items() if r not in absent}
    if others:
        msg += " Recorded stacks: " + "; ".join(f"rank {r} at {w}" for r, w in sorted(others.items())) + "."
    return Problem("hang", c.op, c.group_ranks, c.group_seq, ranks, msg, rows, first, at)


def _died(t: EventTable, d: _Death, reach: _Reach) -> Problem:
    """One problem for a rank whose trace stops early: where it stops, and what went on without it."""
    r = d.rank
    i = reach.last.get(r)
    damage = t.ranks[r].damage if r in t.ranks else ""
    torn = " (its file ends with a torn record)" if "torn" in damage else ""
    if i is None:
        msg, rows, op, gs, granks, time = f"rank {r} has no events", [], None, None, (r,), None
    else:
        inside = finished_at(t, i) == NONE
        msg = (f"rank {r}'s trace ends here{torn}, {'inside' if inside else 'after'} {where(t, i)}{_site(t, i)}"
               f"{', which it never finished' if inside else ''}")
        rows, op, time = [i], t.op[i], t.start_ns[i]
        gs = t.group_seq[i] if t.group_seq[i] != NONE else None
        granks = t.group_ranks(i) if gs is not None else (r,)
    msg += ": the rank died or its file was cut."
    if d.later:
        msg += f" {d.later} later collective(s) of its groups went on without it"
    if d.messages:
        msg += f"{' and' if d.later else ''} {d.messages} P2P message(s) with it have no side on rank {r}"
    if d.later or d.messages:
        msg += " (not reported as hangs)."
    return Problem("died", op, granks, gs, [r], msg, rows, time)


_SOURCE_LOCATION = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|cu|h|hpp|py):\d+\]\s*")


def short_error(text: str, limit: int = 160) -> str:
    """An exception's text in one short line: its first line, without the C++ source locations that gloo and
    NCCL put in front, cut after the first sentence when it is long."""
    line = _SOURCE_LOCATION.sub("", str(text).strip().split("\n", 1)[0]).strip()
    if len(line) <= limit:
        return line
    stop = line.find(". ", 40, limit)
    return line[:stop + 1] if stop > 0 else line[:limit - 1] + "…"


def _errors(t: EventTable, gave_up: set[int]) -> list[Problem]:
    """One problem per rank whose ops ended in an error: its first, and how many more (but the timeouts of ranks
    that waited in a hang: the hang says them)."""
    values = t.status.values
    if "error" not in values:
        return []
    code = values.index("error")
    first: dict[int, int] = {}
    count: Counter = Counter()
    for i, c in enumerate(t.status.codes):
        if c == code and i not in gave_up:
            r = t.rank[i]
            count[r] += 1
            first.setdefault(r, i)
    out = []
    for r, i in sorted(first.items()):
        err = t.error[i]
        text = f": {short_error(err).rstrip('.')}" if err else ""
        more = f" {count[r] - 1} later op(s) on rank {r} failed too." if count[r] > 1 else ""
        gs = t.group_seq[i] if t.group_seq[i] != NONE else None
        out.append(Problem("error", t.op[i], t.group_ranks(i) if gs is not None else (r,), gs, [r],
                           f"rank {r}'s {where(t, i)}{_site(t, i)} ended in an error{text}.{more}", [i],
                           t.start_ns[i]))
    return out


def nonfinite_rows(t: EventTable) -> tuple:
    """The rows whose input and output summaries may count a NaN or an Inf (numpy arrays; problems/nonfinite_scan.py finds them in
    their JSON text, none decoded): the only ones _nonfinite decodes. A stage apart, beside the others: compiled,
    the scan lets them run meanwhile."""
    find = nonfinite_scan.nonfinite(len(t))
    return t.in_.rows_with(find), t.out.rows_with(find)


def _nonfinite_counts(summary) -> tuple[int, int]:
    """(NaN, Inf) counts of an `in`/`out` summary; (0, 0) for anything else (a damaged trace's)."""
    if not isinstance(summary, dict):
        return 0, 0
    nan, inf = summary.get("nan"), summary.get("inf")
    return (nan if type(nan) is int and nan > 0 else 0), (inf if type(inf) is int and inf > 0 else 0)


def _fmt_nonfinite(nan: int, inf: int) -> str:
    return " and ".join(f"{n} {what}" for n, what in ((nan, "NaN"), (inf, "Inf")) if n)


def _nonfinite(t: EventTable, maybe: tuple) -> list[Problem]:
    """The first op whose input (or, from finite inputs, output) held NaN or Inf, and how far they spread. An
    input is seen when its op starts, an output when it ends: a peer's output that a NaN input poisoned comes
    after that input, whichever rank arrived first."""
    if not (t.in_.any() or t.out.any()):
        return []
    seen = []  # (when, row, "in" or "out", (NaN, Inf))
    for i, a in t.in_.items(rows=maybe[0]):
        if any(n := _nonfinite_counts(a)):
            seen.append((t.start_ns[i], i, "in", n))
    for i, b in t.out.items(rows=maybe[1]):
        if any(n := _nonfinite_counts(b)):
            end = finished_at(t, i)
            seen.append((end if end != NONE else t.start_ns[i], i, "out", n))
    if not seen:
        return []
    seen.sort()
    # the first is a cause, not a consequence: the output of a collective that some rank fed a non-finite input,
    # and what its rank did after that output, came from that input, though the ranks' clocks (their alignment
    # error) may put them before it
    poisoned = {(t.gid[i], t.group_seq[i]) for _, i, side, _ in seen if side == "in" and t.group_seq[i] != NONE}
    tainted: set[int] = set()
    causes = []
    for x in seen:
        i, r = x[1], t.rank[x[1]]
        if r in tainted:
            continue
        if x[2] == "out" and t.group_seq[i] != NONE and (t.gid[i], t.group_seq[i]) in poisoned:
            tainted.add(r)
            continue
        causes.append(x)
    _, i0, side, counts0 = (causes or seen)[0]
    if side == "in":  # every rank whose input to that same op held some
        first = [x for x in seen if x[2] == "in" and (x[1] == i0 or (
            t.group_seq[i0] != NONE and t.group_seq[x[1]] == t.group_seq[i0] and t.gid[x[1]] == t.gid[i0]))]
        ranks = sorted({t.rank[x[1]] for x in first})
        whose = f"rank {ranks[0]}'s input" if len(ranks) == 1 else f"the inputs of {fmt_ranks(ranks)}"
        msg = (f"{whose} to {where(t, i0)}{_site(t, i0)} held non-finite values first "
               f"({_fmt_nonfinite(sum(x[3][0] for x in first), sum(x[3][1] for x in first))}): they came from "
               f"{'its' if len(ranks) == 1 else 'their'} own computation before this call.")
        rows = sorted({x[1] for x in first})
    else:
        ranks, rows = [t.rank[i0]], [i0]
        msg = (f"the output of {where(t, i0)} on rank {ranks[0]}{_site(t, i0)} held non-finite values first "
               f"({_fmt_nonfinite(*counts0)}) from finite inputs: the op itself overflowed.")
    later = {x[1] for x in seen} - set(rows)
    if later:
        msg += (f" After it, {len(later)} op(s) carried non-finite values in their input or output, on "
                f"{fmt_ranks({t.rank[i] for i in later})}.")
    gs = t.group_seq[i0] if t.group_seq[i0] != NONE else None
    return [Problem("nonfinite", t.op[i0], t.group_ranks(i0) if gs is not None else tuple(ranks), gs, ranks, msg,
                    rows, t.start_ns[i0])]


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


def _unmatched(p2p: P2PTable) -> bool:
    """Whether a message lacks its send or its recv (in numpy: `NONE in` an array holds the GIL over every one)."""
    import numpy as np

    return bool((np.frombuffer(p2p.send, np.int32) == NONE).any() or (np.frombuffer(p2p.recv, np.int32) == NONE).any())


def _p2p_problems(t: EventTable, p2p: P2PTable, dead: dict[int, _Death]) -> list[Problem]:
    """Unmatched messages and size mismatches. Messages are paired by order: a rank that died leaves the rest of
    its messages unpaired (its died problem counts them), and a record lost from a damaged file shifts the pairs
    after it, so nothing is claimed about a damaged rank's messages (a warning says so)."""
    unmatched: dict[tuple[int, int], list[P2PMatch]] = {}
    withheld: Counter = Counter()
    out = []
    damaged = {r for r, info in t.ranks.items() if info.damage}
    boxes = rings(t)  # (a black-box window's messages are numbered from its first: window.align_p2p)
    for m in map(p2p.__getitem__, _odd_messages(t, p2p)):
        gone = m.dst if m.recv is None else m.src if m.send is None else None
        if gone is not None and gone >= 0 and gone not in t.ranks:
            continue  # a rank with no file at all (a directory of some ranks' traces): the notes say so
        if gone in dead:
            dead[gone].messages += 1
            continue
        if damaged and (m.src in damaged or m.dst in damaged) and (
                gone is not None or t.bytes[m.send] != t.bytes[m.recv]):
            withheld[m.src if m.src in damaged else m.dst] += 1
            continue
        if gone is not None:
            unmatched.setdefault((m.src, m.dst), []).append(m)
        elif t.bytes[m.send] and t.bytes[m.recv] and t.bytes[m.send] != t.bytes[m.recv]:
            out.append(Problem("mismatch", "send", (m.src, m.dst), None, [m.src, m.dst],
                               f"message #{m.order}{' of the window' if {m.src, m.dst} & boxes.keys() else ''} "
                               f"from rank {m.src} to rank {m.dst}: the send has "
                               f"{fmt_bytes(t.bytes[m.send])} but the recv expects {fmt_bytes(t.bytes[m.recv])}"
                               f"{_site(t, m.send)}.", [m.send, m.recv], t.start_ns[m.send]))
    stuck = _stuck_messages(t, unmatched)
    if stuck:
        out.append(stuck)
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
    for r, n in sorted(withheld.items()):
        _warn(t, f"rank {r}: {n} P2P message(s) with it are unpaired or differ in size, but its file is damaged "
                 f"({t.ranks[r].damage}): a lost record shifts the pairs after it, so they are not reported")
    return out


def _stuck_messages(t: EventTable, unmatched: dict[tuple[int, int], list[P2PMatch]]) -> Problem | None:
    """A hang of P2P ops: the unmatched sends and recvs that never completed and that their rank is stuck in (a
    blocking call, or the wait() on an async one), taken out of `unmatched`; a hang whatever the op. Two ranks each stuck sending to (or receiving
    from) the other is a deadlock, said so."""
    stuck: list[int] = []

    def blocked(i: int) -> bool:  # (an isend never waited on is not one its rank is stuck in: it went on)
        if finished_at(t, i) != NONE:
            return False
        return not t.async_op[i] or (t.wait_start_ns[i] != NONE and t.wait_end_ns[i] == NONE)

    for key in list(unmatched):
        ms = unmatched[key]
        mine = [m for m in ms if blocked(m.send if m.send is not None else m.recv)]
        stuck += [m.send if m.send is not None else m.recv for m in mine]
        rest = [m for m in ms if m not in mine]
        if rest:
            unmatched[key] = rest
        else:
            del unmatched[key]
    if not stuck:
        return None
    stuck.sort(key=lambda i: t.start_ns[i])
    first = {}
    for i in stuck:
        first.setdefault(t.rank[i], i)
    ranks = sorted(first)
    parts = [f"rank {r} is stuck in {where(t, i)}{_site(t, i)}, whose {'recv' if t.op[i] == 'send' else 'send'} "
             f"rank {t.peer[i]} never posted" for r, i in sorted(first.items())]
    peers = {t.rank[i]: t.peer[i] for i in first.values()}
    cycle = any(peers.get(peers[r]) == r for r in peers)
    msg = ("A deadlock: " if cycle else "") + "; ".join(parts) + (
        " (each waits for the other: a blocking send on both sides, or the sends and recvs in opposite orders)"
        if cycle else "") + "."
    at = _stacks_at(t, ranks, t.start_ns[stuck[0]])
    where_ = {r: at.get(r) or t.site[i] or where(t, i) for r, i in first.items()}
    return Problem("hang", t.op[stuck[0]], tuple(ranks), None, ranks, msg, stuck, t.start_ns[stuck[0]], where_)


def _odd_messages(t: EventTable, p2p: P2PTable) -> list[int]:
    """The messages with a side missing or sizes that differ (the only ones _p2p_problems has a word for), in
    order, found in numpy."""
    import numpy as np

    send, recv = as_int64(p2p.send), as_int64(p2p.recv)
    nbytes = as_int64(t.bytes)
    odd = (send == NONE) | (recv == NONE)
    odd[~odd] = nbytes[send[~odd]] != nbytes[recv[~odd]]
    return np.flatnonzero(odd).tolist()


def _clock_violations(t: EventTable, collectives: CollectiveTable, p2p: P2PTable) -> list[Problem]:
    """Effects before causes: a recv done before its send began, a collective done before its last rank arrived.
    The tolerance is the clock alignment's own uncertainty. In numpy: every message and every rank of an
    instance is looked at (about one per event), few are violations."""
    import numpy as np

    fin = finished_column(t)
    start = as_int64(t.start_ns)
    rank = as_int64(t.rank)
    # the violations, in the order they are counted (messages, then instances): early rank, late rank, by how
    # much, the effect's row and the cause's
    send, recv = as_int64(p2p.send), as_int64(p2p.recv)
    m = np.flatnonzero((send != NONE) & (recv != NONE))
    s, r = send[m], recv[m]
    end = fin[r]
    bad = (end != NONE) & (end < start[s])
    found = [(as_int64(p2p.dst)[m][bad], as_int64(p2p.src)[m][bad], (start[s] - end)[bad], s[bad], r[bad])]
    offset = np.frombuffer(collectives.offset, np.int64)
    size = np.diff(offset)
    nxn = [code for code, kind in enumerate(collectives.wait_kind.values) if kind in ("wait_at_nxn", "wait_at_barrier")]
    take = (np.frombuffer(collectives.complete, np.uint8) == 1) & np.isin(as_int64(collectives.wait_kind.codes), nxn) \
        & (size >= 2)
    if take.any():
        k = repeat_each(np.arange(len(size)), size)
        rows = as_int64(collectives.rows)
        on = take[k]
        k, rows = k[on], rows[on]
        latest = np.maximum.reduceat(start[rows], np.flatnonzero(np.diff(k, prepend=-1)))
        latest = repeat_each(latest, size[take])
        ends = collectives.row_ends()[on]
        late = as_int64(collectives.last_arrival)[k]
        cause = collectives.culprit_rows(collectives.last_arrival)  # each instance's row of its last arrival
        early = ends < latest
        found.append((rank[rows][early], late[early], (latest - ends)[early], rows[early], cause[k[early]]))
    early, late, by, row, other = (np.concatenate(c) for c in zip(*found))
    unc = {r: info.clock_uncertainty_ns for r, info in t.ranks.items()}
    ranks = np.array(sorted(unc), np.int64)
    tol = np.array([unc[r] for r in ranks] + [0], np.int64)

    def uncertainty(of):
        at = np.searchsorted(ranks, of)
        return np.where(ranks[np.minimum(at, len(ranks) - 1)] == of if len(ranks) else False, tol[at], 0)

    keep = by > uncertainty(early) + uncertainty(late)
    early, late, by, row, other = early[keep], late[keep], by[keep], row[keep], other[keep]
    # per pair: how many, and the worst (its first occurrence)
    order = order_by(early, late, -by, np.arange(len(by)))
    first = np.flatnonzero(np.diff(early[order], prepend=-2) | np.diff(late[order], prepend=-2))
    counts = np.diff(np.append(first, len(order)))
    worst = {}
    for j, n in zip(order[first].tolist(), counts.tolist()):
        cause_row = int(other[j])
        worst[int(early[j]), int(late[j])] = (n, int(by[j]), [int(row[j]), None if cause_row < 0 else cause_row])
    out = []
    for (early, late), (n, by, rows) in sorted(worst.items()):
        out.append(Problem("clock", None, (early, late), None, [early, late],
                           f"{n} event(s) on rank {early} finish before their cause on rank {late} began (by up to "
                           f"{fmt_ns(by)}): the two ranks' clocks are not aligned (different hosts without a clock "
                           f"sync?); waits between them are not trustworthy.", rows, t.start_ns[rows[0]]))
    return out
