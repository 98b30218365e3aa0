"""A pipeline's schedule as the trace shows it: each stage's forwards and backwards, micro-batch by micro-batch,
iteration by iteration (the stage x time grid of the GPipe and Megatron papers), the bubble of each iteration, each
stage's idle time by its cause, and the same schedule drawn ideally.

*Actions.* In an iteration each rank of a pipeline of P ranks holding v stages each (interleaved 1F1B: v virtual
stages, its ring passed v times) runs v*M forwards and v*M backwards for M micro-batches. A forward's *input* is
its recv of the activation from the stage before and its *output* its send to the stage after; a backward's input
is its recv of the gradient from the stage after and its output its send to the stage before. The first stage's
forwards have no input (the data), the last stage's no output (the loss), its backwards no input. The k-th forward
of a rank in an iteration is micro-batch k (v = 1); interleaved, it is chunk (k // P) mod v of micro-batch
(k // (P v)) P + k mod P, and the k-th backward chunk v - 1 - (k // P) mod v of the same micro-batch: the order of
Megatron's and torch.distributed.pipelining's interleaved 1F1B (checked against the messages: every forward
message must join a stage's output to the next stage's input of the same micro-batch). A rank's k-th input of a
direction is the k-th message it receives that way, its k-th output the k-th it sends: micro-batches go through a
link in order, as pipelining and Megatron run them; a hand-written schedule that runs the backwards last
micro-batch first is drawn with its backwards numbered in the order they ran (the trace carries no micro-batch
number).

*Where an action runs.* A rank's host is *in communication* while it is in a blocking send or recv, in a wait() of
an async one, or at the instant it issues an async send (the end of what computed it); the pipeline's own P2P ops
only: any other op (a tensor-parallel all-reduce inside a stage's layers) is part of the action around it. Between
two such blocks the host computes: a *gap*. An action with an output ends where its send is issued (the gap before
that block); an action with only an input starts in the first gap after its recv completed (a gap of at least a
tenth of the median output gap: not the host's few microseconds between the waits of one batch_isend_irecv). A gap
between two blocks of the same iteration is all computation: one action fills it; two (pipelining runs the first
stage's backward and its next forward, or the last stage's forward and its backward, with no message between) share
it in the ratio of their *typical* durations (the median of the rank's actions of that kind that filled a gap
alone; else derived from a shared gap whose other action is known; else the kind's median on any rank; else a
backward twice a forward), the boundary between them estimated (`estimated`). A gap side that is no block of the
iteration (the first forward of an iteration, after the last iteration's optimizer step; the last backward, before
the data-parallel all-reduce) is not computation: the action next to it is its typical long, packed against its
anchored side.

*The bubble of an iteration* is counted from its first forward's start to its last backward's end, over its P
ranks: 1 - (their actions' time) / (P x that span), the start-up waits apart: where a rank had not started the
iteration yet (a process still importing torch, a stage still in the last iteration's optimizer step) when the input
of its first computation was sent, the stretch from that send to the rank's first op or computation of the
iteration is cut from the span (the others' waits for it then are for its start, not the schedule's); a rank that
came before its input delayed nothing. Each rank's idle time in the span is its warm-up (before its first action), its cool-down
(after its last), its blocked time in ops with the stage before or the stage after (waiting on a slower neighbour,
or exchanging with it) and the rest (its host between the ops: issuing them). The *textbook* grid of an iteration
runs every rank's actions in their measured order with every forward and every backward at the median duration of
its kind over the trace, and no time in messages: GPipe's and 1F1B's bubble there is (P-1)/(M+P-1).

*Warm-up iterations* are the leading ones unlike the steady ones, by the steps' rule (waits/steps.py): the warm-up steps,
or the windows that rule finds (`warm_windows`). They are marked, and left out of the mean bubble (`fraction`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from statistics import median

import numpy as np

from ...data.table import NONE, EventTable
from ..waits.steps import build_steps

F, B = "F", "B"
MIN_GAP = 0.1          # an input-only action's gap: at least this share of the pipeline's median output gap
BACKWARD_OVER_FORWARD = 2.0  # a backward's typical over a forward's where the trace measures neither alone
MAX_ACTIONS = 10_000   # actions read over the whole trace: beyond, the later iterations are not read (a note says so)
_INF = 1 << 62


@dataclass
class _Action:
    rank: int
    pos: int               # the rank's position in the pipeline
    kind: str              # F or B
    chunk: int             # its virtual stage on the rank: stage = pos + chunk * P
    mb: int                # micro-batch
    it: int                # the iteration's index in this pipeline's windows
    inp: int = -1          # its input's row
    out: int = -1          # its output's row
    gap: int = -1          # the gap of the rank's blocks it runs in
    side: int = 0          # within the gap: 0 at its start (its input), 1 at its end (its output)
    start: int = 0
    end: int = 0
    estimated: bool = False


@dataclass
class Schedule:
    """What the reader found: PipelineStats' schedule fields (core/results.py), for every pipeline read."""

    cells: list = field(default_factory=list)
    iterations: list = field(default_factory=list)
    stage_idle: list = field(default_factory=list)
    startup: list = field(default_factory=list)
    ideals: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def fraction(self) -> float:
        """The mean of the read iterations' bubbles, the warm-up ones left out (all of them where every one is)."""
        fr = [it[7] for it in self.iterations if not it[11]] or [it[7] for it in self.iterations]
        return sum(fr) / len(fr) if fr else 0.0


