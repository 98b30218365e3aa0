"""Why B's step is longer (or shorter) than A's (diff/compare.py uses it): B's steps replayed with one thing set
to A's, on the replay that the what-ifs and the attribution use (causal/what_if.py's `_Replay`: `timeline`, `lengths`).

The *things* (units), each a set of B's measured times that can be set to A's:
- a compute span, "file.py:40 → file.py:52" on every rank: each of its occurrences in B's step k (a start event of
  the replay) takes the length of the same span in A's step k (same rank, op identities around it, interval kind
  and occurrence: StepSpans.key); a span A does not have keeps B's length;
- an op's communication, by op and call site: each of B's ops of it in step k has its communication scaled by A's
  over B's, on its rank, in the same step and the same identity (op, site, group, peer), each run's counted as the
  union of its ops' intervals from the arrival each needed to its end (`saved`: B's time less that share, negative
  where A's was longer; several ops of one identity, DDP's buckets, queue behind each other and overlap);
  an op A does not have at all (added in B) is left with no communication: it then takes only the waiting the
  others' arrivals make.
The units are applied *cumulatively*, in the order of their effect alone (the largest first): each one's `delta_ns`
is the mean step B loses when it is set to A's on top of the ones before it. So the deltas add up to B's mean step
less B's replayed with every unit set to A's, whatever their order; what is left of B's mean step less A's (the
effect of what the replay cannot set to A's: ops A had and B has not, waiting patterns, the replay's own error, and
the steps' difference in pace) is `unexplained_ns`. Applied alone, two units that delay the same step (the same
span late on two ranks) would each explain nothing: cumulatively, the second one explains the pair.

Units beyond `MAX_UNITS` (by how much B's measured times differ from A's in them) are applied last, together. An
explanation is listed on its own when its unit moved beyond its noise on some rank (timing.moved over the
unit's time a step on that rank: its mean, median or p90, each against its own noise; a span slow in one step of
five moves the mean and the p90 only) and it explains at least `LISTED` of A's mean step and `EXPLAINED` of the mean
step's noise (as much as the steps' jitter explains nothing; the mean's, timing.stat_noise_ns: the explanations
add up to the mean's difference); the others are one entry, "everything else".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .align import Identities, Ops, join_keys
from .sides import Side, StepSpans
from .timing import leading, per_step_sums
from ...units import fmt_bytes, fmt_list, fmt_ns_prose

MAX_UNITS = 48   # units replayed one by one (the others together, last)
LISTED = 0.01    # of A's mean step: the least an explanation explains to be listed on its own
EXPLAINED = 0.5  # of the mean step's noise: ... and the least beside it (the step's own jitter explains as much)
NAMED = 0.2      # of the largest move of a span's ranks that moved one way: a rank that moved less is not named


@dataclass
class Explanation:
    """What setting one thing of B to A's removes from B's mean step (`delta_ns`, signed: positive where B is slower
    for it). `what` says it; `rank` the rank it changed on (None: several, or every rank); `span` a compute span's
    name, `op` and `site` an op's; `noise_ns` what the thing's time a step had to move by to be a change."""

    what: str
    rank: int | None
    span: str | None
    op: str | None
    delta_ns: int
    site: str | None = None
    noise_ns: int = 0


@dataclass
class _Unit:
    kind: str            # "compute" or "comm"
    name: str            # a span's name, or "op at site"
    op: str = ""
    site: str = ""
    size: float = 0.0    # how much B's measured times differ from A's in it, summed
    ranks: tuple = ()    # the ranks that have it
    moved: tuple = ()    # ... on which its time a step moved beyond the noise
    noise: int = 0       # the largest noise of those
    text: str = ""       # an op's: what changed in its communication


class _Units:
    """The units by key ("compute", span name id) or ("comm", op, site), numbered in order of first sight."""

    def __init__(self) -> None:
        self.index: dict[tuple, int] = {}
        self.all: list[_Unit] = []

    def of(self, key: tuple, kind: str, name: str, op: str = "", site: str = "") -> int:
        u = self.index.get(key)
        if u is None:
            u = self.index[key] = len(self.all)
            self.all.append(_Unit(kind, name, op, site))
        return u


def explain(a: Side, b: Side, ks: list[int], names: Identities, span_names: dict[str, int], a_ops: Ops, b_ops: Ops,
            a_mean: int, b_mean: int, step_noise: int) -> tuple[list[Explanation], int, str]:
    """The explanations, ranked, the unexplained rest (b_mean - a_mean less their sum) and a note (why there are
    none, or what was left out). span_names: the diff's one map of span names to ids (Side.spans'); step_noise:
    what the mean steps' difference had to pass (timing.stat_noise_ns)."""
    total = b_mean - a_mean
    if b.replay is None or a.replay is None or not ks:
        return [], total, "no steps that both runs replay: the difference is not explained"
    units = _Units()
    # compute: per step, B's start events, the unit of each and A's length of the same span
    compute: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # k -> (events, unit ids, A's gaps)
    sa_of = {k: a.spans(k, a_ops.ident_of_row, span_names) for k in ks}
    sb_of = {k: b.spans(k, b_ops.ident_of_row, span_names) for k in ks}
    ways = _span_ways(ks, sa_of, sb_of)
    for k in ks:
        sa, sb = sa_of[k], sb_of[k]
        j = join_keys(sa.key(), sb.key())
        has = j >= 0
        unit_ids = np.array([units.of(("compute", n, ways.get((n, r), (0, 0, 0))[0]), "compute", "")
                             for n, r in zip(sb.name.tolist(), sb.rank.tolist())], np.int64)
        a_gap = np.where(has, sa.gap[np.maximum(j, 0)], sb.gap)
        compute[k] = (sb.ev, unit_ids, a_gap)
        for u, d in zip(unit_ids.tolist(), np.abs(a_gap - sb.gap).tolist()):
            units.all[u].size += d
    # communication: per B op row, what it saves with A's communication in the same rank, step and identity
    keys = names.keys
    ca = a.comm_spans(list(zip(a_ops.rank.tolist(), a_ops.ident.tolist())), a_ops, ks)
    cb = b.comm_spans(list(zip(b_ops.rank.tolist(), b_ops.ident.tolist())), b_ops, ks)
    index = {k: i for i, k in enumerate(ks)}
    n_rows = len(b.table)
    row_unit = np.full(n_rows, -1, np.int64)
    row_saved = np.zeros(n_rows, np.int64)
    for i, (r, ident, k, row) in enumerate(zip(b_ops.rank.tolist(), b_ops.ident.tolist(), b_ops.step.tolist(),
                                               b_ops.rows.tolist())):
        op, site = keys[ident][:2]
        x = index[k]
        total_b = cb[(r, ident)][x] if (r, ident) in cb else 0.0  # (none: its ops never communicated)
        total_a = ca[(r, ident)][x] if (r, ident) in ca else 0.0
        mine = int(b.comm[row])
        row_saved[row] = int(round(mine * (1 - total_a / total_b))) if total_b > 0 else 0
        u = units.of(("comm", op, site), "comm", f"{op} at {site}", op, site)
        row_unit[row] = u
        units.all[u].size += abs(int(row_saved[row]))
    ordered = units.all
    _noise(units, ways, span_names, ks, (a, a_ops), (b, b_ops), keys)

    # the units that change anything, the largest first; beyond MAX_UNITS, one bundle applied last
    live = sorted((u for u in range(len(ordered)) if ordered[u].size > 0), key=lambda u: -ordered[u].size)
    note = ""
    bundle = live[MAX_UNITS:]
    live = live[:MAX_UNITS]
    if bundle:
        note = f"{len(bundle)} smaller differences replayed together, last"

    def replayed(applied: set[int]) -> float:
        on = np.zeros(len(ordered) + 1, bool)  # (index -1: no unit)
        on[list(applied)] = True
        gaps = {}
        for k in ks:
            ev, unit_ids, a_gap = compute[k]
            g = np.array(b.replay.timeline(k)[5], np.int64)
            sel = on[unit_ids]
            g[ev[sel]] = a_gap[sel]
            gaps[k] = g
        saved = (lambda rows: np.where(on[row_unit[np.asarray(rows, np.int64)]],
                                       row_saved[np.asarray(rows, np.int64)], 0))
        out = b.replay.lengths(ks, gaps, saved)
        return sum(out[k] for k in ks) / len(ks)

    base = sum(b.length(k) for k in ks) / len(ks)
    alone = {u: base - replayed({u}) for u in live}
    order = sorted(live, key=lambda u: -abs(alone[u]))
    applied: set[int] = set()
    before = base
    delta: dict[int, float] = {}
    for u in order:
        applied.add(u)
        after = replayed(applied)
        delta[u] = before - after
        before = after
    if bundle:
        applied.update(bundle)
        after = replayed(applied)
        delta[-1] = before - after
    floor = max(LISTED * abs(a_mean), EXPLAINED * step_noise)
    listed, rest, rest_n = [], 0.0, 0
    for u, d in delta.items():
        unit = ordered[u] if u >= 0 else None
        if unit is not None and unit.moved and abs(d) >= floor:
            listed.append(_explanation(unit, int(round(d))))
        else:
            rest += d
            rest_n += len(bundle) if u < 0 else 1
    listed.sort(key=lambda e: -abs(e.delta_ns))
    if rest_n and int(round(rest)):
        listed.append(Explanation(f"everything else ({rest_n} spans and ops, each within its noise or explaining "
                                  "less than the steps' jitter)", None, None, None, int(round(rest))))
    unexplained = total - sum(e.delta_ns for e in listed)
    return listed, unexplained, note


