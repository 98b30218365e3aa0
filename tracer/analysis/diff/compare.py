"""Two runs of a job side by side: `disttrace diff A B` and `disttrace view B --baseline A`.

compare(A, B), of two runs analysed with their replays (diff/sides.py's analysed), says
- what differs in structure (diff/align.py): B's steps matched to A's by index (a marked step, or the loop's
  iteration as waits/steps.py numbers it), their ops aligned by (rank, group's ranks, op, call site, occurrence in the
  step), then by op and site alone (a group changed), then by op and group alone (an op moved to another line):
  ops added or removed, sizes and dtypes changed, groups changed, ops moved, and each rank's first divergence in op
  order;
- what differs in time (diff/timing.py): the steps' distributions, and per op kind, group, rank and compute span,
  each B less A against its noise (the spread of the steps within each run: jitter is not a change), by their
  medians, means and p90s (diff/timing.py's shifts: a delay in one step of five moves only the mean and the p90);
- why (diff/explain.py): B's steps replayed with one thing set to A's, cumulatively, the explanations ranked, their
  deltas and the unexplained rest adding up to B's mean step less A's.

Only the run's steady steps are compared (the replay's windows: warm-up left out); the steps matched are those both
runs replay. Problems in either run are `report`'s business: they are only noted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .align import Change, Identities, align, structure
from .explain import Explanation, explain, short_span
from .sides import Side, analysed
from .timing import Shift, StepStats, TimingRow, median_ns, noise_ns, per_step_sums, row_of, shifts
from ..core.matching import finished
from ...units import fmt_ns_prose


@dataclass
class OpFigures:
    """For the viewer: per row of B's table, the op of A it is aligned with (-1: none, added in B), A's median
    duration of that op over its steps, the noise a difference from it must pass, and whether B's op moved beyond
    it; per B step, A's step and whether B's moved."""

    a_row: np.ndarray
    a_median: np.ndarray
    noise: np.ndarray
    moved: np.ndarray
    step_moved: dict[int, bool] = field(default_factory=dict)


@dataclass
class Diff:
    """The comparison of run B with run A (the baseline)."""

    a_label: str
    b_label: str
    a: StepStats
    b: StepStats
    changed: bool                 # B's step time moved beyond the noise (its mean, median or p90), or the structure
    #                               differs
    slower: bool                  # B's mean, median or p90 step is longer than A's beyond its noise, and its mean is
    #                               longer (what the user pays: diff/timing.py's "the mean's and the p90's noise")
    delta_ns: int                 # B's median step less A's
    mean_delta_ns: int            # B's mean step less A's (what the explanations add up to)
    noise_ns: int                 # what delta_ns had to pass
    structure: list[Change]
    explanations: list[Explanation]
    unexplained_ns: int
    timing: list[TimingRow]
    steps: list[tuple[int, int | None, int | None]]  # (index, A's length, B's length) per step of either
    matched: list[int]            # the steps compared (both runs replay them)
    notes: list[str]
    a_side: Side = field(repr=False, default=None)
    b_side: Side = field(repr=False, default=None)
    ops: OpFigures | None = field(repr=False, default=None)
    shifts: dict[str, Shift] = field(default_factory=dict)  # the steps' median, mean and p90, each against its noise

    @property
    def moved(self) -> list[Shift]:
        """The step's statistics (mean, median, p90) that moved beyond their noise, the mean first."""
        return [self.shifts[k] for k in ("mean", "median", "p90") if k in self.shifts and self.shifts[k].moved]

    @property
    def faster(self) -> bool:
        """B's step is shorter: a statistic moved down beyond its noise, and B's mean is shorter."""
        return any(s.delta_ns < 0 for s in self.moved) and self.mean_delta_ns < 0


def diff_tables(a_table, b_table, a_label: str = "A", b_label: str = "B") -> Diff:
    """The diff of two loaded traces (data.load.load_trace's tables)."""
    return compare(analysed(a_table, a_label), analysed(b_table, b_label))


