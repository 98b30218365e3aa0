"""The viewer's footer: Textual's Footer, composed again only when the keys it shows change."""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer


class ViewerFooter(Footer):
    """Textual's Footer, which composes itself again (a widget a key, the stylesheet applied to each) whenever the
    screen's bindings are updated: at every change of focus, where the viewer's keys mostly stay the same. This one
    composes again only when what it would show (each shown key, its label, action, state and tooltip) differs from
    what it shows."""

    _shown: tuple | None = None

    def _showing(self) -> tuple:
        return tuple((b.key, b.description, b.action, enabled, tooltip, b.group)
                     for (_, b, enabled, tooltip) in self.screen.active_bindings.values() if b.show)

    def compose(self):
        self._shown = self._showing() if self._bindings_ready else None
        yield from super().compose()

    def bindings_changed(self, screen: Screen) -> None:
        if (self._shown is not None and screen.app.app_focus and self.is_attached and screen is self.screen
                and self._showing() == self._shown):
            return
        super().bindings_changed(screen)