class _Blocks:
    """One rank's communication blocks: the merged host intervals of its pipeline P2P ops in the iterations read."""

    def __init__(self, cols: "_Cols", rows: list[int], it_of: dict[int, int]) -> None:
        spans = []
        for i in rows:
            start = int(cols.start[i])
            if cols.is_async[i]:
                spans.append((start, start, i, True))  # its issue: what computed before it is done
                if cols.wait_start[i] != NONE:
                    end = int(cols.wait_end[i]) if cols.wait_end[i] != NONE else _INF
                    spans.append((int(cols.wait_start[i]), end, i, False))
            else:
                end = int(cols.fin[i]) if cols.fin[i] != NONE else _INF
                spans.append((start, max(end, start), i, True))
        spans.sort()
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.its: list[set[int]] = []  # the iterations whose rows each block holds
        self.issues: list[bool] = []   # whether a block issues an op (else it only waits for ops issued before)
        for a, b, i, issue in spans:
            it = it_of.get(i, -1)
            if self.lo and a <= self.hi[-1]:
                self.hi[-1] = max(self.hi[-1], b)
                self.its[-1].add(it)
                self.issues[-1] |= issue
            else:
                self.lo.append(a)
                self.hi.append(b)
                self.its.append({it})
                self.issues.append(issue)

    def holding(self, t: int) -> int:
        """The block whose interval holds instant t (the last one starting at or before it)."""
        return max(0, bisect_right(self.lo, t) - 1)

    def gap(self, g: int) -> tuple[int, int]:
        """Gap g: from block g-1's end to block g's start (open ends: -inf, +inf)."""
        return (self.hi[g - 1] if g > 0 else -_INF), (self.lo[g] if g < len(self.lo) else _INF)

    def tight(self, g: int, side: int, it: int) -> bool:
        """Whether gap g's side (0: its start, 1: its end) is a block holding a row of iteration `it`."""
        b = g - 1 if side == 0 else g
        return 0 <= b < len(self.lo) and it in self.its[b]


class _Cols:
    """The columns read, row by row (the table's own: indexing one gives a Python int, a numpy column's a scalar
    to convert; the finished column is numpy's, read as .item)."""

    def __init__(self, t: EventTable, fin) -> None:
        self.start = t.start_ns
        self.fin = _Fin(fin)
        self.wait_start = t.wait_start_ns
        self.wait_end = t.wait_end_ns
        self.is_async = t.async_op
        self.op = t.op
        self.peer = t.peer

    def sends(self, i: int) -> bool:
        return self.op[i] == "send"

    def done(self, i: int) -> int:
        """When row i's result was in the host's hands: its wait()'s return, else its end."""
        if self.is_async[i] and self.wait_end[i] != NONE:
            return int(self.wait_end[i])
        return int(self.fin[i]) if self.fin[i] != NONE else _INF

    def blocked(self, i: int) -> tuple[int, int] | None:
        if self.is_async[i]:
            if self.wait_start[i] == NONE:
                return None
            return int(self.wait_start[i]), int(self.wait_end[i]) if self.wait_end[i] != NONE else _INF
        return int(self.start[i]), int(self.fin[i]) if self.fin[i] != NONE else _INF


