"""The timeline: one line per rank, time across, drawn with the Line API from the store's lanes.

Nothing here is a widget per event: `render_line` asks the rank's Lane for the cells of the visible
window, then lays the critical path's marks, the selection and the playhead over them. Cells sit on a fixed
grid per zoom level (cell i covers [i, i + 1) cell widths from the trace start, the window starts at a whole
cell), and are drawn and cached CHUNK cells at a time: a pan draws only the chunks it brings into view. The
marks are not in the cached chunks: they are part of the key of the cached segments (one per run of style).
"""

from __future__ import annotations

import re
from bisect import bisect_right

from rich.segment import Segment
from rich.style import Style
from textual.cache import LRUCache
from textual.events import Click, MouseScrollDown, MouseScrollLeft, MouseScrollRight, MouseScrollUp
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from disttrace.tracer.units import fmt_ns_short

from ..model import viewport
from ..model.critical import step_paths
from ..model.lod import BLANK_KEY, GAP_KEY
from ..model.replay import step_event
from ..model.store import TraceStore
from .messages import EventPicked, ViewChanged
from .palette import BG_PLAYHEAD, BG_SELECTED, GAP, OP_STYLES, PATH, WAIT_STYLES

_EIGHTHS = " ▁▂▃▄▅▆▇█"
_GAP = ("─", GAP)
_BLANK = (" ", Style())
_SELECTED = Style(bgcolor=BG_SELECTED)
_PLAYHEAD = Style(bgcolor=BG_PLAYHEAD)
_PATH = Style(color=PATH, bold=True)


CHUNK = 32
"""Cells drawn and cached together: a pan of an eighth of the window (~18 cells of 142) draws one chunk a lane,
not the whole lane."""

_RUNS = re.compile(r"(.)\1*", re.S)
"""Runs of equal style in a lane's style string (one segment each)."""
_THIN = str.maketrans({" ": "▏", "─": "▏"})
_THIN_PLAYHEAD = str.maketrans({" ": "│", "─": "│"})
_PATH_LINE = str.maketrans({" ": "━", "─": "━"})
"""A critical path's compute (no event: the gap or blank cells) is drawn as a heavy line in the path's colour."""


def _glyph(op: str, waiting: bool, level: int) -> tuple[str, Style]:
    """Character and style of a cell: full (█, or ▒ when waiting dominates) or a partial block by busy eighths."""
    ch = ("▒" if waiting else "█") if level == 8 else _EIGHTHS[level]
    return ch, (WAIT_STYLES if waiting else OP_STYLES)[op]


class _Palette:
    """The styles a lane is drawn with, each known by one character (chr of its index): a lane's looks are then
    two strings, its characters and its styles, which the garbage collector never walks (a list of Styles a
    chunk, for every chunk cached, made every full collection walk many more objects in the middle of a key)
    and which join, slice and split into runs in C."""

    def __init__(self) -> None:
        self.styles: list[Style] = []
        self._index: dict[int, str] = {}  # id(style) -> its character
        self._marked: dict[tuple[str, int], str] = {}  # (style character, id(background)) -> marked character

    def char(self, style: Style) -> str:
        c = self._index.get(id(style))
        if c is None:
            c = self._index[id(style)] = chr(len(self.styles))
            self.styles.append(style)
        return c

    def marked(self, c: str, mark: Style) -> str:
        """The character of style c with a mark laid over: the playhead's or the selection's background, the
        critical path's colour."""
        m = self._marked.get((c, id(mark)))
        if m is None:
            m = self._marked[(c, id(mark))] = self.char(self.styles[ord(c)] + mark)
        return m


LABEL_STYLE = Style(color="#c0c0c0")
FOCUS_STYLE = Style(color="#ffffff", bgcolor="#2a5a8a", bold=True)


def label_width(store: TraceStore) -> int:
    return min(18, max((len(_label(rr.rank, rr.host)) for rr in store.rows), default=4) + 1)


def _label(rank: int, host: str) -> str:
    return f"r{rank} {host}" if host else f"r{rank}"


class _Chunks(dict):
    """The drawn chunks, least recently used dropped first (a dict keeps insertion order: a hit moves to the
    end). Keys are tuples of ints and values tuples of two strs: nothing here for the collector to walk."""

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def get(self, key, default=None):
        value = self.pop(key, None)
        if value is None:
            return default
        dict.__setitem__(self, key, value)
        return value

    def __setitem__(self, key, value) -> None:
        if len(self) >= self.maxsize and key not in self:
            del self[next(iter(self))]
        dict.__setitem__(self, key, value)


