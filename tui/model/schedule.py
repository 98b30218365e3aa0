"""The pipeline's schedule grid without Textual: the analysis' schedule (PipelineStats' `schedule_iterations`,
`schedule`, `stage_idle`, `ideal_schedules`; tracer/analysis/pipeline/schedule.py) by iteration, the iteration and the
micro-batch of the event at the playhead, and one iteration laid out in columns.

The grid draws one iteration of the playhead's pipeline: a row per rank in stage order, time across from the
iteration's first forward, each forward (F3) and backward (B3) as a run of cells; below it the same schedule drawn
ideally (the textbook grid), on the same scale, so that the two compare column for column.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from disttrace.tracer.data.table import NONE

from .store import TraceStore

IDLE, CUT, BLANK = -1, -2, -3  # what a column of a row holds when no computation does


@dataclass(frozen=True)
class Iteration:
    """One iteration of one pipeline, as the analysis read it (PipelineStats.schedule_iterations)."""

    pipeline: int
    index: int            # its step (or window) number
    kind: str             # "GPipe", "1F1B", "interleaved 1F1B", "forward only"
    micro_batches: int
    start_ns: int         # its first forward's start
    end_ns: int           # its last backward's end
    startup_ns: int       # the start-up waits cut from its span
    bubble: float
    expected: float       # (P-1)/(vM+P-1)
    ideal_bubble: float   # its textbook grid's
    ideal: int            # its textbook grid (an index of ideal_schedules)
    warmup: bool = False  # one of the first iterations, unlike the steady ones (the steps' rule)


@dataclass(frozen=True)
class Cell:
    rank: int
    stage: int            # virtual stage
    kind: str             # "F" or "B"
    mb: int
    start_ns: int
    end_ns: int
    estimated: bool = False

    @property
    def label(self) -> str:
        return f"{self.kind}{self.mb}"


@dataclass(frozen=True)
class Row:
    """One drawn row: per column, an index into `cells` (the cell drawn there) or IDLE, CUT or BLANK."""

    label: str
    cols: tuple[int, ...]
    cells: tuple[Cell, ...]


class ScheduleModel:
    """The analysis' schedule, by pipeline and iteration."""

    def __init__(self, store: TraceStore) -> None:
        self.store = store
        p = store.analysis.pipeline
        self.pipeline = p
        self.paths: list[list[int]] = list(p.pipelines) if p is not None else []
        self.v = p.virtual_stages if p is not None else 1
        self.pipeline_of = {r: k for k, path in enumerate(self.paths) for r in path}
        self.iterations: list[Iteration] = [Iteration(*it) for it in p.schedule_iterations] if p else []
        self.by_pipeline: dict[int, list[int]] = {}  # pipeline -> its iterations (indexes of self.iterations)
        for n, it in enumerate(self.iterations):
            self.by_pipeline.setdefault(it.pipeline, []).append(n)
        key_of = {(it.pipeline, it.index): n for n, it in enumerate(self.iterations)}
        self.cells: dict[int, list[Cell]] = {}
        for c in (p.schedule if p else ()):
            n = key_of.get((self.pipeline_of.get(c[1], -1), c[0]))
            if n is not None:
                self.cells.setdefault(n, []).append(Cell(c[1], c[2], c[3], c[4], c[5], c[6], c[7]))
        for cells in self.cells.values():
            cells.sort(key=lambda c: (c.rank, c.start_ns))
        self.idle = {(s[0], s[1]): s[2:] for s in (p.stage_idle if p else ())}
        self.startup: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for k, index, a, b in (p.schedule_startup if p else ()):
            self.startup.setdefault((k, index), []).append((a, b))
        self.ideals = [[Cell(-1 - c[0], c[1], c[2], c[3], c[4], c[5]) for c in cells]
                       for cells in (p.ideal_schedules if p else ())]

    def __bool__(self) -> bool:
        return bool(self.iterations)

    # -- the playhead ---------------------------------------------------------------------------------------
    def at(self, row: int) -> int:
        """The iteration (an index of self.iterations) the event at `row` belongs to: of its rank's pipeline (the
        first for a rank outside them), the one whose span holds it (_when), else the nearer of the two around it,
        else the first. Before the first event (row < 0: the tab opened before the playhead moved), the first
        pipeline's first steady iteration: a warm-up one (gloo's first connections, ten times a steady one's
        length) would set a scale where the steady cells cannot be read; `[` reaches it."""
        if not self.iterations:
            return -1
        t = self.store.table
        k = self.pipeline_of.get(t.rank[row], 0) if row >= 0 else 0
        ns = self.by_pipeline.get(k) or self.by_pipeline[min(self.by_pipeline)]
        if row < 0:
            return next((n for n in ns if not self.iterations[n].warmup), ns[0])
        at = self._when(row)
        starts = [self.iterations[n].start_ns for n in ns]
        j = bisect_right(starts, at) - 1
        if j < 0:
            return ns[0]
        if j + 1 < len(ns) and at > self.iterations[ns[j]].end_ns:
            # between two iterations: the one its op belongs to (a recv waited for the next one's first forward)
            nxt = self.iterations[ns[j + 1]]
            return ns[j + 1] if nxt.start_ns - at < at - self.iterations[ns[j]].end_ns else ns[j]
        return ns[j]

    def _when(self, row: int) -> int:
        """Where an event sits in the schedule: a recv where its data arrived (the computation it feeds starts
        then; pipelining posts the recv well before), any other op where it started."""
        t = self.store.table
        if t.op[row] == "recv":
            done = self._done(row)
            if done != NONE:
                return done
        return t.start_ns[row]

    def _done(self, row: int) -> int:
        t = self.store.table
        return t.wait_end_ns[row] if t.async_op[row] and t.wait_end_ns[row] != NONE else t.end_ns[row]

    def cell_at(self, n: int, row: int) -> Cell | None:
        """The computation of iteration n the event at `row` belongs to: a send's (the computation it sends the
        result of), a recv's (the one it feeds), else the one running when it started."""
        if n < 0 or row < 0:
            return None
        t = self.store.table
        r = t.rank[row]
        mine = [c for c in self.cells.get(n, ()) if c.rank == r]
        if not mine:
            return None
        op = t.op[row]
        if op == "send":
            before = [c for c in mine if c.end_ns <= t.start_ns[row] + 1000]
            return max(before, key=lambda c: c.end_ns) if before else None
        if op == "recv":
            done = self._done(row)
            if done == NONE:
                return None
            after = [c for c in mine if c.start_ns >= done - 1000]
            return min(after, key=lambda c: c.start_ns) if after else None
        at = t.start_ns[row]
        return next((c for c in mine if c.start_ns <= at < c.end_ns), None)

    def first_row(self, n: int) -> int:
        """The first stage's first event at or after iteration n's first forward's start: the send of its result."""
        it = self.iterations[n]
        t = self.store.table
        head = self.paths[it.pipeline][0]
        k = bisect_left(t.start_ns, it.start_ns)
        while k < len(t) and t.rank[k] != head:
            k += 1
        return min(k, len(t) - 1)

    def neighbour(self, n: int, direction: int) -> int | None:
        """The previous or next iteration of n's pipeline (None at the ends)."""
        ns = self.by_pipeline[self.iterations[n].pipeline]
        j = ns.index(n) + direction
        return ns[j] if 0 <= j < len(ns) else None

    def position(self, n: int) -> tuple[int, int]:
        """(1-based number of iteration n among its pipeline's, how many it has)."""
        ns = self.by_pipeline[self.iterations[n].pipeline]
        return ns.index(n) + 1, len(ns)

    # -- laying an iteration out ----------------------------------------------------------------------------
    def ideal_span(self, n: int) -> int:
        cells = self.ideals[self.iterations[n].ideal] if self.iterations[n].ideal >= 0 else []
        return max((c.end_ns for c in cells), default=0)

    def span(self, n: int) -> int:
        """The time the grid shows at zoom 0: the longer of the measured iteration and its textbook grid."""
        it = self.iterations[n]
        return max(it.end_ns - it.start_ns, self.ideal_span(n), 1)

    def layout(self, n: int, width: int, zoom: int, offset_ns: int) -> tuple[list[Row], list[Row], float]:
        """Iteration n's measured rows and textbook rows, `width` columns each, showing span / 2**zoom from
        offset_ns after its first forward; and the ns a column."""
        it = self.iterations[n]
        ns = self.span(n) / (2 ** zoom) / max(1, width)
        path = self.paths[it.pipeline]
        cells = self.cells.get(n, [])
        cuts = self._cuts(n)
        rows = []
        for pos, r in enumerate(path):
            mine = [c for c in cells if c.rank == r]
            stages = sorted({c.stage for c in mine}) or [pos]
            label = f"r{r} s{','.join(map(str, stages))}"
            rows.append(Row(label, _columns(mine, it.start_ns + offset_ns, ns, width, it.start_ns, it.end_ns, cuts),
                            tuple(mine)))
        ideal_rows = []
        ideal = self.ideals[it.ideal] if it.ideal >= 0 else []
        end = max((c.end_ns for c in ideal), default=0)
        for pos in range(len(path)):
            mine = [c for c in ideal if c.rank == -1 - pos]
            stages = sorted({c.stage for c in mine}) or [pos]
            ideal_rows.append(Row(f"s{','.join(map(str, stages))}", _columns(mine, offset_ns, ns, width, 0, end, []),
                                  tuple(mine)))
        return rows, ideal_rows, ns

    def _cuts(self, n: int) -> list[tuple[int, int]]:
        """The start-up waits the analysis cut from iteration n's span."""
        it = self.iterations[n]
        return self.startup.get((it.pipeline, it.index), [])

    def idle_of(self, n: int) -> list[tuple[int, tuple]]:
        """(rank, (warm-up, cool-down, blocked with the stage before, with the stage after, other, in flight)) for
        each rank of iteration n's pipeline."""
        it = self.iterations[n]
        return [(r, self.idle[(it.index, r)]) for r in self.paths[it.pipeline] if (it.index, r) in self.idle]

    def busy_of(self, n: int) -> dict[int, int]:
        """rank -> its time computing in iteration n (the sum of its cells)."""
        busy: dict[int, int] = {}
        for c in self.cells.get(n, []):
            busy[c.rank] = busy.get(c.rank, 0) + c.end_ns - c.start_ns
        return busy

    def ideal_idle(self, n: int) -> list[tuple[int, int, int, int]]:
        """Per stage row of iteration n's textbook grid: (its warm-up, its cool-down, its idle time between its
        computations: the schedule's own waits for a neighbour, its micro-batches in flight at most)."""
        it = self.iterations[n]
        ideal = self.ideals[it.ideal] if it.ideal >= 0 else []
        end = max((c.end_ns for c in ideal), default=0)
        out = []
        for pos in range(len(self.paths[it.pipeline])):
            mine = sorted((c for c in ideal if c.rank == -1 - pos), key=lambda c: c.start_ns)
            if not mine:
                out.append((0, 0, 0, 0))
                continue
            flight = peak = 0
            for c in mine:
                flight += 1 if c.kind == "F" else -1
                peak = max(peak, flight)
            between = mine[-1].end_ns - mine[0].start_ns - sum(c.end_ns - c.start_ns for c in mine)
            out.append((mine[0].start_ns, end - mine[-1].end_ns, max(0, between), peak))
        return out

    def durations(self, n: int) -> dict[str, int]:
        """The textbook grid's forward and backward durations (every cell of a kind at the trace's median)."""
        it = self.iterations[n]
        out: dict[str, int] = {}
        for c in self.ideals[it.ideal] if it.ideal >= 0 else []:
            out.setdefault(c.kind, c.end_ns - c.start_ns)
        return out


def _columns(cells: list[Cell], t0: float, ns: float, width: int, a: int, b: int, cuts) -> tuple[int, ...]:
    """Per column from t0 (ns a column): the index of the cell drawn there, CUT in a start-up wait, IDLE elsewhere
    within [a, b], else BLANK. A cell
    gets the columns whose middle it covers, and at least one (its first) where no other cell has it."""
    cols = [BLANK] * width
    lo = max(0, int((a - t0) / ns))
    hi = min(width, int((b - t0) / ns + 0.5))
    for x in range(lo, hi):
        cols[x] = IDLE
    for ca, cb in cuts:
        for x in range(max(lo, int((ca - t0) / ns + 0.5)), min(hi, int((cb - t0) / ns + 0.5))):
            cols[x] = CUT
    for k, c in enumerate(cells):
        x0 = int((c.start_ns - t0) / ns + 0.5)
        x1 = int((c.end_ns - t0) / ns + 0.5)
        if x1 <= x0:
            x0 = int((c.start_ns - t0) / ns)
            x1 = x0 + 1
            if not 0 <= x0 < width or cols[x0] >= 0:
                continue
        for x in range(max(0, x0), min(width, x1)):
            cols[x] = k
    return tuple(cols)
