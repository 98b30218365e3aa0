"""The ring view: the collective at the playhead as N ranks in a ring, step k of its ring schedule, with the real
byte counts of this collective (the model of the op, which the view says: the trace does not record an op's
chunks); for a ring written by hand with send/recv, the recorded messages themselves."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from disttrace.tracer.units import fmt_bytes_short, fmt_ordinal

from ..model.ring import RING_OPS, RingPlan, RingStep, p2p_exchange, ring_plan
from ..model.store import TraceStore
from .palette import OP_COLORS

MAX_DRAWN = 16  # more ranks than this: the chunk table shows the first ones

MODEL_NOTE = ("A model, not a measurement: the chunks a ring algorithm would move for an op of this size. The trace "
              "records the op's start, end and bytes, not its chunks; the backend may use another algorithm (a tree, "
              "direct copies).")
"""Said above a recorded collective's ring schedule (a hand-written ring's messages are the recorded ones)."""


class RingView(Widget, can_focus=False):
    DEFAULT_CSS = """
    RingView { height: 1fr; padding: 0 1; overflow-y: auto; }
    """

    playhead: reactive[int] = reactive(-1)
    """Event row of the replay playhead."""
    ring_step: reactive[int] = reactive(-1)
    """Step to show; -1 is the state before the first step."""

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self._p2p_cache: dict = {}
        self._plan_key: tuple | None = None
        self._plan: RingPlan | None = None

    @property
    def n_steps(self) -> int:
        plan = self.plan()
        if isinstance(plan, RingPlan):
            return plan.n_steps
        return len(plan[1]) if plan else 0

    def plan(self):
        """A RingPlan for a ring collective at the playhead, (ranks, steps, step of the playhead) for a P2P ring,
        or None."""
        row = self.playhead
        if row < 0:
            return None
        inst = self.store.instance(row)
        if inst is not None and inst.op in RING_OPS:
            key = (inst.op, inst.bytes, len(inst.group_ranks))
            if self._plan_key != key:
                self._plan_key, self._plan = key, ring_plan(*key)
            return self._plan
        m = self.store.p2p_match(row)
        if m is not None:
            t = self.store.table
            ranks = list(t.groups[t.gid[row]].ranks) or sorted(self.store.rank_index)
            key = tuple(ranks)
            if key not in self._p2p_cache:  # (once per group: every message is read, ~10^5 at 1M events)
                self._p2p_cache[key] = p2p_exchange(self.store.analysis.p2p, ranks)
            steps, step_of = self._p2p_cache[key]
            return ranks, steps, step_of.get(m.order, 0)
        return None

    def render(self):
        row = self.playhead
        plan = self.plan()
        if plan is None:
            what = self.store.table.op[row] if row >= 0 else "nothing"
            return Text.assemble(
                ("Ring view\n\n", "bold"),
                f"The playhead is on {what}. Move it (N/P) to an all_reduce, all_gather or reduce_scatter to see "
                "its ring schedule, or to a send/recv to see the messages of a hand-written ring.")
        if isinstance(plan, RingPlan):
            return self._collective(plan)
        ranks, steps, k = plan
        return self._p2p(ranks, steps, k if self.ring_step < 0 else self.ring_step)

    def _collective(self, plan: RingPlan):
        inst = self.store.instance(self.playhead)
        ranks = list(inst.group_ranks)
        n, k_bytes = plan.n, plan.total_bytes
        g = self.store.table.groups[inst.gid].name
        steps_word = "2(N−1)" if plan.op == "all_reduce" else "N−1"
        per = "K/N" if plan.op != "all_gather" else "K"
        total = {"all_reduce": "2(N−1)K/N", "reduce_scatter": "(N−1)K/N", "all_gather": "(N−1)K"}[plan.op]
        head = Text.assemble(
            (plan.op, f"bold {OP_COLORS[plan.op]}"),
            f" of group {g}, group_seq {inst.group_seq}:  K = {fmt_bytes_short(k_bytes)} per rank, N = {n} ranks\n",
            (MODEL_NOTE + "\n", "italic #ffd75f"),
            f"{steps_word} = {plan.n_steps} steps; each transfer is {per} = {fmt_bytes_short(plan.chunk_bytes)}; "
            f"each rank sends {total} = {fmt_bytes_short(plan.per_rank_bytes)} in all.\n")
        k = self.ring_step
        state = plan.state(k)
        if k < 0:
            step = None
            head.append("Before the first step: every rank holds only its own data.   ] next step, [ back\n",
                        style="italic")
        else:
            step = plan.step(k)
            head.append(f"Step {k + 1} of {plan.n_steps} ({step.phase}): each rank sends one chunk to the next "
                        f"rank in the ring" + (", which adds it to its own copy" if step.transfers[0].reduce
                                                  else ", which keeps it (it is already complete)") + ".\n",
                        style="bold")
        return Group(head, self._ring_line(ranks, step), Text(""), self._chunks(ranks, state, step, n))

    def _ring_line(self, ranks: list[int], step: RingStep | None) -> Text:
        line = Text()
        shown = ranks[:MAX_DRAWN]
        for p, r in enumerate(shown):
            line.append(f" r{r} ", style="bold reverse")
            if step is not None:
                tr = step.transfers[p] if p < len(step.transfers) else None
                if tr is None:
                    lab = ""
                else:
                    lab = f" c{tr.chunk} " if tr.chunk is not None else f" {fmt_bytes_short(tr.bytes)} "
                line.append(f"─{lab}─▶", style="#ffd75f")
            else:
                line.append(" ──▶ ", style="#606060")
        if len(ranks) > MAX_DRAWN:
            line.append(f" … {len(ranks) - MAX_DRAWN} more ", style="dim")
        line.append(f" r{ranks[0]} ", style="bold reverse")
        line.append("  (back to the first: a ring)", style="dim")
        return line

    def _chunks(self, ranks, state, step: RingStep | None, n: int) -> Table:
        table = Table(box=None, padding=(0, 1), caption="n/N: how many ranks' data each copy of a chunk holds; "
                      "▶ sent this step, ◀ received", caption_justify="left", caption_style="dim")
        table.add_column("rank", style="bold")
        cols = min(n, MAX_DRAWN)
        for c in range(cols):
            table.add_column(f"chunk {c}", justify="center")
        sending = {t.src: t.chunk for t in step.transfers} if step else {}
        receiving = {t.dst: t.chunk for t in step.transfers} if step else {}
        for p, r in enumerate(ranks[:MAX_DRAWN]):
            cells = []
            for c in range(cols):
                have = state[p][c].bit_count()
                if not have:
                    txt, style = "·", "#505050"
                elif have >= n:
                    txt, style = f"{have}/{n} ✓", "bold #4fcf7a"
                else:
                    txt, style = f"{have}/{n}", "#e8d040" if have > 1 else "#a0a0a0"
                if sending.get(p) == c:
                    txt, style = f"▶{txt}", style + " underline"
                if receiving.get(p) == c:
                    txt, style = f"◀{txt}", style + " reverse"
                cells.append(Text(txt, style=style))
            table.add_row(f"r{r}", *cells)
        return table

    def _p2p(self, ranks, steps: list[RingStep], k: int):
        if not steps:
            return Text("No matched send/recv messages in this trace.")
        k = max(0, min(k, len(steps) - 1))
        step = steps[k]
        head = Text.assemble(("Hand-written send/recv exchange", "bold #ff6b6b"),
                             f": step {k + 1} of {len(steps)} (the {fmt_ordinal(k + 1)} message on every link), "
                             f"{len(step.transfers)} recorded messages, {fmt_bytes_short(step.total_bytes)} in all.   "
                             "] / [ other steps\n")
        lines = Text()
        table = self.store.table
        for t in step.transfers:
            lines.append(f" r{ranks[t.src]} ", style="bold reverse")
            # what was sent, when the trace recorded the values (--summaries full): the chunk itself
            sent = table.in_[t.send_row] if t.send_row is not None else None
            values = sent.get("values") if isinstance(sent, dict) else None
            what = f"{_short(values)} ({fmt_bytes_short(t.bytes)})" if values is not None else fmt_bytes_short(t.bytes)
            lines.append(f" ─ {what} ─▶ ", style="#ffd75f")
            lines.append(f" r{ranks[t.dst]} ", style="bold reverse")
            ring = (t.dst - t.src) % len(ranks) == 1
            lines.append("  (next in the ring)\n" if ring else "\n", style="dim")
        return Group(head, lines)


def _short(values, limit: int = 40) -> str:
    """Recorded values as a compact list, cut to `limit` characters."""
    text = "[" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in _flat(values)) + "]"
    return text if len(text) <= limit else text[: limit - 2] + "…]"


def _flat(values):
    for v in values if isinstance(values, list) else [values]:
        if isinstance(v, list):
            yield from _flat(v)
        else:
            yield v