class Timeline(ScrollView, can_focus=False):
    """Ranks × time. Bound to the screen's view state; posts EventPicked and ViewChanged up."""

    DEFAULT_CSS = """
    Timeline { height: auto; max-height: 1fr; min-height: 2; scrollbar-size-vertical: 1; }
    """

    zoom: reactive[int] = reactive(0)
    """Zoom level: the window shows span / 2**zoom."""
    offset_ns: reactive[int] = reactive(0)
    """Window start, ns after the trace start."""
    playhead: reactive[int] = reactive(-1)
    """Event row of the replay playhead (-1: before the first event)."""
    selection: reactive[int] = reactive(-1)
    """Event row shown in the detail pane."""
    focused_rank: reactive[int] = reactive(0)
    """Display index of the focused rank."""
    path_step: reactive[int] = reactive(-1)
    """Step whose critical path is marked on the lanes (the analysis' CriticalPath.index; -1: none)."""

    def __init__(self, store: TraceStore, rank_indices: list[int] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.rank_indices = list(range(len(store.rows))) if rank_indices is None else rank_indices
        self.label_w = label_width(store)
        # What a frame makes lives here only as strings, shared styles and segments, and few of the latter: every
        # object held is one more that each full garbage collection walks (the Cells of a cache made those
        # long, a stall every few keys). Drawn chunks are strs (see _Palette), nothing else.
        self._chunks = _Chunks(8192)  # (rank index, zoom, width, chunk) -> (chars, style characters), two strs
        self._segments: LRUCache = LRUCache(256)
        self._palette = _Palette()
        self._glyph_keys: tuple[dict[int, str], dict[int, str]] | None = None  # lod.glyph_keys -> (char, style)
        self._hl_key: tuple | None = None
        self._hl: dict[int, list[int]] = {}
        self._geometry_key: tuple | None = None
        self._geometry_value = (1, 1.0, 0)
        self._ahead: list[tuple[int, int, int, int, int]] = []  # chunks to draw while idle (see draw_ahead)
        self._ahead_timer = None
        self.virtual_size = Size(0, len(self.rank_indices))

    def take_whole(self) -> None:
        """The store now holds the whole trace, not its head (ViewerScreen.take_whole): its ranks and labels again,
        then the drawn lanes forgotten."""
        self.rank_indices = list(range(len(self.store.rows)))
        self.label_w = label_width(self.store)
        self._geometry_key = None
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.rank_indices))
        self.clear_caches()

    def clear_caches(self) -> None:
        """Forget drawn lanes (the store's lanes changed: the analysis arrived)."""
        self._chunks.clear()
        self._segments.clear()
        self._hl_key = None
        self.refresh()
        self._plan_ahead()

    # -- geometry ---------------------------------------------------------------------------------
    def _geometry(self) -> tuple[int, float, int]:
        """(lane width, ns a cell, grid index of the window's first cell), worked out once per view: a frame asks
        hundreds of times, and the content region is a chain of properties."""
        key = (self.zoom, self.offset_ns, self.size, self.scrollbars_enabled)
        if self._geometry_key != key:
            width = max(1, self.scrollable_content_region.width - self.label_w)
            ns = viewport.window_ns(self.store.span_ns, self.zoom) / width
            # the window starts at the grid cell nearest offset_ns
            self._geometry_key, self._geometry_value = key, (width, ns, round(self.offset_ns / ns))
        return self._geometry_value

    @property
    def lane_width(self) -> int:
        return self._geometry()[0]

    @property
    def ns_per_cell(self) -> float:
        return self._geometry()[1]

    @property
    def first_cell(self) -> int:
        """Grid index of the window's first cell."""
        return self._geometry()[2]

    def time_at_x(self, x: int) -> float:
        return self.store.t0 + (self.first_cell + x - self.label_w + 0.5) * self.ns_per_cell

    def col_of(self, t_ns: int) -> int:
        return int((t_ns - self.store.t0) // self.ns_per_cell) - self.first_cell

    def on_resize(self) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.rank_indices))
        self.refresh()

    # -- reactivity ---------------------------------------------------------------------------------
    def watch_zoom(self) -> None:
        self.refresh()
        self._plan_ahead()

    def watch_offset_ns(self) -> None:
        self.refresh()
        self._plan_ahead()

    def watch_playhead(self) -> None:
        self.refresh()
        self._plan_ahead()  # where n / p go next

    def watch_selection(self, old: int, new: int) -> None:
        # only the lanes whose marks change: Textual's work a repainted line (styles, filters, compositing) is
        # most of a frame once the lane's segments are cached
        before = set(self._hl) if self._hl_key == (old,) else None
        if before is None:
            self.refresh()
            return
        index = self.store.rank_index
        self._refresh_lanes({index[r] for r in before | set(self._highlight_rows()) if r in index})

    def watch_path_step(self) -> None:
        self.refresh()

    def watch_focused_rank(self, old: int, k: int) -> None:
        top = self._top_to_show(k)
        if top is not None:
            self.scroll_to(y=top, animate=False)
            self.refresh()
            return
        self._refresh_lanes({old, k})  # the two labels

    def _top_to_show(self, k: int) -> int | None:
        """The top line that brings display rank k on screen, centred (None: it is on screen, or not shown)."""
        if k not in self.rank_indices:
            return None
        y, height = self.rank_indices.index(k), self.scrollable_content_region.height
        return None if self.scroll_y <= y < self.scroll_y + height else max(0, y - height // 2)

    def _refresh_lanes(self, ks: set[int]) -> None:
        """Repaint the lines of these display ranks (those on screen)."""
        top, height, width = int(self.scroll_y), self.scrollable_content_region.height, self.size.width
        regions = []
        for y, k in enumerate(self.rank_indices[top:top + height]):
            if k in ks:
                regions.append(Region(0, y, width, 1))
        if regions:
            self.refresh(*regions)

    # -- rendering ------------------------------------------------------------------------------------
    def base_cells(self, k: int, width: int) -> tuple[str, str]:
        """Characters and style characters (see _Palette) of display rank k's lane in the current window, from
        the chunks of the grid already drawn; the missing ones are drawn, each contiguous run in one call to the
        lane."""
        first = self.first_cell
        c_first, c_last = first // CHUNK, (first + width - 1) // CHUNK
        got = self._fill(k, self.zoom, width, c_first, c_last)
        a = first - c_first * CHUNK
        if len(got) == 1:
            chars, styles = got[0]
        else:
            chars, styles = "".join([g[0] for g in got]), "".join([g[1] for g in got])
        return chars[a:a + width], styles[a:a + width]

    def _fill(self, k: int, zoom: int, width: int, c_first: int, c_last: int) -> list[tuple[str, str]]:
        """Chunks c_first .. c_last of display rank k's lane at this zoom and width, drawing the missing ones."""
        chunks = self._chunks
        got = [chunks.get((k, zoom, width, c)) for c in range(c_first, c_last + 1)]
        n = 0
        while n < len(got):
            if got[n] is not None:
                n += 1
                continue
            end = n
            while end < len(got) and got[end] is None:
                end += 1
            chars, styles = self._draw(k, zoom, width, (c_first + n) * CHUNK, (end - n) * CHUNK)
            for m in range(n, end):
                a = (m - n) * CHUNK
                got[m] = chunks[(k, zoom, width, c_first + m)] = (chars[a:a + CHUNK], styles[a:a + CHUNK])
            n = end
        return got

    def _glyph_tables(self) -> tuple[dict[int, str], dict[int, str]]:
        """Character and style character of every value lod.glyph_keys gives for the store's ops."""
        ops = self.store.table.op.values
        if self._glyph_keys is None or len(self._glyph_keys[0]) != 16 * len(ops) + 2:  # the op column grew
            chars, styles = {GAP_KEY: _GAP[0], BLANK_KEY: _BLANK[0]}, {}
            styles[GAP_KEY], styles[BLANK_KEY] = self._palette.char(_GAP[1]), self._palette.char(_BLANK[1])
            for code, op in enumerate(ops):
                for waiting in (False, True):
                    for level in range(1, 9):
                        key = code * 18 + waiting * 9 + level
                        ch, style = _glyph(op, waiting, level)
                        chars[key], styles[key] = ch, self._palette.char(style)
            self._glyph_keys = (chars, styles)
        return self._glyph_keys

    def _draw(self, k: int, zoom: int, width: int, first: int, count: int) -> tuple[str, str]:
        """Characters and style characters of grid cells first .. first + count - 1 of display rank k's lane."""
        ns = viewport.window_ns(self.store.span_ns, zoom) / width
        keys = self.store.rows[k].lane.glyph_keys(self.store.t0, ns, first, count, self.store.table.op.codes)
        chars, styles = self._glyph_tables()
        return "".join(map(chars.__getitem__, keys)), "".join(map(styles.__getitem__, keys))

    def _highlight_rows(self) -> dict[int, list[int]]:
        """Rows to highlight (the selection, its collective on every rank, its matching send/recv) by rank."""
        key = (self.selection,)
        if self._hl_key == key:
            return self._hl
        sel = self.selection
        rows = set()
        if sel >= 0:
            rows.add(sel)
            inst = self.store.instance(sel)
            if inst is not None:
                rows.update(inst.events.values())
            other = self.store.partner(sel)
            if other is not None:
                rows.add(other)
        by_rank: dict[int, list[int]] = {}
        for row in rows:
            by_rank.setdefault(self.store.table.rank[row], []).append(row)
        self._hl_key, self._hl = key, by_rank
        return by_rank

    def render_line(self, y: int) -> Strip:
        idx = y + int(self.scroll_y)
        width = self.lane_width
        if idx >= len(self.rank_indices):
            return Strip.blank(self.scrollable_content_region.width)
        k = self.rank_indices[idx]
        rr = self.store.rows[k]
        label = _label(rr.rank, rr.host)[: self.label_w - 1].ljust(self.label_w)
        segs = self._lane_segments(k, rr.rank, width)
        return Strip([Segment(label, FOCUS_STYLE if k == self.focused_rank else LABEL_STYLE), *segs],
                     self.label_w + width)

    def _path_spans(self, rank: int, col_of, width: int) -> tuple[tuple[int, int], ...]:
        """The columns (first, last) of the window that the marked critical path covers on this rank."""
        if self.path_step < 0:
            return ()
        marks = step_paths(self.store).marks(self.path_step).get(rank)
        if not marks:
            return ()
        out: list[tuple[int, int]] = []
        # the stretches are sorted and apart: start at the first one ending in the window
        lo_ns = self.store.t0 + self.first_cell * self.ns_per_cell
        for a, b in marks[max(0, bisect_right(marks, (lo_ns,)) - 1):]:
            c0 = col_of(a)
            if c0 >= width:
                break
            c1 = max(c0, col_of(b - 1))
            if c1 < 0:
                continue
            c0, c1 = max(0, c0), min(width - 1, c1)
            if out and c0 <= out[-1][1] + 1:  # two stretches in one cell (or touching): one run of marks
                out[-1] = (out[-1][0], max(c1, out[-1][1]))
            else:
                out.append((c0, c1))
        return tuple(out)

    def _lane_segments(self, k: int, rank: int, width: int) -> list[Segment]:
        """Display rank k's lane with the critical path's marks, the selection and the playhead laid over, one
        segment per run of equal style (cached by what is marked: moving the focus or the selection redraws only
        what changed)."""
        table, t0 = self.store.table, self.store.t0
        _, ns, first = self._geometry()

        def col_of(t_ns: int) -> int:  # self.col_of, with the geometry looked up once a lane
            return int((t_ns - t0) // ns) - first

        spans = []
        for row in self._highlight_rows().get(rank, ()):
            c0 = col_of(table.start_ns[row])
            c1 = max(c0, col_of(self.store.end_of(row) - 1))
            if c1 < 0 or c0 >= width:  # wholly outside the window: nothing of it is on screen to mark
                continue
            spans.append((max(0, c0), min(width - 1, c1)))
        px = col_of(table.start_ns[self.playhead]) if self.playhead >= 0 else -1
        if not 0 <= px < width:
            px = -1
        path = self._path_spans(rank, col_of, width)
        key = (k, self.zoom, first, width, tuple(spans), px, path)
        segs = self._segments.get(key)
        if segs is not None:
            return segs
        chars, styles = self.base_cells(k, width)
        palette = self._palette
        for c0, c1 in path:  # under the selection and the playhead: their backgrounds stay
            chars = chars[:c0] + chars[c0:c1 + 1].translate(_PATH_LINE) + chars[c1 + 1:]
            styles = (styles[:c0] + "".join([palette.marked(c, _PATH) for c in styles[c0:c1 + 1]])
                      + styles[c1 + 1:])
        for c0, c1 in spans:
            chars = chars[:c0] + chars[c0:c1 + 1].translate(_THIN) + chars[c1 + 1:]
            styles = (styles[:c0] + "".join([palette.marked(c, _SELECTED) for c in styles[c0:c1 + 1]])
                      + styles[c1 + 1:])
        if px >= 0:
            chars = chars[:px] + chars[px].translate(_THIN_PLAYHEAD) + chars[px + 1:]
            styles = styles[:px] + palette.marked(styles[px], _PLAYHEAD) + styles[px + 1:]
        # every glyph is one cell wide, so the strip's length is known; one segment per run of equal style
        by_char = palette.styles
        segs = [Segment(chars[m.start():m.end()], by_char[ord(m.group(1))]) for m in _RUNS.finditer(styles)]
        self._segments[key] = segs
        return segs

    # -- drawing ahead --------------------------------------------------------------------------------
    AHEAD_DELAY_S = 0.03
    """Quiet time after a change of view before drawing ahead (keys held down draw nothing ahead)."""

    def _plan_ahead(self) -> None:
        """Once the view rests, draw while idle the chunks the next key most likely needs: the neighbours of
        the window at this zoom (a pan), the windows the zoom keys lead to, the window that n or p moves to when
        the playhead's next or previous event lies outside this one (and the lanes it scrolls to, when that event's
        rank is off screen: at 1,024 ranks, most steps), then the windows at one zoom level in and
        out about any point (a zoom keeps a point of the window in place, so all of it at z+1, and half a window
        either side at z-1). A zoom key then finds
        its lanes drawn, as a pan does; one lane's chunks at a time, so a key waits for at most that."""
        if self._ahead_timer is not None:
            self._ahead_timer.stop()
        self._ahead = []
        if self.is_mounted:
            self._ahead_timer = self.set_timer(self.AHEAD_DELAY_S, self._start_ahead)

    def _start_ahead(self) -> None:
        self._ahead_timer = None
        width, _, first = self._geometry()
        z, top = self.zoom, int(self.scroll_y)
        lanes = self.rank_indices[top:top + self.scrollable_content_region.height]
        ranges = [(z, first - CHUNK, first + width + CHUNK)]  # (zoom, first cell, end cell)
        span, t0, ns = self.store.span_ns, self.store.t0, self.ns_per_cell
        zooms = [nz for nz in (z + 1, z - 1) if 0 <= nz <= viewport.max_zoom(span, width)]
        # the exact windows the + and - keys lead to (the viewer zooms about the playhead when it is in the
        # window, else about the centre: ViewerScreen.action_zoom), before anything less likely
        t = self.store.table.start_ns[self.playhead] - t0 if self.playhead >= 0 else None
        anchor = t if t is not None and self.offset_ns <= t <= self.offset_ns + viewport.window_ns(span, z) else None
        for nz in zooms:
            _, off = viewport.zoom_to(span, z, self.offset_ns, nz, anchor)
            f = round(off / (viewport.window_ns(span, nz) / width))
            ranges.append((nz, f, f + width))
        # n / p: where the window goes when the playhead steps to an event outside it, and the lanes on screen
        # once the timeline scrolls to the event's rank (so that a key need not wait for a
        # screen of lanes drawn cold)
        height = self.scrollable_content_region.height

        def chunks(ranges_: list, lanes_: list) -> list:  # (lane, zoom, width, first chunk, last chunk)
            return [(k, zz, width, max(0, a) // CHUNK, max(0, b - 1) // CHUNK) for zz, a, b in ranges_ for k in lanes_]

        scrolled = []
        for d in (1, -1):
            row = step_event(self.store, self.playhead, d)
            if row >= 0 and row != self.playhead:
                off = viewport.follow(span, z, self.offset_ns, self.store.table.start_ns[row] - t0)
                a = round(off / ns) if off != self.offset_ns else first
                if off != self.offset_ns:
                    ranges.append((z, a, a + width))
                new_top = self._top_to_show(self.store.rank_index.get(self.store.table.rank[row], -1))
                if new_top is not None:
                    scrolled += chunks([(z, a, a + width)],
                                       [k for k in self.rank_indices[new_top:new_top + height] if k not in lanes])
        # zooming about any other point (the mouse wheel's): all of the window at z+1, half a window either side
        # at z-1 (what is drawn already is skipped)
        wheel = []
        if z + 1 in zooms:
            wheel.append((z + 1, 2 * first, 2 * (first + width)))
        if z - 1 in zooms:
            wheel.append((z - 1, first // 2 - width // 2, (first + width) // 2 + width // 2))
        self._ahead = chunks(ranges, lanes) + scrolled + chunks(wheel, lanes)
        self._ahead.reverse()  # popped from the end: pans first, the top lane first
        self.call_later(self._draw_ahead)

    def _draw_ahead(self) -> None:
        if self._ahead:
            self._fill(*self._ahead.pop())
            self.call_later(self._draw_ahead)

    # -- mouse ------------------------------------------------------------------------------------
    def _on_click(self, event: Click) -> None:
        idx = event.y + int(self.scroll_y)
        if event.x < self.label_w or idx >= len(self.rank_indices):
            return
        row = self.store.event_at(self.rank_indices[idx], int(self.time_at_x(event.x)))
        if row is not None:
            self.post_message(EventPicked(row))

    def _zoom_by(self, delta: int, x: int | None) -> None:
        span = self.store.span_ns
        new = max(0, min(viewport.max_zoom(span, self.lane_width), self.zoom + delta))
        anchor = None if x is None else self.time_at_x(x) - self.store.t0
        self.post_message(ViewChanged(*viewport.zoom_to(span, self.zoom, self.offset_ns, new, anchor)))

    def _pan_by(self, cells: float) -> None:
        off = viewport.clamp_offset(self.store.span_ns, self.zoom, self.offset_ns + cells * self.ns_per_cell)
        self.post_message(ViewChanged(self.zoom, off))

    def _on_mouse_scroll_down(self, event: MouseScrollDown) -> None:
        if event.ctrl:
            event.stop()
            self._zoom_by(-1, event.x)
        elif event.shift:
            event.stop()
            self._pan_by(self.lane_width / 8)
        else:
            super()._on_mouse_scroll_down(event)

    def _on_mouse_scroll_up(self, event: MouseScrollUp) -> None:
        if event.ctrl:
            event.stop()
            self._zoom_by(+1, event.x)
        elif event.shift:
            event.stop()
            self._pan_by(-self.lane_width / 8)
        else:
            super()._on_mouse_scroll_up(event)

    def _on_mouse_scroll_left(self, event: MouseScrollLeft) -> None:
        event.stop()
        self._pan_by(-self.lane_width / 8)

    def _on_mouse_scroll_right(self, event: MouseScrollRight) -> None:
        event.stop()
        self._pan_by(self.lane_width / 8)


class Ruler(Widget):
    """The time axis above the timeline: ticks at 1/2/5 steps, times from the trace start."""

    DEFAULT_CSS = """
    Ruler { height: 1; color: $text-muted; }
    """

    zoom: reactive[int] = reactive(0)
    """Zoom level (bound to the screen's)."""
    offset_ns: reactive[int] = reactive(0)
    """Window start (bound to the screen's)."""

    def __init__(self, store: TraceStore, timeline: Timeline, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.timeline = timeline

    def render_line(self, y: int) -> Strip:
        lw = self.timeline.label_w
        width = self.timeline.lane_width
        ns = viewport.window_ns(self.store.span_ns, self.zoom) / width
        tick = viewport.nice_tick(ns)
        chars = [" "] * width
        first_cell = round(self.offset_ns / ns)  # the timeline's grid (Timeline.first_cell)
        start = int(first_cell * ns)
        t = (start // tick + (1 if start % tick else 0)) * tick
        while True:
            x = int(t // ns) - first_cell
            if x >= width:
                break
            text = "▏" + fmt_ns_short(t)
            if 0 <= x and x + len(text) <= width:
                chars[x:x + len(text)] = list(text)
            t += tick
        head = f"×{2 ** self.zoom}" if self.zoom else "all"
        return Strip([Segment(head[: lw - 1].ljust(lw), Style(color="#808080")),
                      Segment("".join(chars), Style(color="#a0a0a0"))])