def compare(a: Side, b: Side) -> Diff:
    notes = []
    for side in (a, b):
        if side.analysis.problems:
            n = len(side.analysis.problems)
            notes.append(f"{side.label} has {n} problem{'s' if n > 1 else ''} ({side.analysis.problems[0].kind} "
                         f"first): `disttrace report` says what they are")
        if not side.analysis.steps:
            notes.append(f"{side.label}: no training steps found; the whole run is compared as one step, whose "
                         "noise cannot be measured")
        elif side.replay is not None and side.replay.note:
            notes.append(f"{side.label}: {side.replay.note}")
    ks = sorted(set(a.ks) & set(b.ks))
    if a.analysis.steps and b.analysis.steps:
        na, nb = len(a.ks), len(b.ks)
        if set(a.ks) != set(b.ks):
            notes.append(f"steady steps: {na} in A, {nb} in B; the {len(ks)} both have are compared")
        if a.analysis.steps_source != b.analysis.steps_source:
            notes.append(f"steps {a.analysis.steps_source or 'not found'} in A, {b.analysis.steps_source or 'not found'}"
                         " in B: matched by index all the same")
    la, lb = a.lengths(), b.lengths()
    sa, sb = StepStats.of(la), StepStats.of(lb)
    delta = sb.median_ns - sa.median_ns
    noise = noise_ns(la, lb)
    step_shifts = shifts(la, lb) if la and lb else {}
    moved = [x for x in step_shifts.values() if x.moved]
    slower = any(x.delta_ns > 0 for x in moved) and sb.mean_ns > sa.mean_ns  # (the total the user pays is longer)
    names = Identities()
    a_ops, b_ops = a.ops(names, ks), b.ops(names, ks)
    al = align(a_ops, b_ops, names)
    changes = structure(a.table, b.table, a_ops, b_ops, al, names, ks)
    span_names: dict[str, int] = {}  # (one map for the diff: each side's spans keep the ids they were named with)
    mean_noise = step_shifts["mean"].noise_ns if step_shifts else noise
    explanations, unexplained, note = explain(a, b, ks, names, span_names, a_ops, b_ops, sa.mean_ns, sb.mean_ns,
                                              mean_noise)
    if note:
        notes.append(note)
    timing = _timing(a, b, ks, a_ops, b_ops, names, span_names)
    steps = sorted(set(a.ks) | set(b.ks))
    length_a, length_b = dict(zip(a.ks, la)), dict(zip(b.ks, lb))
    return Diff(a.label, b.label, sa, sb, bool(moved) or bool(changes), slower, delta, sb.mean_ns - sa.mean_ns,
                noise, changes, explanations, unexplained, timing,
                [(k, length_a.get(k), length_b.get(k)) for k in steps], ks, notes, a, b,
                _op_figures(a, b, ks, a_ops, b_ops, al, la, noise), step_shifts)


def _timing(a: Side, b: Side, ks: list[int], a_ops, b_ops, names: Identities,
            span_names: dict[str, int]) -> list[TimingRow]:
    """Per op kind, group, rank (compute, wait) and compute span: its median a step in each run against its
    noise. Spans are listed only where they changed (there are many)."""
    if not ks:
        return []
    keys = names.keys
    out: list[TimingRow] = []
    sums = {}
    for which, side, ops in (("a", a, a_ops), ("b", b, b_ops)):
        # an op kind's (a group's) communication a step: each rank's union of its ops' intervals, the mean over ranks
        for what, part in (("op", 0), ("group", 2)):
            per_rank = side.comm_spans([(keys[i][part], r) for i, r in zip(ops.ident.tolist(), ops.rank.tolist())],
                                       ops, ks)
            total: dict = {}
            for (key, _), xs in per_rank.items():
                got = total.setdefault(key, [np.zeros(len(ks)), 0])
                got[0] += xs
                got[1] += 1
            sums[which + what] = {key: xs / n for key, (xs, n) in total.items()}
        rk, st, vals, span_keys = [], [], [], []
        for k in ks:
            s = side.spans(k, ops.ident_of_row, span_names)
            rk.extend(s.rank.tolist())
            st.extend([k] * len(s.ev))
            vals.extend(s.gap.tolist())
            span_keys.extend(zip(s.name.tolist(), s.rank.tolist()))
        steps = np.array(st, np.int64)
        sums[which + "compute"] = per_step_sums(rk, steps, np.array(vals, np.float64), ks)
        sums[which + "span"] = per_step_sums(span_keys, steps, np.array(vals, np.float64), ks)
        by_step = {s.index: s for s in side.analysis.steps}
        waits: dict[int, np.ndarray] = {}
        for x, k in enumerate(ks):
            for r, w in by_step[k].wait_ns.items() if k in by_step else ():
                waits.setdefault(r, np.zeros(len(ks)))[x] = w
        sums[which + "wait"] = waits
    for what, label in (("op", lambda key: key), ("group", lambda key: f"group {list(key)}")):
        for key in sorted(set(sums["a" + what]) | set(sums["b" + what]), key=str):
            out.append(row_of(what, label(key), None, sums["a" + what].get(key, []), sums["b" + what].get(key, [])))
    for what in ("compute", "wait"):
        for r in sorted(set(sums["a" + what]) | set(sums["b" + what])):
            out.append(row_of(what, f"rank {r}", r, sums["a" + what].get(r, []), sums["b" + what].get(r, [])))
    name_of = {i: name for name, i in span_names.items()}
    for key in sorted(set(sums["aspan"]) | set(sums["bspan"]), key=lambda x: (x[1], name_of[x[0]])):
        row = row_of("span", short_span(name_of[key[0]]), key[1], sums["aspan"].get(key, []),
                     sums["bspan"].get(key, []))
        if row.changed:
            out.append(row)
    return out


