"""The Pipeline tab: the pipeline's schedule grid (pipeline/schedule.py) of the playhead's iteration, its bubble measured
beside the textbook's, each stage's idle time by cause, then the pipeline over all its iterations. The schedule,
the bubbles and the idle times are the analysis' (tracer/analysis/pipeline/stages.py, pipeline/schedule.py), by iteration in
tui/model/schedule.py; this lays them out."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from disttrace.tracer.analysis import micro_batches
from disttrace.tracer.units import fmt_ns_short

from ..model.schedule import ScheduleModel
from ..model.store import TraceStore
from .detail import NarrationPane
from .schedule import ScheduleGrid

class PipelineView(VerticalScroll, can_focus=False):
    """The pipeline's schedule grid (pipeline/schedule.py) of the playhead's iteration, its bubble measured beside the
    textbook's, each stage's idle time by cause, then the pipeline over all its iterations."""

    DEFAULT_CSS = """
    PipelineView { height: 1fr; }
    PipelineView > Static { height: auto; padding: 0 1; }
    PipelineView > ScheduleGrid { margin: 0 1; }
    PipelineView > NarrationPane { max-height: 40%; }
    """

    playhead: reactive[int] = reactive(-1)
    """Event row of the replay playhead: the grid shows its iteration and highlights its micro-batch."""

    def __init__(self, store: TraceStore, narration=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.narration = narration
        self.model = ScheduleModel(store)
        self._shown = -2  # the iteration the texts are of

    def compose(self) -> ComposeResult:
        p = self.store.analysis.pipeline
        if p is None:
            yield Static("No pipeline found: this trace has no chain of stages passing activations by send/recv.\n"
                         "(Pipeline-parallel jobs show here: the schedule, stage by stage, micro-batch by "
                         "micro-batch, and its bubble.)")
            return
        if self.narration is not None:
            yield NarrationPane(self.store, self.narration).data_bind(PipelineView.playhead)
        if self.model:
            yield Static(id="pipe-iteration")
            yield ScheduleGrid(self.model).data_bind(PipelineView.playhead)
            yield Static(LEGEND, id="pipe-legend")
            yield Static(id="pipe-idle")
        else:
            why = p.schedule_note or "its messages are not P stages' forwards and backwards of the same micro-batches"
            yield Static(f"The schedule was not read from this trace: {why}.", id="pipe-iteration")
        yield Static(self._overall(), id="pipe-overall")

    def on_mount(self) -> None:
        self._iteration_texts()

    def watch_playhead(self) -> None:
        if self.is_mounted:
            self._iteration_texts()

    def _iteration_texts(self) -> None:
        """The playhead's iteration's bubble and idle times (once per iteration)."""
        n = self.model.at(self.playhead)
        if n == self._shown or n < 0:
            return
        self._shown = n
        self.query_one("#pipe-iteration", Static).update(iteration_line(self.model, n))
        self.query_one("#pipe-idle", Static).update(idle_table(self.model, n))

    def _overall(self):
        p = self.store.analysis.pipeline
        slow = ""
        if p.slow_stage is not None:
            slow = (f"  Stage {p.slow_stage} computes {p.slow_factor:.1f}x what the others do: it sets the pace "
                    f"(the others' waits for it are bubble, not straggling).")
        v = f" × {p.virtual_stages} virtual stages" if p.virtual_stages > 1 else ""
        head = Text.assemble(
            ("Over all iterations: ", "bold"), f"{len(p.stages)} stages{v}, {micro_batches(p)}; blocked in "
            "messages ", (f"{p.bubble_fraction:.1%}", "bold"), " of the stages' time",
            *((", the schedule's bubble ", (f"{p.schedule_fraction:.1%}", "bold"),
               f" (the {'steady ' if any(it[11] for it in p.schedule_iterations) else ''}iterations' mean)")
              if p.schedule_iterations else ()),
            f", expected {p.expected_fraction:.1%}.", (slow, "bold #ff8c5a"))
        table = Table(box=None, padding=(0, 2))
        for col in ("stage", "rank", "window", "blocked", "blocked %", ""):
            table.add_column(col, justify="right" if col not in ("", "stage") else "left")
        for s in p.per_stage:
            bar = "█" * int(round(s.bubble_fraction * 30))
            table.add_row(str(s.stage), f"r{s.rank}", fmt_ns_short(s.window_ns), fmt_ns_short(s.blocked_ns),
                          f"{s.bubble_fraction:.1%}", Text(bar, style="#ff8c5a"))
        return Group(head, table)


LEGEND = ("F3 micro-batch 3's forward (blue), B3 its backward (green); F3' on a rank's second virtual stage; a "
          "narrow cell shows 3' or 3; ░ idle: the bubble; "
          "~ a stage not started yet (not counted); yellow: the playhead's micro-batch. An F and a B with no message "
          "between them split their gap at their usual lengths.")


def iteration_line(model: ScheduleModel, n: int) -> Text:
    """Iteration n's schedule and bubble, measured and the textbook's, and the keys that move the grid."""
    it = model.iterations[n]
    k, total = model.position(n)
    p, v, m = len(model.paths[it.pipeline]), model.v, it.micro_batches
    formula = f"(P−1)/(M+P−1) = ({p}−1)/({m}+{p}−1)" if v == 1 else f"(P−1)/(vM+P−1) = ({p}−1)/({v}·{m}+{p}−1)"
    pipe = f" of pipeline {it.pipeline} (ranks {' → '.join(map(str, model.paths[it.pipeline]))})" \
        if len(model.by_pipeline) > 1 else ""
    startup = f", {fmt_ns_short(it.startup_ns)} of start-up waits apart" if it.startup_ns else ""
    last = "forward" if it.kind == "forward only" else "backward"
    warm = ("warm-up, not in the mean bubble", "bold #ff8c5a") if it.warmup else ""
    return Text.assemble(
        (f"Iteration {k} of {total}", "bold"), f" (step {it.index}", ", " if warm else "", warm,
        f"){pipe}: {it.kind}, P = {p}",
        f", v = {v}" if v > 1 else "", f", M = {m}. Bubble ", (f"{it.bubble:.1%}", "bold"),
        f" measured (first forward to last {last}{startup}), textbook {formula} = ",
        (f"{it.expected:.1%}", "bold"), ".", ("  [ ] iteration  + − zoom  ← → pan", "#808080"))


def idle_table(model: ScheduleModel, n: int) -> Group:
    """Each rank's idle time in iteration n by where it comes from, beside its textbook grid's: the waits between
    computations that the schedule itself has (GPipe's first stage between its last forward and its first backward)
    apart from those the messages and slower neighbours added."""
    busy = model.busy_of(n)
    ideal = model.ideal_idle(n)
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False)  # (one space between columns: 80 wide fit)
    for col in ("stage", "busy", "warm-up/cool", "waits ←/→", "host", "held", "textbook", "its waits"):
        table.add_column(col, justify="left" if col == "stage" else "right", no_wrap=True)
    for pos, (r, (warm, cool, before, after, other, flight)) in enumerate(model.idle_of(n)):
        iw, ic, ib, _ = ideal[pos] if pos < len(ideal) else (0, 0, 0, 0)
        table.add_row(f"s{pos} r{r}", fmt_ns_short(busy.get(r, 0)), f"{fmt_ns_short(warm)}/{fmt_ns_short(cool)}",
                      f"{fmt_ns_short(before)}/{fmt_ns_short(after)}", fmt_ns_short(other), str(flight),
                      f"{fmt_ns_short(iw)}/{fmt_ns_short(ic)}", fmt_ns_short(ib))
    return Group(Text("Idle time by cause: warm-up/cool (before the first computation/after the last), waits ←/→ "
                      "(blocked with the stage before/after), host (between ops); held: micro-batches in flight at "
                      "once; the textbook grid's warm-up/cool and its waits (the schedule's own: measured waits "
                      "beyond them are the messages' or a slower neighbour's):", style="italic"), table)
