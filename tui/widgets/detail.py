"""The detail pane: everything the trace and the analysis know about the selected event."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Size
from textual.reactive import reactive
from textual.containers import VerticalScroll
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from disttrace.tracer.units import fmt_bytes_short, fmt_gbps, fmt_list, fmt_ns_short
from disttrace.tracer.data.table import NONE

from ..model.baseline import baseline_of, signed_short
from ..model.store import TraceStore
from .palette import OP_COLORS


def _summary(s) -> str:
    if not isinstance(s, dict):
        return "—"
    parts = []
    if "values" in s and s["values"] is not None:
        vals = s["values"]
        shown = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in vals[:8])
        parts.append(f"[{shown}{', …' if len(vals) > 8 else ''}]")
    for k in ("min", "max", "mean", "norm"):
        v = s.get(k)
        if v is not None:
            parts.append(f"{k} {v:.4g}" if isinstance(v, (int, float)) else f"{k} {v}")
    for k in ("nan", "inf"):
        if s.get(k):
            parts.append(f"{k}×{s[k]}")
    if s.get("checksum") is not None:  # a sum of the raw bytes (docs/FORMAT.md), not of the values: say so
        c = s["checksum"]
        parts.append(f"checksum {c:.6g}" if isinstance(c, float) else f"checksum {c}")
    return "  ".join(parts) or "—"


def detail_table(store: TraceStore, row: int) -> Table:
    """The fields of event `row` as a two-column rich Table (also used by tests)."""
    t = store.table
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold #a0a0a0", no_wrap=True)
    grid.add_column(overflow="fold")
    if row < 0:
        grid.add_row("", "before the first event: press n to step")
        return grid
    op = t.op[row]
    g = t.groups[t.gid[row]]
    add = grid.add_row
    add("event", f"#{row} on rank {t.rank[row]}" + (f" ({t.host[row]})" if t.host[row] else "")
        + (f", id {t.id[row]}" if t.id[row] != NONE else ""))
    add("op", Text(op, style=f"bold {OP_COLORS[op]}") + Text(f"  api {t.api[row]}" if t.api[row] != op else ""))
    _op_in_baseline(add, store, row)  # (high up: at 80x24 the pane shows a dozen lines, and it does not scroll by key)
    ranks = fmt_list(g.ranks, 16, ",", "{n} ranks", first=0)
    add("group", f"{g.name} [{ranks}]")
    # the two sequence numbers under the event format's names for them, which the event list's column and the
    # waits view use too
    if t.group_seq[row] != NONE:
        add("group_seq", f"{t.group_seq[row]}  (in its group, on every rank)")
    if t.seq[row] != NONE:
        add("seq", f"{t.seq[row]}  (the backend's, FR's op_id)")
    if t.peer[row] != NONE:
        add("peer", f"rank {t.peer[row]}" + (f"  tag {t.tag[row]}" if t.tag[row] not in (NONE, 0) else ""))
    if t.root[row] != NONE:
        add("root", f"rank {t.root[row]}")
    shape = t.shape[row]
    add("bytes", f"{fmt_bytes_short(t.bytes[row])} ({t.bytes[row]:,})" + (f"  {t.dtype[row]}" if t.dtype[row] else "")
        + (f" {list(shape)}" if shape else "") + ("  async" if t.async_op[row] else ""))
    dur = t.duration_ns(row)
    add("time", f"start {fmt_ns_short(t.start_ns[row] - store.t0)}  "
        + (f"took {fmt_ns_short(dur)}" if dur is not None else "never finished"))
    if t.wait_end_ns[row] != NONE:
        add("wait()", f"called at {fmt_ns_short(t.wait_start_ns[row] - store.t0)}, returned at "
            f"{fmt_ns_short(t.wait_end_ns[row] - store.t0)}")
    if t.status[row] != "ok":
        add("status", Text(t.status[row] + (f": {t.error[row]}" if t.error[row] else ""), style="bold red"))
    if t.in_[row] is not None:
        add("in", _summary(t.in_[row]))
    if t.out[row] is not None:
        add("out", _summary(t.out[row]))
    if t.site[row]:
        add("site", t.site[row])
    a = store.analysis
    k = a.step_of[row] if row < len(a.step_of) else -1
    if k >= 0:
        step = a.steps[k]
        add("step", f"{k}" + (" (warm-up)" if step.warmup else "")
            + f"  took {fmt_ns_short(step.end_ns - step.start_ns)}"
            + (f", late: rank {step.late_rank}" if step.late_rank is not None else ""))
        _step_in_baseline(add, store, row, k)
    inst = store.instance(row)
    if inst is not None:
        w = inst.wait_ns.get(t.rank[row], 0)
        add("wait", Text(f"{fmt_ns_short(w)} ({inst.wait_kind})", style="bold #ff8c5a" if w else ""))
        if inst.missing:  # the rank the others waited for never came: none of those that did was "last"
            add("skew", Text(f"{fmt_ns_short(inst.skew_ns)} among those that came; never arrived: "
                             f"rank{'s' if len(inst.missing) > 1 else ''} {_ranks(list(inst.missing))}",
                             style="bold red"))
        else:
            add("skew", f"{fmt_ns_short(inst.skew_ns)}; last to arrive: "
                + (f"rank {inst.last_arrival}" if inst.last_arrival is not None else "—"))
        if inst.duration_ns is not None:
            add("transfer", fmt_ns_short(inst.duration_ns) + (f"  (α-β model {fmt_ns_short(inst.model_ns)})"
                                                           if inst.model_ns else "") + ("  SLOW" if inst.slow else ""))
        if inst.algbw_gbps is not None:
            add("bandwidth", f"algbw {fmt_gbps(inst.algbw_gbps)}  busbw {fmt_gbps(inst.busbw_gbps or 0)}")
        others = sorted(r for r in inst.events if r != t.rank[row])
        if others:
            add("others", f"on ranks {_ranks(others)}  (o / O: next / previous rank)")
        if not inst.complete:
            add("", Text("incomplete: not every rank of the group finished it", style="bold red"))
    m = store.p2p_match(row)
    if m is not None:
        add("message", f"#{m.order} of {m.src}→{m.dst}, {fmt_bytes_short(m.bytes)}")
        other = m.recv if row == m.send else m.send
        if other is None:
            add("match", Text("no matching " + ("recv" if row == m.send else "send"), style="bold red"))
        else:
            add("match", f"{t.op[other]} on rank {t.rank[other]} (m to jump)")
        if m.late_sender_ns:
            add("wait", Text(f"late sender: the receiver waited {fmt_ns_short(m.late_sender_ns)}", style="#ff8c5a"))
        if m.late_receiver_ns:
            add("wait", Text(f"late receiver: the sender waited {fmt_ns_short(m.late_receiver_ns)}", style="#ff8c5a"))
        if m.transfer_ns:
            add("transfer", f"{fmt_ns_short(m.transfer_ns)}  {fmt_gbps(m.bytes / m.transfer_ns)}")
    return grid


def _baseline(store: TraceStore, row: int):
    """The comparison with the baseline (`view B --baseline A`) that holds event `row`, else None."""
    d = baseline_of(store)
    return None if d is None or d.ops is None or row >= len(d.ops.a_row) else d


def _step_in_baseline(add, store: TraceStore, row: int, k: int) -> None:
    """With a baseline: A's step k beside B's, and whether B's moved beyond the noise (tracer/analysis/diff/compare.py's;
    the diff view lists them)."""
    d = _baseline(store, row)
    lengths = {i: (x, y) for i, x, y in d.steps} if d is not None else {}
    if k not in lengths or lengths[k][1] is None:
        return
    x, y = lengths[k]
    moved = d.ops.step_moved.get(k, False)
    add("A's step", Text.assemble(f"{k} took {fmt_ns_short(x)}" if x is not None else f"{k}: not in A",
                                  f" (A's median {fmt_ns_short(d.a.median_ns)})  ",
                                  ((f"B {signed_short(y - d.a.median_ns)}: moved beyond ±{fmt_ns_short(d.noise_ns)}"
                                    if moved else "within the noise"), "bold #ff8c5a" if moved else "")))


def _op_in_baseline(add, store: TraceStore, row: int) -> None:
    """With a baseline: the op of A aligned with event `row` beside it (A's time, its median over A's steps,
    whether B's moved beyond the noise), and what differs of it."""
    d = _baseline(store, row)
    if d is None:
        return
    t, a = store.table, d.a_side
    j = int(d.ops.a_row[row])
    if j < 0:
        k = store.analysis.step_of[row] if row < len(store.analysis.step_of) else -1
        if k in set(d.matched):
            add("in A", Text("no such op in A's step: added in B", style="bold #ff8c5a"))
        return
    ta = a.table
    dur_a, dur_b = ta.duration_ns(j), t.duration_ns(row)
    med, noise = int(d.ops.a_median[row]), int(d.ops.noise[row])
    moved = bool(d.ops.moved[row])
    took = f"took {fmt_ns_short(dur_a)}" if dur_a is not None else "never finished"
    add("in A", Text.assemble(f"#{j}, {took}" + (f" (median {fmt_ns_short(med)} over A's steps)" if med >= 0 else ""),
                              "  ", ((f"B {signed_short((dur_b or 0) - med)}: moved beyond ±{fmt_ns_short(noise)}"
                                      if moved else "B within the noise") if med >= 0 and dur_b is not None else "",
                                     "bold #ff8c5a" if moved else "")))
    if ta.bytes[j] != t.bytes[row] or (ta.dtype[j] or "") != (t.dtype[row] or ""):
        add("A's bytes", f"{fmt_bytes_short(ta.bytes[j])} ({ta.bytes[j]:,})  {ta.dtype[j] or ''}")
    if (ta.site[j] or "") != (t.site[row] or ""):
        add("A's site", ta.site[j] or "—")
    ga = ta.groups[ta.gid[j]].ranks
    if tuple(ga) != tuple(t.groups[t.gid[row]].ranks):
        add("A's group", fmt_list(ga, None, ","))


def _ranks(rs: list[int]) -> str:
    return fmt_list(rs, 12, ",", "…{last} ({n})", first=1)


class DetailPane(ScrollView, can_focus=False):
    """Shows the selected event. Line API: the fields are rendered once per selection into strips, so a new
    selection scrolls and repaints this pane alone instead of laying out the screen again. The strips are
    made after the frame that the key which changed the selection causes (rendering the Rich table takes
    a while: the timeline shows the key's effect first), and kept for the last few selections (j/k back and
    forth)."""

    # the scrollbar's column is kept whether it shows or not: the fields are rendered at the width they are shown in
    # (a scrollbar that came with a long event covered the last column of every line: `ddp.DistributedDataPar`)
    DEFAULT_CSS = """
    DetailPane { padding: 0 1; scrollbar-size-vertical: 1; scrollbar-gutter: stable; }
    """

    selection: reactive[int] = reactive(-1)
    """Event row to show."""

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self._lines: list[Strip] = []
        self._width = 0
        self._shown = (-2, 0)  # (selection, width) that _lines show
        self._cache: LRUCache[tuple[int, int], list[Strip]] = LRUCache(16)
        self._pending = False

    def watch_selection(self) -> None:
        if not self._pending:  # several changes before the next frame: one rendering, of the last
            self._pending = True
            self.call_after_refresh(self._show_selection)

    def _show_selection(self) -> None:
        self._pending = False
        self.show()

    def on_resize(self) -> None:
        if self.scrollable_content_region.width != self._width:
            self.show()

    def rerender(self) -> None:
        """Render the selected event's fields again (the store changed: the analysis arrived)."""
        self._cache.clear()
        self._shown = (-2, 0)
        self.show()

    def show(self) -> None:
        """Show the selected event's fields at the current width."""
        width = max(10, self.scrollable_content_region.width)
        key = (self.selection, width)
        if key == self._shown:
            return
        lines = self._cache.get(key)
        if lines is None:
            console = self.app.console
            lines = self._cache[key] = [Strip(line) for line in console.render_lines(
                detail_table(self.store, self.selection), console.options.update_width(width), pad=False)]
        self._width, self._shown, self._lines = width, key, lines
        self.virtual_size = Size(width, len(self._lines))
        self.scroll_to(y=0, animate=False)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        idx = y + int(self.scroll_y)
        width = self.scrollable_content_region.width
        if idx >= len(self._lines):
            return Strip.blank(width)
        return self._lines[idx].crop_extend(0, width, None)


class NarrationPane(VerticalScroll, can_focus=False):
    """A demo's narration: the text of the step that fits the event at the playhead. A long text scrolls (PgUp /
    PgDn, the mouse wheel); the border says when there is more below or above. Each event's text starts at its
    top."""

    DEFAULT_CSS = """
    NarrationPane { height: auto; max-height: 45%; padding: 0 0 0 1; border: round $accent;
                    scrollbar-size-vertical: 1; scrollbar-size-horizontal: 0; scrollbar-gutter: stable; }
    NarrationPane > Static { height: auto; }
    """

    playhead: reactive[int] = reactive(-2)
    """Event row of the replay playhead."""

    def __init__(self, store: TraceStore, narration, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.narration = narration
        self.border_title = narration.title or "narration"
        self.text = Static(" ", markup=False)

    def compose(self):
        yield self.text

    def watch_playhead(self, row: int) -> None:
        self.text.update(self.narration.text_for(self.store.table, row) or " ")
        self.scroll_home(animate=False)
        self.call_after_refresh(self._say_more)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self._say_more()

    def on_resize(self) -> None:
        self.call_after_refresh(self._say_more)

    def _say_more(self) -> None:
        """The border's subtitle: which way the text goes on, and the keys that scroll it."""
        below = self.scroll_y < self.max_scroll_y
        above = self.scroll_y > 0
        self.border_subtitle = ("▼ more: PgDn" if below and not above else "▲▼ PgUp / PgDn" if below
                                else "▲ PgUp" if above else "")

    def page(self, direction: int) -> None:
        """Scroll a page down (1) or up (-1)."""
        if direction > 0:
            self.scroll_page_down(animate=False)
        else:
            self.scroll_page_up(animate=False)