def _span_ways(ks, sa_of, sb_of) -> dict[tuple[int, int], tuple[int, int, int]]:
    """Per (span name id, rank) of either run: which way its time a step moved beyond the noise (timing.moved:
    1 longer in B, -1 shorter, by its mean where the mean moved, else its median; 0 within the noise), the noise
    it passed (the mean's first) and by how much it moved (that statistic's difference, absolute). Its p90 alone is no move of a span: a tail of a few steps that moves neither
    the mean (what the explanations add up to) nor the median is the run's jitter (a bystander rank's short span
    whose p90 alone went up was named beside the rank really slower in it)."""
    per = {}
    for which, spans_of in (("a", sa_of), ("b", sb_of)):
        keys_, steps, vals = [], [], []
        for k in ks:
            s: StepSpans = spans_of[k]
            keys_.extend(zip(s.name.tolist(), s.rank.tolist()))
            steps.extend([k] * len(s.ev))
            vals.extend(s.gap.tolist())
        per[which] = per_step_sums(keys_, np.array(steps, np.int64), np.array(vals, np.float64), ks)
    out = {}
    for key in set(per["a"]) | set(per["b"]):
        first = leading(per["a"].get(key, np.zeros(len(ks))), per["b"].get(key, np.zeros(len(ks))))
        out[key] = (0, 0, 0) if first is None or first.stat == "p90" else (
            1 if first.delta_ns > 0 else -1, first.noise_ns, abs(first.delta_ns))
    return out


