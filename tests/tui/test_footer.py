"""The viewer's footer composes again only when the keys it shows change (Textual's composes at every change of
focus), and then shows what Textual's would."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Static

from disttrace.tui.widgets.footer import ViewerFooter


class Pane(Static, can_focus=True):
    BINDINGS = [Binding("n", "noop", "next")]


class Other(Static, can_focus=True):
    BINDINGS = [Binding("x", "noop", "expand")]


def _app(footer_cls):
    class FooterApp(App):
        def compose(self) -> ComposeResult:
            yield Pane("a", id="a")
            yield Pane("b", id="b")
            yield Other("c", id="c")
            yield footer_cls()
    return FooterApp()


async def _keys_shown_and_composes(footer_cls) -> tuple[list[list[str]], int]:
    app = _app(footer_cls)
    composes = 0
    async with app.run_test() as pilot:
        footer = app.query_one(Footer)
        original = footer.recompose

        async def counted():
            nonlocal composes
            composes += 1
            await original()
        footer.recompose = counted
        shown = []
        for target in ("a", "b", "a", "c", "a"):  # the same keys twice, then others, then the first again
            app.query_one(f"#{target}").focus()
            await pilot.pause()
            await pilot.pause()
            shown.append([k.key for k in footer.query("FooterKey")])
    return shown, composes


async def test_the_footer_composes_again_only_when_its_keys_change():
    shown, composes = await _keys_shown_and_composes(ViewerFooter)
    textual_shown, textual_composes = await _keys_shown_and_composes(Footer)
    assert shown == textual_shown == [["n", "ctrl+p"]] * 3 + [["x", "ctrl+p"], ["n", "ctrl+p"]]  # (+ the palette)
    # Textual's: at every focus and blur (9); the viewer's: when the bindings are first ready, then a's keys, c's
    # and a's again (b's are a's)
    assert (textual_composes, composes) == (9, 4)
