"""A small widget that shows a plotext 6 figure (textual-plotext needs plotext<6, so we draw our own)."""

from __future__ import annotations

from typing import Callable

from rich.text import Text
from textual.widget import Widget


class _Titled:
    """plotext's figure, but for its title, which the chart writes itself: plotext leaves out a title wider than
    the plot (at 80 columns the busbw chart had none)."""

    def __init__(self, fig) -> None:
        self._fig = fig
        self.title_text = ""

    def title(self, text: str) -> None:
        self.title_text = text

    def __getattr__(self, name: str):
        return getattr(self._fig, name)


def render_figure(draw: Callable, width: int, height: int) -> Text:
    """Run draw(fig) on plotext's figure sized width x height and return the result as rich Text; the title
    fig.title() sets is wrapped to the width, centred, above the plot."""
    import textwrap

    import plotext as plt

    # plotext keeps global state: not limiting plots to the real terminal's size makes the chart the widget's
    # size whatever terminal (or test runner) we run in, and whatever `disttrace report` set before
    plt.terminal.limit(False, False)
    fig = plt.figure
    fig.clear.all()
    fig.theme("dark")
    fig.canvas("default")
    width = max(10, width)
    titled = _Titled(fig)
    draw(titled)
    title = textwrap.wrap(titled.title_text, width)[: max(0, height - 5)] if titled.title_text else []
    fig.plot_size(width, max(5, height - len(title)))
    text = Text("\n".join(line.center(width).rstrip() for line in title), style="bold", no_wrap=True)
    if title:
        text.append("\n")
    return text.append_text(Text.from_ansi(fig.build().string(), no_wrap=True))


class PlotChart(Widget):
    """Calls draw(fig) with a cleared plotext figure of the widget's size; re-renders on resize or replot()."""

    DEFAULT_CSS = """
    PlotChart { height: 1fr; min-height: 8; }
    """

    def __init__(self, draw: Callable, **kwargs) -> None:
        super().__init__(**kwargs)
        self.draw = draw
        self._cache: tuple | None = None

    def replot(self, draw: Callable | None = None) -> None:
        if draw is not None:
            self.draw = draw
        self._cache = None
        self.refresh()

    def render(self):
        size = (self.size.width, self.size.height)
        if self._cache is None or self._cache[0] != size:
            try:
                text = render_figure(self.draw, *size)
            except Exception as e:  # noqa: BLE001 - a chart that cannot be drawn must not take the viewer down
                text = Text(f"(chart unavailable: {type(e).__name__}: {e})", style="dim")
            self._cache = (size, text)
        return self._cache[1]