def _noise(units: _Units, ways: dict, span_names, ks, a: tuple[Side, Ops], b: tuple[Side, Ops], keys) -> None:
    """Each unit's ranks, those on which its time a step moved beyond the noise and the largest of their noises,
    its name, and for an op what changed in its communication. A compute span is a unit per way it moved (the
    ranks where it took longer in B, those where it took less, those within the noise: `_span_ways`), so that a span
    that moved up on one rank and down on another is two explanations, each named by its ranks, not one that nets
    them out. Of a unit's ranks that moved, those that moved under NAMED of the one that moved most are not named
    (their move is replayed with the unit's): a bystander's span a fraction of a millisecond longer, past its own
    small noise, was named beside the rank 80 ms slower in it ("compute on ranks 0, 3")."""
    index, ordered = units.index, units.all
    ranks_of: dict[int, list[int]] = {}
    for (n, r) in ways:
        ranks_of.setdefault(n, []).append(r)
    names = {i: name for name, i in span_names.items()}
    for key, u in index.items():
        if key[0] != "compute":
            continue
        _, n, way = key
        unit = ordered[u]
        unit.name = names[n]
        unit.ranks = tuple(sorted(ranks_of.get(n, ())))
        moved = [r for r in unit.ranks if way and ways[(n, r)][0] == way]
        most = max((ways[(n, r)][2] for r in moved), default=0)
        unit.moved = tuple(r for r in moved if ways[(n, r)][2] >= NAMED * most)
        unit.noise = max((ways[(n, r)][1] for r in unit.moved), default=0)
    # communication: per (op, site, rank), its communication a step in each run
    comm = {}
    for which, (side, ops) in (("a", a), ("b", b)):
        ks_keys = [(keys[i][0], keys[i][1], r) for i, r in zip(ops.ident.tolist(), ops.rank.tolist())]
        comm[which] = side.comm_spans(ks_keys, ops, ks)
        comm[which + "bytes"] = per_step_sums(ks_keys, ops.step, ops.bytes.astype(np.float64), ks)
        comm[which + "count"] = per_step_sums(ks_keys, ops.step, np.ones(len(ops.rows)), ks)
    for key, u in index.items():
        if key[0] != "comm":
            continue
        _, op, site = key
        ranks = sorted({r for (o, s, r) in set(comm["a"]) | set(comm["b"]) if (o, s) == (op, site)})
        unit = ordered[u]
        _moved(unit, ranks, comm["a"], comm["b"], lambda r: (op, site, r), len(ks))
        unit.text = _comm_text(op, site, unit.moved or ranks, comm)


