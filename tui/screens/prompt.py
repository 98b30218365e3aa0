"""A one-line prompt (for `/` search and `g` go to) that returns the typed text, or None on escape."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class Prompt(ModalScreen[str | None]):
    DEFAULT_CSS = """
    Prompt { align: center bottom; }
    Prompt > Vertical { width: 100%; height: auto; background: $surface; border-top: solid $accent; padding: 0 1; }
    """
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, label: str, placeholder: str = "", value: str = "") -> None:
        super().__init__()
        self.label = label
        self.placeholder = placeholder
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.label)
            # compact: one line, no border. (A rule of ours for Input's border lost to Textual's own `Input:focus`,
            # which is more specific: the tall border took the line, and the typed text was never seen)
            yield Input(value=self.value, placeholder=self.placeholder, compact=True)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
