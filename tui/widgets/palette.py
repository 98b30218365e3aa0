"""Colours of the timeline: one per op, a darker shade of it for the waiting part, grey for compute gaps."""

from __future__ import annotations

from rich.color import Color
from rich.style import Style

OP_COLORS = {
    "all_reduce": "#4e9cff",
    "all_gather": "#35c4d0",
    "reduce_scatter": "#a58bff",
    "all_to_all": "#f0a030",
    "broadcast": "#4fcf7a",
    "reduce": "#3a78c8",
    "gather": "#2fae95",
    "scatter": "#b070d0",
    "barrier": "#e8d040",
    "send": "#ff6b6b",
    "recv": "#ff9f6b",
}
GAP = Style(color="#505050")
BG_SELECTED = Color.parse("#4a4a78")
BG_PLAYHEAD = Color.parse("#8a2a2a")
PATH = "#ff5fd7"
"""The critical path's cells (a colour no op has): ━ where it computes, its op's glyph where it communicates."""


def _darker(hex_color: str, f: float = 0.45) -> str:
    c = Color.parse(hex_color).get_truecolor()
    return "#%02x%02x%02x" % tuple(int(v * f) for v in (c.red, c.green, c.blue))


OP_STYLES = {op: Style(color=c) for op, c in OP_COLORS.items()}
WAIT_STYLES = {op: Style(color=_darker(c)) for op, c in OP_COLORS.items()}