def _moved(unit: _Unit, ranks, per_a: dict, per_b: dict, key_of, n: int) -> None:
    """The unit's ranks, those on which its time a step moved beyond the noise (its mean, median or p90, each
    against its own: timing.moved; a span slow in one step of five moves the mean and the p90, not the median)
    and the largest noise of the statistics that moved (the mean's first)."""
    moved_on, noise = [], 0
    for r in sorted(ranks):
        xa, xb = per_a.get(key_of(r), np.zeros(n)), per_b.get(key_of(r), np.zeros(n))
        first = leading(xa, xb)
        if first is not None:
            moved_on.append(r)
            noise = max(noise, first.noise_ns)
    unit.ranks, unit.moved, unit.noise = tuple(sorted(ranks)), tuple(moved_on), noise


def _comm_text(op: str, site: str, ranks, comm: dict) -> str:
    """What changed in an op's communication, in words: its count, size and time a step (means over `ranks`: those
    it moved on)."""
    def mean(which: str) -> float:
        vals = [float(np.mean(comm[which][(op, site, r)])) for r in ranks if (op, site, r) in comm[which]]
        return sum(vals) / len(ranks) if ranks else 0.0

    whose = f"rank {ranks[0]}'s " if len(ranks) == 1 else ""
    na, nb = mean("acount"), mean("bcount")
    ba, bb = mean("abytes"), mean("bbytes")
    ta, tb = mean("a"), mean("b")
    if na == 0:
        return (f"{whose}{op}{'s' if nb > 1.5 else ''} added at {site} ({nb:.3g} a step, {fmt_bytes(bb)}, "
                f"{fmt_ns_prose(tb)} of communication a step)")
    if abs(na - nb) > 0.01 or abs(ba - bb) > 0.5:
        return (f"{whose}{op} at {site}: {na:.3g} a step of {fmt_bytes(ba / na)} in A, {nb:.3g} of "
                f"{fmt_bytes(bb / nb if nb else 0)} in B; its communication {fmt_ns_prose(ta)} → "
                f"{fmt_ns_prose(tb)} a step")
    bw = f" (bandwidth {'+' if ta > tb else '−'}{abs(ta / tb - 1):.0%})" if ta > 0 and tb > 0 else ""
    return f"{whose}{op} at {site}: its communication {fmt_ns_prose(ta)} → {fmt_ns_prose(tb)} a step{bw}"


def _explanation(unit: _Unit, delta: int) -> Explanation:
    rank = unit.moved[0] if len(unit.moved) == 1 else None
    if unit.kind == "compute":
        span = unit.name
        if rank is not None:
            what = f"rank {rank}'s compute {short_span(span)}"
        elif set(unit.moved) >= set(unit.ranks):
            what = f"compute {short_span(span)} on every rank"
        else:
            what = f"compute {short_span(span)} on ranks {fmt_list(list(unit.moved))}"
        return Explanation(what, rank, span, None, delta, None, unit.noise)
    return Explanation(unit.text, rank, None, unit.op, delta, unit.site, unit.noise)


def short_span(span: str) -> str:
    """A span's name with its second site's file left out where both are in one file: "train.py:40 → :52"."""
    a, arrow, b = span.partition(" → ")
    if arrow and ":" in a and ":" in b and a.rpartition(":")[0] == b.rpartition(":")[0]:
        return f"{a} → :{b.rpartition(':')[2]}"
    return span


__all__ = ["Explanation", "explain", "short_span", "MAX_UNITS", "LISTED"]