def _op_figures(a: Side, b: Side, ks: list[int], a_ops, b_ops, al, la: list[int], step_noise: int) -> OpFigures:
    """What the viewer shows of A beside each op and step of B (OpFigures)."""
    n = len(b.table)
    a_row = np.full(n, -1, np.int64)
    a_median = np.full(n, -1, np.int64)
    noise = np.zeros(n, np.int64)
    moved = np.zeros(n, bool)
    dur = {}
    for which, side in (("a", a), ("b", b)):
        t = side.table
        fin = np.frombuffer(finished(t), np.int64)
        start = np.frombuffer(t.start_ns, np.int64)
        dur[which] = np.where(fin >= start, fin - start, -1)
    hit = np.flatnonzero(al.b_to_a >= 0)
    a_row[b_ops.rows[hit]] = a_ops.rows[al.b_to_a[hit]]
    # an op across the steps: (rank, identity, occurrence); its durations in each run
    key_a = list(zip(a_ops.rank.tolist(), a_ops.ident.tolist(), a_ops.occ.tolist()))
    key_b = list(zip(b_ops.rank.tolist(), b_ops.ident.tolist(), b_ops.occ.tolist()))
    da = per_step_sums(key_a, a_ops.step, dur["a"][a_ops.rows].astype(np.float64), ks)
    db = per_step_sums(key_b, b_ops.step, dur["b"][b_ops.rows].astype(np.float64), ks)
    for i, (key, row) in enumerate(zip(key_b, b_ops.rows.tolist())):
        if al.b_to_a[i] < 0 or key not in da or key not in db:
            continue
        med = median_ns(da[key])
        nz = noise_ns(da[key], db[key])
        a_median[row], noise[row] = med, nz
        moved[row] = dur["b"][row] >= 0 and abs(int(dur["b"][row]) - med) > nz
    med_a = median_ns(la)
    step_moved = {k: abs(b.length(k) - med_a) > step_noise for k in b.ks}
    return OpFigures(a_row, a_median, noise, moved, step_moved)


# -- in words -------------------------------------------------------------------------------------------------

def signed(ns: float) -> str:
    """A difference of times: "+12.1 ms", "−3.0 ms"."""
    text = fmt_ns_prose(abs(ns))
    return text if text.startswith("0 ") else ("−" if ns < 0 else "+") + text


def headline(d: Diff) -> str:
    """The change in step time and what explains it, in a line: "+12.1 ms a step: rank 3's compute train.py:88 →
    :92 +9.0 ms; ...; unexplained 0.5 ms"."""
    parts = [f"{e.what} {signed(e.delta_ns)}" for e in d.explanations]
    parts.append(f"unexplained {signed(d.unexplained_ns)}")
    return f"{signed(d.mean_delta_ns)} a step (mean): " + "; ".join(parts)