class _Fin:
    def __init__(self, col) -> None:
        self.item = col.item

    def __getitem__(self, i: int) -> int:
        return self.item(i)


def read_schedule(t: EventTable, fin, p2p) -> "_Builder":
    """The reader of the pipelines' schedules: `pipeline(...)` each, then `finish()`. fin: each row's end
    (matching.finished_column); p2p: the matched messages (tables.P2PTable)."""
    return _Builder(t, fin, _Partners(t, p2p))


def actions_of(p: int, v: int, m: int, pos: int, kind: str) -> list[tuple[int, int, bool, bool]]:
    """The rank at position pos's actions of `kind` in an iteration, in order: (chunk, micro-batch, whether it has
    an input, whether it has an output). Its k-th input of the kind is the k-th message it receives that way, its
    k-th output the k-th it sends."""
    out = []
    for k in range(v * m):
        chunk, mb = labels(k, kind, p, v)
        first, last = pos == 0 and chunk == 0, pos == p - 1 and chunk == v - 1
        out.append((chunk, mb, not (first if kind == F else last), not (last if kind == F else first)))
    return out


def labels(k: int, kind: str, p: int, v: int) -> tuple[int, int]:
    """(chunk, micro-batch) of a rank's k-th action of `kind` in an iteration of p ranks holding v stages each."""
    if v == 1:
        return 0, k
    chunk = (k // p) % v
    return (chunk if kind == F else v - 1 - chunk), (k // (p * v)) * p + k % p


class _Builder:
    def __init__(self, t: EventTable, fin, partner: _Partners) -> None:
        self.t = t
        self.cols = _Cols(t, fin)
        self.partner = partner  # a matched P2P row -> the row at its other end
        self.out = Schedule()
        self.budget = MAX_ACTIONS
        self.skipped = 0  # pipelines not read: past the budget
        self.ideal_index: dict[tuple, int] = {}
        self.iter_acts: list[list[_Action]] = []  # each read iteration's actions (its textbook grid's orders)
        self.pending: list = []  # (pipeline index, path, v, per-iteration actions, windows, ...): cells are timed
        #                          once every pipeline's typical durations are known
        self.warm: dict[int, set[int]] = {}  # pipeline index -> its warm-up iterations (by their index)

    # -- reading one pipeline -------------------------------------------------------------------------------
    def pipeline(self, k_path: int, path: list[int], v: int, windows_of, warmup: set[int] | None = None) -> None:
        """One pipeline (ranks in stage order, v stages each) over its windows: windows_of() gives them, (iteration
        index, rank -> its P2P rows within the pipeline in it, by start), asked only while the budget lasts.
        warmup: the iterations that are warm-up (the steps' when they are steps); None: found by the steps' rule
        over the windows (`warm_windows`)."""
        p = len(path)
        if p < 2 or (v > 1 and p < 3):
            return
        if self.budget <= 0:
            self.skipped += 1
            return
        windows = windows_of()
        self.warm[k_path] = warm_windows(self.t, windows) if warmup is None else warmup
        self.partner.add([i for _, per_rank in windows for rr in per_rank.values() for i in rr])
        iters: list[tuple[int, list[_Action]]] = []
        bad: list[int] = []
        for w, (index, per_rank) in enumerate(windows):
            if self.budget <= 0:
                self.out.notes.append(f"pipeline {path}'s iterations from {index} on are not read (a trace's first "
                                      f"{MAX_ACTIONS:,} computations are)")
                break
            acts = self._actions(path, v, w, per_rank)
            if acts is None:
                bad.append(index)
                continue
            self.budget -= len(acts)
            iters.append((index, acts))
        if bad:
            shown = ", ".join(map(str, bad[:8])) + (" ..." if len(bad) > 8 else "")
            self.out.notes.append(f"pipeline {path}: iteration{'s' if len(bad) > 1 else ''} {shown} not read as a "
                                  f"schedule: {'their' if len(bad) > 1 else 'its'} messages are not P = {p} stages' "
                                  f"forwards and backwards of the same micro-batches")
        if not iters:
            return
        # the blocks of the iterations read (and of those not read between them: their sides are loose anyway)
        read = {w for _, acts in iters for w in (acts[0].it,)}
        it_of = {i: w for w, (_, per_rank) in enumerate(windows) if w in read for rr in per_rank.values() for i in rr}
        blocks = {r: _Blocks(self.cols, [i for w in sorted(read) for i in windows[w][1].get(r, ())], it_of)
                  for r in path}
        self._place(path, blocks, [a for _, acts in iters for a in acts])
        self.pending.append((k_path, path, v, iters, windows, blocks))

    def _actions(self, path: list[int], v: int, w: int, per_rank: dict[int, list[int]]) -> list[_Action] | None:
        """Every rank's forwards and backwards in window w, with their input and output rows; None when the
        messages do not fit a schedule (counts that differ from the stages', labels the messages contradict)."""
        p = len(path)
        io = {}
        total_b = 0
        for pos, r in enumerate(path):
            prev = path[pos - 1] if pos > 0 else (path[-1] if v > 1 else -2)
            nxt = path[pos + 1] if pos < p - 1 else (path[0] if v > 1 else -2)
            f_in, f_out, b_in, b_out = [], [], [], []
            for i in per_rank.get(r, ()):
                peer, sending = self.cols.peer[i], self.cols.sends(i)
                if peer == prev:
                    (b_out if sending else f_in).append(i)
                elif peer == nxt:
                    (f_out if sending else b_in).append(i)
            io[r] = (f_in, f_out, b_in, b_out)
            total_b += len(b_in) + len(b_out)
        f_out0 = len(io[path[0]][1])
        if f_out0 == 0 or f_out0 % v:
            return None
        m = f_out0 // v
        if v > 1 and m % p:
            return None
        kinds = (F, B) if total_b else (F,)
        acts: list[_Action] = []
        for pos, r in enumerate(path):
            f_in, f_out, b_in, b_out = io[r]
            for kind, ins, outs in ((F, f_in, f_out), (B, b_in, b_out)):
                if kind not in kinds:
                    if ins or outs:
                        return None
                    continue
                ins, outs = sorted(ins, key=self.cols.start.__getitem__), sorted(outs, key=self.cols.start.__getitem__)
                ki = ko = 0
                for chunk, mb, has_in, has_out in actions_of(p, v, m, pos, kind):
                    a = _Action(r, pos, kind, chunk, mb, w)
                    if has_in:
                        if ki >= len(ins):
                            return None
                        a.inp, ki = ins[ki], ki + 1
                    if has_out:
                        if ko >= len(outs):
                            return None
                        a.out, ko = outs[ko], ko + 1
                    acts.append(a)
                if ki != len(ins) or ko != len(outs):
                    return None
        if v > 1 and not self._consistent(path, v, acts):
            return None
        return acts

    def _consistent(self, path: list[int], v: int, acts: list[_Action]) -> bool:
        """Every message joins an output and an input of the same micro-batch, one stage apart."""
        p = len(path)
        by_row = {}
        for a in acts:
            if a.inp >= 0:
                by_row[a.inp] = a
        for a in acts:
            if a.out < 0:
                continue
            b = by_row.get(self.partner.get(a.out, -1))
            if b is None or b.kind != a.kind or b.mb != a.mb:
                return False
            s, s2 = a.pos + a.chunk * p, b.pos + b.chunk * p
            if s2 != (s + 1 if a.kind == F else s - 1):
                return False
        return True

    # -- where each action runs ------------------------------------------------------------------------------
    def _place(self, path: list[int], blocks: dict[int, _Blocks], acts: list[_Action]) -> None:
        """Each action's gap: its output's (the gap before the block its send was issued in), else the first gap
        after its input's completion long enough to hold computation."""
        cols = self.cols
        out_gaps = []
        for a in acts:
            if a.out >= 0:
                bl = blocks[a.rank]
                a.gap, a.side = bl.holding(int(cols.start[a.out])), 1
                lo, hi = bl.gap(a.gap)
                if lo > -_INF and hi < _INF:
                    out_gaps.append(hi - lo)
        least = MIN_GAP * median(out_gaps) if out_gaps else 0
        for a in acts:
            if a.out >= 0:
                # back over waits for ops of the iteration issued before (pipelining computes a forward, waits for the
                # last one's send, then sends): the computation is the longest gap since the last block that issued
                # an op
                bl = blocks[a.rank]
                first = bl.holding(cols.done(a.inp)) + 1 if a.inp >= 0 else 1
                g = best = a.gap
                while g > first and not bl.issues[g - 1] and a.it in bl.its[g - 1]:
                    g -= 1
                    if _length(bl.gap(g)) > _length(bl.gap(best)):
                        best = g
                a.gap = best
                continue
            bl = blocks[a.rank]
            g = bl.holding(cols.done(a.inp)) + 1
            while g < len(bl.lo):
                lo, hi = bl.gap(g)
                if hi - lo >= least:
                    break
                g += 1
            a.gap, a.side = g, 0

    # -- timing every pipeline's actions -------------------------------------------------------------------
    def finish(self) -> Schedule:
        if self.skipped:
            self.out.notes.append(f"{self.skipped} more pipeline{'s' if self.skipped > 1 else ''} not read (a trace's "
                                  f"first {MAX_ACTIONS:,} computations are)")
        groups = []  # (rank, gap) -> its actions, per pipeline
        typical: dict[tuple[int, str], list[int]] = {}
        for _, path, v, iters, windows, blocks in self.pending:
            by_gap: dict[tuple[int, int], list[_Action]] = {}
            for _, acts in iters:
                for a in acts:
                    by_gap.setdefault((a.rank, a.gap), []).append(a)
            for key, acts in by_gap.items():
                acts.sort(key=lambda a: (a.it, a.side, self._anchor(a)))
            groups.append(by_gap)
            for (r, g), acts in by_gap.items():
                bl = blocks[r]
                if len(acts) == 1 and bl.tight(g, 0, acts[0].it) and bl.tight(g, 1, acts[0].it):
                    lo, hi = bl.gap(g)
                    typical.setdefault((r, acts[0].kind), []).append(hi - lo)
        known = {k: median(x) for k, x in typical.items()}
        # a gap shared by two actions of one iteration whose other is known gives the one not yet known
        derived: dict[tuple[int, str], list[int]] = {}
        for (_, path, v, iters, windows, blocks), by_gap in zip(self.pending, groups):
            for (r, g), acts in by_gap.items():
                if len(acts) == 2 and acts[0].it == acts[1].it and acts[0].kind != acts[1].kind:
                    bl = blocks[r]
                    if bl.tight(g, 0, acts[0].it) and bl.tight(g, 1, acts[0].it):
                        lo, hi = bl.gap(g)
                        for a, other in ((acts[0], acts[1]), (acts[1], acts[0])):
                            if (r, a.kind) not in known and (r, other.kind) in known:
                                derived.setdefault((r, a.kind), []).append(max(0, hi - lo - known[(r, other.kind)]))
        for k, x in derived.items():
            known[k] = median(x)
        by_kind = {kind: median([x for (_, kk), x in known.items() if kk == kind] or [0]) for kind in (F, B)}
        if not by_kind[F] and by_kind[B]:
            by_kind[F] = by_kind[B] / BACKWARD_OVER_FORWARD
        if not by_kind[B] and by_kind[F]:
            by_kind[B] = by_kind[F] * BACKWARD_OVER_FORWARD
        if not by_kind[F]:
            by_kind = {F: 1.0, B: BACKWARD_OVER_FORWARD}

        def typ(a: _Action) -> float:
            return known.get((a.rank, a.kind)) or by_kind[a.kind]

        for (k_path, path, v, iters, windows, blocks), by_gap in zip(self.pending, groups):
            for (r, g), acts in by_gap.items():
                self._time(blocks[r], g, acts, typ)
            for index, acts in iters:
                self._iteration(k_path, path, v, index, windows, acts)
        all_cells = self.out.cells
        med = {kind: median([c[6] - c[5] for c in all_cells if c[3] == kind] or [0]) for kind in (F, B)}
        for it in range(len(self.out.iterations)):
            self._ideal(it, med)
        return self.out

    def _anchor(self, a: _Action) -> int:
        return int(self.cols.start[a.out]) if a.side else self.cols.done(a.inp)

    def _time(self, bl: _Blocks, g: int, acts: list[_Action], typ) -> None:
        """The actions of one gap, in order, given their times: an iteration's actions between two of its own
        blocks fill the gap, in the ratio of their typical durations; next to a side that is not (another
        iteration's, or none), each is its typical long, packed against the side that is."""
        lo, hi = bl.gap(g)
        # the gap's actions by iteration: a break between two iterations is a loose side of both
        segments: list[list[_Action]] = []
        for a in acts:
            if segments and segments[-1][0].it == a.it:
                segments[-1].append(a)
            else:
                segments.append([a])
        placed: list[tuple[list[_Action], int, int, bool, bool]] = []
        for n, seg in enumerate(segments):
            it = seg[0].it
            left = n == 0 and bl.tight(g, 0, it)
            right = n == len(segments) - 1 and bl.tight(g, 1, it)
            placed.append((seg, lo, hi, left, right))
        # the typical lengths of the segments with a loose side must fit the gap together
        want = sum(typ(a) for seg, _, _, left, right in placed if not (left and right) for a in seg)
        room = hi - lo if lo > -_INF and hi < _INF else _INF
        scale = min(1.0, room / want) if want > 0 and room < _INF else 1.0
        for seg, a_lo, a_hi, left, right in placed:
            ts = [typ(a) for a in seg]
            if left and right:
                total = sum(ts) or 1.0
                x = a_lo
                for a, tt in zip(seg, ts):
                    a.start, a.end = x, (a_hi if a is seg[-1] else x + int((a_hi - a_lo) * tt / total))
                    a.estimated = len(seg) > 1
                    x = a.end
                continue
            pack_right = right or (not left and seg[-1].side == 1)
            if pack_right:
                x = a_hi if a_hi < _INF else max(self._anchor(a) for a in seg)
                for a, tt in zip(reversed(seg), reversed(ts)):
                    a.end, a.start = x, x - int(tt * scale)
                    x = a.start
            else:
                x = a_lo if a_lo > -_INF else min(self._anchor(a) for a in seg)
                for a, tt in zip(seg, ts):
                    a.start, a.end = x, x + int(tt * scale)
                    x = a.end
            for a in seg:
                a.estimated = True
        # an action with both an input and an output whose input completed before the gap (a stage's forward with
        # other ops inside: a tensor-parallel all-reduce) starts there, when nothing else ran between
        for a in acts:
            if a.inp >= 0 and a.out >= 0 and len(acts) == 1 and not a.estimated:
                b_in = bl.holding(self.cols.done(a.inp))
                if b_in < g - 1:
                    a.start = bl.hi[b_in]

    # -- an iteration's bubble and idle times ---------------------------------------------------------------
    def _iteration(self, k_path: int, path: list[int], v: int, index: int, windows, acts: list[_Action]) -> None:
        p = len(path)
        w = acts[0].it
        per_rank = windows[w][1]
        fwd = [a for a in acts if a.kind == F]
        bwd = [a for a in acts if a.kind == B] or fwd
        t0, t1 = min(a.start for a in fwd), max(a.end for a in bwd)
        if t1 <= t0:
            return
        cuts = self._startup(per_rank, acts, t0, t1)
        cut_ns = sum(b - a for a, b in cuts)
        self.out.startup.extend((k_path, index, a, b) for a, b in cuts)
        span = t1 - t0 - cut_ns
        if span <= 0:
            return
        busy = 0
        for a in acts:
            busy += _minus(max(a.start, t0), min(a.end, t1), cuts)
            self.out.cells.append((index, a.rank, a.pos + a.chunk * p, a.kind, a.mb, a.start, a.end, a.estimated))
        m = len(fwd) // (p * v)
        kind = _kind(acts, v)
        expected = (p - 1) / (v * m + p - 1)
        self.out.iterations.append([k_path, index, kind, m, t0, t1, cut_ns, 1 - busy / (p * span), expected,
                                    0.0, -1, index in self.warm.get(k_path, ())])
        self.iter_acts.append(acts)
        for pos, r in enumerate(path):
            mine = sorted((a for a in acts if a.rank == r), key=lambda a: a.start)
            if not mine:
                continue
            warm = _minus(t0, max(t0, mine[0].start), cuts)
            cool = _minus(min(t1, mine[-1].end), t1, cuts)
            idle = []  # between its actions
            for a, b in zip(mine, mine[1:]):
                if b.start > a.end:
                    idle.append((a.end, b.start))
            prev = path[pos - 1] if pos > 0 else (path[-1] if v > 1 else -1)
            nxt = path[pos + 1] if pos < p - 1 else (path[0] if v > 1 else -1)
            before = after = 0
            ends = [b for _, b in idle]
            for i in per_rank.get(r, ()) if idle else ():
                span_i = self.cols.blocked(i)
                if span_i is None:
                    continue
                x, k = 0, bisect_right(ends, span_i[0])  # (the idle stretches are in order, apart)
                while k < len(idle) and idle[k][0] < span_i[1]:
                    x += _overlap(span_i, idle[k])
                    k += 1
                if x and self.cols.peer[i] == prev:
                    before += x
                elif x and self.cols.peer[i] == nxt:
                    after += x
            between = sum(b - a for a, b in idle)
            other = max(0, between - before - after)
            flight = peak = 0
            for a in mine:
                flight += 1 if a.kind == F else -1
                peak = max(peak, flight)
            self.out.stage_idle.append((index, r, warm, cool, before, after, other, peak))

    def _startup(self, per_rank: dict[int, list[int]], acts: list[_Action], t0: int, t1: int
                 ) -> list[tuple[int, int]]:
        """The stretches in [t0, t1] where a rank had not started the iteration while its first computation's input
        was already sent: from that send to its first op or computation of the iteration (whichever came first). A
        rank that came before its input did delayed nothing."""
        cols = self.cols
        cuts = []
        first: dict[int, _Action] = {}
        for a in acts:
            if a.rank not in first or a.start < first[a.rank].start:
                first[a.rank] = a
        for r, a in first.items():
            send = self.partner.get(a.inp, -1) if a.inp >= 0 else -1
            if send < 0:
                continue
            arrived = min([a.start] + [int(cols.start[i]) for i in per_rank.get(r, ())])
            ready = int(cols.start[send])
            lo, hi = max(ready, t0), min(arrived, t1)
            if hi > lo:
                cuts.append((lo, hi))
        return _union(cuts)

    # -- the textbook grid ---------------------------------------------------------------------------------
    def _ideal(self, n: int, med: dict[str, float]) -> None:
        """Iteration n's actions in their measured order on each rank, every one at the median of its kind, no
        time in messages: the textbook grid (shared by the iterations of one order)."""
        rec, acts = self.out.iterations[n], self.iter_acts[n]
        p = max(a.pos for a in acts) + 1
        v = max(a.chunk for a in acts) + 1
        orders = {}
        for a in sorted(acts, key=lambda a: a.start):
            orders.setdefault(a.pos, []).append((a.kind, a.pos + a.chunk * p, a.mb))
        key = tuple(tuple(orders.get(pos, ())) for pos in range(p))
        k = self.ideal_index.get(key)
        if k is None:
            cells = _simulate(key, p * v, {kind: max(1, int(x)) for kind, x in med.items()})
            k = len(self.out.ideals)
            self.out.ideals.append(cells)
            self.ideal_index[key] = k
        cells = self.out.ideals[k]
        span = max((c[5] for c in cells), default=0)
        busy = sum(c[5] - c[4] for c in cells)
        rec[9] = 1 - busy / (p * span) if span else 0.0
        rec[10] = k
        self.out.iterations[n] = tuple(rec)


def warm_windows(t: EventTable, windows: list) -> set[int]:
    """The windows (index, rank -> rows) that are warm-up by the steps' rule, each window's rows taken as a step
    (steps.build_steps: the leading ones with another sequence of ops, or far longer than the steady ones)."""
    if len(windows) < 3:
        return set()
    step_of = np.full(len(t), -1, np.int32)
    for w, (_, per_rank) in enumerate(windows):
        for rows in per_rank.values():
            step_of[rows] = w
    return {windows[s.index][0] for s in build_steps(t, array("i", step_of.tobytes())) if s.warmup}


def _simulate(orders: tuple, stages: int, dur: dict[str, int]) -> list[tuple]:
    """Each rank's actions in order, each as soon as its rank is free and what it needs is done: a forward the same
    micro-batch's forward one stage before, a backward its backward one stage after (the last stage's: its own
    forward). (stage row, virtual stage, kind, micro-batch, start, end) from 0; [] when the orders deadlock."""
    present = {x for order in orders for x in order}
    done: dict[tuple[str, int, int], int] = {}
    free = [0] * len(orders)
    at = [0] * len(orders)
    out = []
    left = len(present)
    while left:
        moved = False
        for pos, order in enumerate(orders):
            while at[pos] < len(order):
                kind, s, mb = order[at[pos]]
                need = (F, s - 1, mb) if kind == F else ((B, s + 1, mb) if s < stages - 1 else (F, s, mb))
                if need in present and need not in done:
                    break
                start = max(free[pos], done.get(need, 0))
                free[pos] = done[(kind, s, mb)] = start + dur[kind]
                out.append((pos, s, kind, mb, start, free[pos]))
                at[pos] += 1
                left -= 1
                moved = True
        if not moved:
            return []
    return out


def _kind(acts: list[_Action], v: int) -> str:
    if not any(a.kind == B for a in acts):
        return "forward only"
    if v > 1:
        return "interleaved 1F1B"
    # a rank ran a backward before its last forward where both the placed times and the issue order of the actions'
    # messages (each one's output, else its input: a send is issued when its computation ends) say so. The times
    # alone rest on estimates (a gap shared by two actions; an input-only action put in the first long gap after its
    # recv completed), and a loaded GPipe run's last stage read its last forward after its first backward's send
    last_f: dict[int, tuple[int, int]] = {}
    first_b: dict[int, tuple[int, int]] = {}
    for a in acts:
        row = a.out if a.out >= 0 else a.inp
        if a.kind == F:
            was = last_f.get(a.rank, (-_INF, -_INF))
            last_f[a.rank] = (max(was[0], a.start), max(was[1], row))
        else:
            was = first_b.get(a.rank, (_INF, _INF))
            first_b[a.rank] = (min(was[0], a.start), min(was[1], row if row >= 0 else _INF))
    for r, (f_at, f_row) in last_f.items():
        b_at, b_row = first_b.get(r, (_INF, _INF))
        if b_at < f_at and (f_row < 0 or b_row == _INF or b_row < f_row):
            return "1F1B"
    return "GPipe"


def _length(gap: tuple[int, int]) -> int:
    return gap[1] - gap[0] if -_INF < gap[0] and gap[1] < _INF else 0


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _overlap(x: tuple[int, int], y: tuple[int, int]) -> int:
    return max(0, min(x[1], y[1]) - max(x[0], y[0]))


def _minus(a: int, b: int, cuts: list[tuple[int, int]]) -> int:
    """The length of [a, b] outside the cuts."""
    if b <= a:
        return 0
    return b - a - sum(_overlap((a, b), c) for c in cuts)


class _Partners(dict):
    """A matched P2P row -> the row at the other end of its message, for the rows of the iterations read (added
    pipeline by pipeline: the messages' table is scanned in numpy, its matches of those rows made into a dict)."""

    def __init__(self, t: EventTable, p2p) -> None:
        super().__init__()
        self.n = len(t)
        self.send, self.recv = np.frombuffer(p2p.send, np.int32), np.frombuffer(p2p.recv, np.int32)
        self.matched = np.flatnonzero((self.send != NONE) & (self.recv != NONE))

    def add(self, rows: list[int]) -> None:
        mine = np.zeros(self.n, bool)
        mine[np.asarray(rows, np.int64)] = True
        send, recv = self.send[self.matched], self.recv[self.matched]
        ok = mine[send] | mine[recv]
        s, r = send[ok].tolist(), recv[ok].tolist()
        self.update(zip(s, r))
        self.update(zip(r, s))
