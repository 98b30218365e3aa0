"""The viewer's header: Textual's Header, safe to remove while its title update is still pending."""

from __future__ import annotations

from textual.css.query import NoMatches
from textual.events import Mount
from textual.widgets import Header


class ViewerHeader(Header):
    """Textual's Header, whose title update tolerates the header having been taken off screen.

    Header schedules an async title update when it is mounted (and when a title changes). `view --follow` swaps
    the ViewerScreen for a new one as the trace grows: when that swap comes before the update runs, the old
    header's children are gone and Header's own update raises NoMatches, which ends the app. This one skips it.
    """

    def _on_mount(self, event: Mount) -> None:
        event.prevent_default()  # instead of Header._on_mount, not after it

        async def set_title() -> None:
            if not self.is_attached:
                return
            try:
                self.query_one("HeaderTitle").update(self.format_title())
            except NoMatches:
                pass  # removed between scheduling and running: nothing to show the title on

        self.watch(self.app, "title", set_title)
        self.watch(self.app, "sub_title", set_title)
        self.watch(self.screen, "title", set_title)
        self.watch(self.screen, "sub_title", set_title)
