"""The event list: every event in replay order, one line each, drawn with the Line API (a million rows cost
nothing until they are on screen)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rich.segment import Segment
from rich.style import Style
from textual.cache import LRUCache
from textual.events import Click
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from disttrace.tracer.units import fmt_bytes_short, fmt_ns_short

from ..model.store import TraceStore
from .messages import EventPicked
from .palette import OP_COLORS


@dataclass(frozen=True)
class Column:
    """One column of the list: its header (the event format's name for the field where it has one, the name the
    detail pane gives it too), width, alignment, and when it goes on a narrow screen."""

    name: str
    width: int
    text: Callable[[TraceStore, int], str]
    """The cell's text for an event row."""
    right: bool = True
    drop: int = 0
    """The order in which columns leave when the list is too narrow for all of them (1 first); 0: never."""


# A narrow list (a 90-column terminal leaves it about 50) drops its least needed columns rather than cutting
# off the ones on the right: first # (the event number: the detail pane's "event #"), then bytes, then the start
# time (the ruler and the playhead line say it); group_seq, which lines up the same collective on every rank,
# stays longer. The detail pane shows every field of the selected event, dropped or not.
def columns_of(store: TraceStore) -> list[Column]:
    t = store.table
    last_rank = max(t.ranks, default=0)
    return [
        Column("#", max(1, len(str(max(0, store.n_events - 1)))), lambda s, i: str(i), drop=1),
        Column("time", 7, lambda s, i: fmt_ns_short(s.table.start_ns[i] - s.t0), drop=3),
        Column("rank", max(4, len(f"r{last_rank}")), lambda s, i: f"r{s.table.rank[i]}", right=False),
        Column("op", max([2, *map(len, t.op.values)]), lambda s, i: s.table.op[i], right=False),
        Column("group_seq", 9, lambda s, i: "" if s.table.group_seq[i] < 0 else str(s.table.group_seq[i]), drop=4),
        Column("bytes", 6, lambda s, i: fmt_bytes_short(s.table.bytes[i]), drop=2),
        Column("dur", 7, _duration, drop=5),
        Column("wait", 7, lambda s, i: fmt_ns_short(s.wait_ns[i]) if s.wait_ns[i] else "", drop=6),
    ]


def _pad(c: Column, text: str) -> str:
    return text.rjust(c.width) if c.right else text.ljust(c.width)


def _duration(store: TraceStore, row: int) -> str:
    dur = store.table.duration_ns(row)
    return fmt_ns_short(dur) if dur is not None else "never"


def line_width(columns: list[Column]) -> int:
    """Cells a line takes up to the site: the playhead mark, then each column after a space."""
    return 1 + sum(c.width + 1 for c in columns)


SITE_MIN = 14
"""Cells kept for the call site (file name and line) before the columns start to leave."""


def fit(columns: list[Column], width: int) -> list[Column]:
    """The columns that fit in `width` cells with room for the site, dropping them in their `drop` order."""
    shown = list(columns)
    for c in sorted((c for c in columns if c.drop), key=lambda c: c.drop):
        if line_width(shown) + SITE_MIN <= width:
            break
        shown.remove(c)
    return shown


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
        self._measure()

    def _measure(self) -> None:
        """The columns and the length of what the store holds."""
        self._all = columns_of(self.store)
        self._shown: tuple[int, list[Column]] = (-1, self._all)  # (width, the columns that fit it)
        self.virtual_size = Size(0, self.store.n_events + 1)  # no horizontal scrolling: the columns fit the width

    def take_whole(self) -> None:
        """The store now holds the whole trace, not its head (ViewerScreen.take_whole): measured again."""
        self._measure()
        self.clear_caches()

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

    def columns(self, width: int) -> list[Column]:
        """The columns shown at `width`."""
        if self._shown[0] != width:
            self._shown = (width, fit(self._all, width))
        return self._shown[1]

    @staticmethod
    def header(columns: list[Column]) -> str:
        """The names laid out as a line is: the playhead mark's cell, then each column after a space."""
        return " " + "".join(" " + _pad(c, c.name) for c in columns) + "  site"

    def cells(self, row: int, columns: list[Column]) -> list[str]:
        """The text of each column for event `row`, padded to its width."""
        return [_pad(c, c.text(self.store, row)) for c in columns]

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        columns = self.columns(width)
        if y == 0:
            return (Strip([Segment(self.header(columns), Style(bold=True, color="#a0a0a0"))])
                    .crop(0, width).extend_cell_length(width))
        row = y - 1 + int(self.scroll_y)
        if row >= self.store.n_events:
            return Strip.blank(width)
        key = (row, row == self.selection, row == self.playhead, width)
        strip = self._lines.get(key)
        if strip is None:
            op = self.store.table.op[row]
            base = SEL_STYLE if row == self.selection else Style()
            op_style = Style(color=OP_COLORS[op]) + base
            segs = [Segment("▶" if row == self.playhead else " ", PLAY_STYLE + base)]
            for c, text in zip(columns, self.cells(row, columns)):
                segs.append(Segment(" ", base))
                segs.append(Segment(text, op_style if c.name == "op" else base))
            segs.append(Segment("  " + short_site(self.store.table.site[row]), base))
            strip = Strip(segs).crop(0, width).extend_cell_length(width, base)
            self._lines[key] = strip
        return strip

    def _on_click(self, event: Click) -> None:
        if event.y == 0:
            return
        row = event.y - 1 + int(self.scroll_y)
        if 0 <= row < self.store.n_events:
            self.post_message(EventPicked(row))
