"""The event list: every event in replay order, one line each, drawn with the Line API (a million rows cost
nothing until they are on screen)."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.cache import LRUCache
from textual.events import Click
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from disttrace.tracer.analysis.units import fmt_bytes_short, fmt_ns_short

from ..model.store import TraceStore
from .messages import EventPicked
from .palette import OP_COLORS

HEADER = f"{'#':>7} {'time':>8} {'rank':<5}{'op':<15}{'seq':>4} {'bytes':>7} {'dur':>7} {'wait':>7}  site"
SEL_STYLE = Style(bgcolor="#4a4a78", bold=True)
PLAY_STYLE = Style(color="#ff8080", bold=True)


def short_site(site: str) -> str:
    """"/long/path/train.py:42 in main" as "train.py:42 main": the list column is narrow, the detail pane has it all."""
    head, _, func = site.partition(" in ")
    path, _, line = head.rpartition(":")
    if not path:
        return site
    return f"{path.rsplit('/', 1)[-1]}:{line} {func}".rstrip()


class EventList(ScrollView, can_focus=False):
    """All events; the selection is highlighted and kept in view, the playhead marked with ▶."""

    DEFAULT_CSS = """
    EventList { height: 1fr; scrollbar-size-vertical: 1; scrollbar-size-horizontal: 0; }
    """

    playhead: reactive[int] = reactive(-1)
    """Event row of the replay playhead."""
    selection: reactive[int] = reactive(-1)
    """Event row shown in the detail pane; kept in view."""

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self._lines: LRUCache = LRUCache(512)
        self.virtual_size = Size(len(HEADER) + 40, store.n_events + 1)

    def clear_caches(self) -> None:
        self._lines.clear()
        self.refresh()

    def watch_selection(self, row: int) -> None:
        self._keep_visible(row)
        self.refresh()

    def watch_playhead(self) -> None:
        self.refresh()

    def _keep_visible(self, row: int) -> None:
        h = self.scrollable_content_region.height - 1
        y = row
        if h > 0 and not self.scroll_y <= y < self.scroll_y + h:
            self.scroll_to(y=max(0, y - h // 2), animate=False)

    def on_resize(self) -> None:
        self._keep_visible(self.selection)

    def text_of(self, row: int) -> str:
        t = self.store.table
        seq = t.group_seq[row]
        dur = t.duration_ns(row)
        w = self.store.wait_ns[row]
        return (f"{row:>7} {fmt_ns_short(t.start_ns[row] - self.store.t0):>8} r{t.rank[row]:<4}{t.op[row]:<15}"
                f"{'' if seq < 0 else seq:>4} {fmt_bytes_short(t.bytes[row]):>7} "
                f"{fmt_ns_short(dur) if dur is not None else 'never':>7} {fmt_ns_short(w) if w else '':>7}  "
                f"{short_site(t.site[row])}")

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if y == 0:
            return Strip([Segment(HEADER, Style(bold=True, color="#a0a0a0"))]).crop(0, width).extend_cell_length(width)
        row = y - 1 + int(self.scroll_y)
        if row >= self.store.n_events:
            return Strip.blank(width)
        key = (row, row == self.selection, row == self.playhead, width, int(self.scroll_x))
        strip = self._lines.get(key)
        if strip is None:
            text = self.text_of(row)
            op = self.store.table.op[row]
            base = SEL_STYLE if row == self.selection else Style()
            mark = Segment("▶" if row == self.playhead else " ", PLAY_STYLE + base)
            segs = [mark, Segment(text[1:19], base), Segment(text[19:34], Style(color=OP_COLORS[op]) + base),
                    Segment(text[34:], base)]
            strip = Strip(segs).crop(int(self.scroll_x), int(self.scroll_x) + width).extend_cell_length(width, base)
            self._lines[key] = strip
        return strip

    def _on_click(self, event: Click) -> None:
        if event.y == 0:
            return
        row = event.y - 1 + int(self.scroll_y)
        if 0 <= row < self.store.n_events:
            self.post_message(EventPicked(row))
