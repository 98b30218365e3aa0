"""Demo narration: `narration.json` in a trace dir says what to say at each event of a teaching demo.

{"title": str, "intro": str, "steps": [{"match": {normalized event keys}, "text": str}], "summary": str,
 "view": str (optional: the viewer's tab to open on, e.g. "pipeline")}
The text shown is that of the first step whose `match` fits the event at the playhead (the intro before the
first event).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import orjson

from disttrace.tracer.data.table import EventTable
from disttrace.tracer.errors import TraceError


@dataclass
class Narration:
    title: str = ""
    intro: str = ""
    steps: list[tuple[dict, str]] = field(default_factory=list)
    summary: str = ""
    view: str = ""  # the tab the viewer opens on ("": the timeline)

    def text_for(self, table: EventTable, row: int) -> str:
        if row < 0:
            return self.intro
        ev = None
        for match, text in self.steps:
            if ev is None:
                ev = table.row(row)
            if all(ev.get(k) == v for k, v in match.items()):
                return text
        if row == len(table) - 1 and self.summary:
            return self.summary
        return ""


def load_narration(paths: list[str]) -> Narration | None:
    """The narration of the first trace dir that has one, or None."""
    for p in paths:
        f = os.path.join(p, "narration.json")
        if os.path.isdir(p) and os.path.isfile(f):
            try:
                with open(f, "rb") as fh:
                    d = orjson.loads(fh.read())
                steps = [(dict(s.get("match") or {}), str(s.get("text") or "")) for s in d.get("steps") or []]
                return Narration(str(d.get("title") or ""), str(d.get("intro") or ""), steps,
                                 str(d.get("summary") or ""), str(d.get("view") or ""))
            except (OSError, ValueError, AttributeError, TypeError) as e:
                raise TraceError(f"{f}: not a valid narration file ({e})") from None
    return None
