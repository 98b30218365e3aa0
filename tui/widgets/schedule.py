"""The pipeline's schedule grid: stages x time, one iteration at a time, each forward and backward a run of cells
labelled with its micro-batch (F3, B3), the idle time between them (the bubble) visible; under it the same schedule
drawn ideally on the same scale (the textbook grid). Drawn with the Line API: one Strip a line, made once per
iteration, width, zoom, window and highlighted micro-batch, and kept (tui/model/schedule.py lays the columns out).
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from disttrace.tracer.units import fmt_ns_short

from ..model.schedule import BLANK, CUT, IDLE, Cell, Row, ScheduleModel

LABEL = Style(color="#c0c0c0")
LABEL_HERE = Style(color="#ffffff", bold=True)
RULER = Style(color="#808080")
NOTE = Style(color="#a0a0a0", italic=True)
IDLE_CH, IDLE_STYLE = "░", Style(color="#7a4a32")
CUT_CH, CUT_STYLE = "~", Style(color="#5a5a5a")
# forwards blue, backwards green, alternate micro-batches a shade apart (so that neighbours read as two cells), a
# rank's later virtual stages (interleaved 1F1B) lighter
_BG = {("F", 0): ("#2f63c4", "#244f9e"), ("B", 0): ("#2f9c5a", "#237a46"),
       ("F", 1): ("#5b8de0", "#4a78c8"), ("B", 1): ("#5cc285", "#49a56f")}
HIGHLIGHT = {"F": Style(bgcolor="#c8a000", color="#000000"), "B": Style(bgcolor="#a07800", color="#000000")}
HERE = Style(bgcolor="#ffd75f", color="#000000", bold=True)


def _cell_style(c: Cell, p: int) -> Style:
    chunk = 1 if c.stage >= p else 0
    return Style(bgcolor=_BG[(c.kind, chunk)][c.mb % 2], color="#ffffff")


class ScheduleGrid(Widget, can_focus=True):
    """One iteration's schedule, measured (a row per rank, in stage order) and textbook (a row per stage), on one
    time scale. Bound to the playhead: the grid shows its iteration and highlights its micro-batch on every stage;
    the view steps the playhead to other iterations ([ and ])."""

    DEFAULT_CSS = """
    ScheduleGrid { height: auto; width: 1fr; }
    ScheduleGrid:focus { background: $boost; }
    """

    BINDINGS = [
        Binding("plus,equals_sign", "zoom(1)", "pipeline grid: zoom in (on the playhead's computation)",
                show=False),
        Binding("minus", "zoom(-1)", "pipeline grid: zoom out", show=False),
        Binding("left,h", "pan(-1)", "pipeline grid: pan left", show=False),
        Binding("right,l", "pan(1)", "pipeline grid: pan right", show=False),
        Binding("f", "fit", "pipeline grid: the whole iteration", show=False),
    ]

    playhead: reactive[int] = reactive(-1)
    """Event row of the replay playhead."""
    zoom: reactive[int] = reactive(0)
    """The grid's own zoom: it shows the iteration's span / 2**zoom."""
    offset_ns: reactive[int] = reactive(0)
    """The grid's window start, ns after the iteration's first forward."""

    MAX_ZOOM = 8

    def __init__(self, model: ScheduleModel, **kwargs) -> None:
        super().__init__(**kwargs)
        self.model = model
        self.iteration = model.at(-1)
        self.here: Cell | None = None
        self._key: tuple | None = None
        self._lines: list[Strip] = []

    # -- state ----------------------------------------------------------------------------------------------
    def watch_playhead(self, row: int) -> None:
        n = self.model.at(row)
        if n != self.iteration:
            self.iteration = n
            self.zoom, self.offset_ns = 0, 0
        self.here = self.model.cell_at(n, row)
        if self.zoom and self.here is not None:
            self._show_here()
        self.refresh(layout=True)

    def watch_zoom(self) -> None:
        self.refresh()

    def watch_offset_ns(self) -> None:
        self.refresh()

    def action_zoom(self, delta: int) -> None:
        if self.iteration < 0:
            return
        self.zoom = max(0, min(self.MAX_ZOOM, self.zoom + delta))
        if self.zoom == 0:
            self.offset_ns = 0
        else:
            self._show_here()

    def action_pan(self, direction: int) -> None:
        if self.iteration < 0 or not self.zoom:
            return
        window = self._window()
        self.offset_ns = self._clamp(self.offset_ns + direction * window // 4)

    def action_fit(self) -> None:
        self.zoom, self.offset_ns = 0, 0

    def _window(self) -> int:
        return int(self.model.span(self.iteration) / 2 ** self.zoom)

    def _clamp(self, offset: int) -> int:
        return max(0, min(self.model.span(self.iteration) - self._window(), offset))

    def _show_here(self) -> None:
        """The window on the playhead's computation (centred), or where it was."""
        c = self.here
        if c is None:
            self.offset_ns = self._clamp(self.offset_ns)
            return
        it = self.model.iterations[self.iteration]
        middle = (c.start_ns + c.end_ns) // 2 - it.start_ns
        self.offset_ns = self._clamp(middle - self._window() // 2)

    # -- drawing --------------------------------------------------------------------------------------------
    def get_content_height(self, container, viewport, width: int) -> int:
        if self.iteration < 0:
            return 1
        return 2 * len(self.model.paths[self.model.iterations[self.iteration].pipeline]) + 2

    def render_line(self, y: int) -> Strip:
        lines = self._drawn()
        return lines[y] if y < len(lines) else Strip.blank(self.size.width)

    def _drawn(self) -> list[Strip]:
        width = self.size.width
        here = self.here
        key = (self.iteration, width, self.zoom, self.offset_ns, here, self.playhead)
        if key != self._key:
            self._key, self._lines = key, self._draw(width)
        return self._lines

    def _draw(self, width: int) -> list[Strip]:
        m = self.model
        n = self.iteration
        if n < 0:
            return [Strip([Segment("no schedule read", NOTE)])]
        it = m.iterations[n]
        path = m.paths[it.pipeline]
        p = len(path)
        label_w = max(len(f"r{r} s{','.join(str(pos + c * p) for c in range(m.v))}") for pos, r in enumerate(path)) + 1
        cols = max(1, width - label_w)
        rows, ideal_rows, ns = m.layout(n, cols, self.zoom, self.offset_ns)
        here = self.here
        hl = None if here is None else here.mb
        rank_here = self.model.store.table.rank[self.playhead] if self.playhead >= 0 else None
        lines = [self._ruler(label_w, cols, ns)]
        for r, row in zip(path, rows):
            lines.append(self._row(row, label_w, cols, p, hl, here, LABEL_HERE if r == rank_here else LABEL))
        d = m.durations(n)
        words = ", ".join(f"every {k} {fmt_ns_short(v)}" for k, v in sorted(d.items(), key=lambda kv: kv[0] != "F"))
        lines.append(_text(f"textbook grid, bubble {it.ideal_bubble:.1%}: {words}, messages free", width, NOTE))
        for row in ideal_rows:
            lines.append(self._row(row, label_w, cols, p, hl, None, LABEL))
        return lines

    def _ruler(self, label_w: int, cols: int, ns: float) -> Strip:
        """Times from the iteration's first forward, every ~12 columns."""
        chars = [" "] * cols
        step = max(1, cols // max(1, cols // 12))
        x = 0
        while x < cols:
            text = "┊" + fmt_ns_short(int(self.offset_ns + x * ns))
            if x + len(text) > cols:
                break
            chars[x:x + len(text)] = text
            x += max(step, len(text) + 1)
        return Strip([Segment(" " * label_w, RULER), Segment("".join(chars), RULER)])

    def _row(self, row: Row, label_w: int, cols: int, p: int, hl: int | None, here: Cell | None,
             label_style: Style) -> Strip:
        segs = [Segment(row.label.ljust(label_w)[:label_w], label_style)]
        x = 0
        cells = row.cols
        while x < cols:
            k = cells[x]
            end = x + 1
            while end < cols and cells[end] == k:
                end += 1
            run = end - x
            if k == IDLE:
                segs.append(Segment(IDLE_CH * run, IDLE_STYLE))
            elif k == CUT:
                segs.append(Segment(CUT_CH * run, CUT_STYLE))
            elif k == BLANK:
                segs.append(Segment(" " * run))
            else:
                c = row.cells[k]
                if here is not None and c == here:
                    style = HERE
                elif hl is not None and c.mb == hl:
                    style = HIGHLIGHT[c.kind]
                else:
                    style = _cell_style(c, p)
                text = _fit(c, p, run)
                segs.append(Segment(text, style))
            x = end
        return Strip(segs)


def _fit(c: Cell, p: int, run: int) -> str:
    """A cell's label in its `run` columns: F3 (F3' on a rank's later virtual stages: interleaved 1F1B), else
    without its kind (3', its colour tells forward from backward), else its micro-batch alone."""
    label = c.label + "'" * (c.stage // p)
    for text in (label, label[1:], str(c.mb)):
        if len(text) <= run:
            return text.ljust(run)
    return str(c.mb)[:run]


def _text(text: str, width: int, style: Style) -> Strip:
    return Strip([Segment(text[:width].ljust(width), style)])