def verdict(d: Diff) -> str:
    """Whether B's step time changed, in a sentence: which of its mean, median and p90 moved beyond their noise
    (the mean first: what the user pays), and the others within theirs."""
    a, b = d.a, d.b
    if not (a.step_count and b.step_count):
        return "no steps to compare"
    if not d.moved:
        m = d.shifts["median"]
        rest = "; ".join(f"{x.stat} {signed(x.delta_ns)} (±{fmt_ns_prose(x.noise_ns)})"
                         for x in (d.shifts["mean"], d.shifts["p90"]))
        return (f"no change in step time beyond the noise: median {fmt_ns_prose(m.a_ns)} in A, "
                f"{fmt_ns_prose(m.b_ns)} in B ({signed(m.delta_ns)}, within ±{fmt_ns_prose(m.noise_ns)}); {rest}")
    how = "slower" if d.slower else "faster" if d.faster else "different (its statistics moved apart)"
    within = [x for x in (d.shifts[k] for k in ("mean", "median", "p90")) if not x.moved]
    text = f"B's step is {how}: " + "; ".join(_moved_text(x) for x in d.moved)
    if within:
        text += "; " + ", ".join(f"the {x.stat} {signed(x.delta_ns)}" for x in within) + \
            f" within {'its' if len(within) == 1 else 'their'} noise (" + \
            ", ".join(f"±{fmt_ns_prose(x.noise_ns)}" for x in within) + ")"
    return text


def _moved_text(x: Shift) -> str:
    """"the mean 9.6 ms in A, 20.6 ms in B, +10.9 ms (+114%), beyond its noise (±6.3 ms)"."""
    pct = f" ({'−' if x.delta_ns < 0 else '+'}{abs(x.delta_ns) / x.a_ns:.0%})" if x.a_ns else ""
    return (f"the {x.stat} {fmt_ns_prose(x.a_ns)} in A, {fmt_ns_prose(x.b_ns)} in B, {signed(x.delta_ns)}{pct}, "
            f"beyond its noise (±{fmt_ns_prose(x.noise_ns)})")


def shifts_json(got: dict[str, Shift]) -> dict:
    """{stat: {a_ns, b_ns, delta_ns, noise_ns, moved}} of a quantity's median, mean and p90."""
    return {k: {"a_ns": x.a_ns, "b_ns": x.b_ns, "delta_ns": x.delta_ns, "noise_ns": x.noise_ns, "moved": x.moved}
            for k, x in got.items()}


def to_json(d: Diff) -> dict:
    """The diff's JSON (docs/FORMAT.md, "The diff's JSON"): a contract for scripts and CI."""
    def stats(s: StepStats) -> dict:
        return {"step_count": s.step_count, "median_ns": s.median_ns, "p90_ns": s.p90_ns, "mean_ns": s.mean_ns,
                "spread_ns": s.spread_ns}

    return {
        "a": {**stats(d.a), "trace": d.a_label}, "b": {**stats(d.b), "trace": d.b_label},
        "changed": d.changed, "slower": d.slower, "delta_ns": d.delta_ns, "noise_ns": d.noise_ns,
        "moved": [x.stat for x in d.moved], "shifts": shifts_json(d.shifts),
        "structure": [{"kind": c.kind, "rank": c.rank, "op": c.op, "site": c.site, "detail": c.detail,
                       "steps": c.steps} for c in d.structure],
        "explanations": [{"what": e.what, "rank": e.rank, "span": e.span, "op": e.op, "site": e.site,
                          "delta_ns": e.delta_ns, "noise_ns": e.noise_ns} for e in d.explanations],
        "unexplained_ns": d.unexplained_ns,
        "timing": [{"what": r.what, "name": r.name, "rank": r.rank, "a_ns": r.a_ns, "b_ns": r.b_ns,
                    "delta_ns": r.delta_ns, "noise_ns": r.noise_ns, "changed": r.changed,
                    "moved": [k for k, x in r.shifts.items() if x.moved], "shifts": shifts_json(r.shifts)}
                   for r in d.timing],
        "steps": [{"index": k, "a_ns": x, "b_ns": y} for k, x, y in d.steps],
        "notes": list(d.notes),
    }


__all__ = ["Diff", "OpFigures", "compare", "diff_tables", "to_json", "headline", "verdict", "signed", "analysed"]
