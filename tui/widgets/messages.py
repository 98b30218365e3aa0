"""Messages the viewer's widgets send up to the screen that owns the view state."""

from __future__ import annotations

from textual.message import Message


class EventPicked(Message):
    """The user picked an event (click, enter); `move_playhead` also moves the replay there."""

    def __init__(self, row: int, move_playhead: bool = True) -> None:
        super().__init__()
        self.row = row
        self.move_playhead = move_playhead


class ShowInTimeline(Message):
    """The user asked to see an event in the timeline (enter on a row of the waits or problems view): the replay
    playhead goes there and the timeline tab comes to the front."""

    def __init__(self, row: int) -> None:
        super().__init__()
        self.row = row


class ViewChanged(Message):
    """New zoom level and window start asked by mouse input. Coalesces: only the latest one matters."""

    def __init__(self, zoom: int, offset_ns: int) -> None:
        super().__init__()
        self.zoom = zoom
        self.offset_ns = offset_ns

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ViewChanged)


class LoadProgress(Message):
    """Progress of the loading worker (posted from its thread): reading, then analysing. Coalesces."""

    def __init__(self, fraction: float, label: str) -> None:
        super().__init__()
        self.fraction = fraction
        self.label = label

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LoadProgress)


class AnalysisReady(Message):
    """The analysis of the trace has been adopted by the store: views that need it can be shown."""
