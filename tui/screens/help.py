"""The `?` screen: every key of the viewer, generated from the bindings so it never drifts from them."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

INTRO = ("disttrace view: one line per rank, time across. █ is time inside a collective or send/recv, ▒ its "
         "waiting part (the rank was early and waited for a late peer), ─ compute between ops, ▁▂▃ a cell "
         "that is only partly communication. The red column is the playhead, the blue cells the selected "
         "collective on every rank. With the critical path marked (x, or on showing tab 8), the cells of the "
         "playhead's step's path are pink, ━ where it computes: follow it across the ranks. The Pipeline tab (3) draws "
         "the schedule of the playhead's iteration, a row per stage: F3 micro-batch 3's forward, B3 its backward, ░ "
         "the bubble, the textbook grid under it.  Mouse: click an event, wheel scrolls ranks, ctrl+wheel zooms, "
         "shift+wheel pans.")


def keys_table(bindings: list[Binding]) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 2))
    table.add_column(style="bold #ffd75f", no_wrap=True)
    table.add_column()
    seen = set()
    for b in bindings:
        what = b.tooltip or b.description
        if not what or what in seen:
            continue
        seen.add(what)
        keys = ", ".join(k.strip() for k in b.key.split(","))
        keys = keys.replace("plus", "+").replace("minus", "-").replace("question_mark", "?").replace("slash", "/")
        keys = keys.replace("space", "space").replace("less_than_sign", "<").replace("greater_than_sign", ">")
        keys = keys.replace("left_square_bracket", "[").replace("right_square_bracket", "]").replace("full_stop", ".")
        keys = keys.replace("left_curly_bracket", "{").replace("right_curly_bracket", "}")
        keys = keys.replace("equals_sign", "=").replace("pagedown", "PgDn").replace("pageup", "PgUp")
        table.add_row(keys, what)
    return table


class HelpScreen(ModalScreen[None]):
    """Lists the keys; any of escape, q or ? closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90; max-width: 95%; height: auto; max-height: 90%;
        border: round $accent; background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close help")]

    def __init__(self, bindings: list[Binding]) -> None:
        super().__init__()
        self.bindings_list = bindings

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(INTRO + "\n")
            yield Static(keys_table(self.bindings_list))

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
