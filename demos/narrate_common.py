"""What every narration needs: the recorded run, value formatting, and the narration being written (times and
sizes are written by disttrace.tracer.units, as everywhere else).

A narration is written after the demo ran, from the trace: every number it quotes is a recorded one (the
values of small tensors, the bytes, the times), so that the text and the viewer never disagree. Imports
neither torch nor textual.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from disttrace.tracer.data.table import EventTable


@dataclass
class DemoRun:
    """One finished run of a demo: its trace and what its ranks reported."""

    name: str
    out: Path
    table: EventTable
    nproc: int
    backend: str
    options: dict = field(default_factory=dict)     # the demo options it ran with (size, ...)
    results: dict = field(default_factory=dict)     # rank -> the JSON the program's rank saved

    @cached_property
    def analysis(self):
        from disttrace.tracer.analysis import analyze

        return analyze(self.table)

    @cached_property
    def memory(self):
        """The memory analysis (a demo recorded with --memory: analysis/memory/'s MemoryReport), else None."""
        from disttrace.tracer.analysis import memory_report
        from disttrace.tracer.data.load import read_memory

        return memory_report(read_memory(self.table), self.analysis)

    @cached_property
    def rows(self) -> list[dict]:
        """Every event as its normalized dict, in table (time) order."""
        return [self.table.row(i) for i in range(len(self.table))]

    def events(self, op: str | None = None, rank: int | None = None) -> list[tuple[int, dict]]:
        return [(i, ev) for i, ev in enumerate(self.rows)
                if (op is None or ev["op"] == op) and (rank is None or ev["rank"] == rank)]

    def instance(self, ev: dict) -> dict[int, dict]:
        """The events of the same collective on every rank that entered it: rank -> event."""
        return {e["rank"]: e for e in self.rows
                if e["op"] == ev["op"] and e["group"] == ev["group"] and e["group_seq"] == ev["group_seq"]}

    def t0(self) -> int:
        return min(self.table.start_ns) if len(self.table) else 0


class Narration:
    """The narration.json being written: one text per event (matched by rank and per-rank event id)."""

    def __init__(self, run: DemoRun, title: str, intro: str):
        self.run, self.title, self.intro = run, title, intro
        self.view = ""  # the viewer's tab to open on ("": the timeline)
        self.texts: dict[int, str] = {}   # table row -> text
        self.fallback: list[tuple[dict, str]] = []

    def say(self, row: int, text: str) -> None:
        self.texts[row] = text

    def otherwise(self, match: dict, text: str) -> None:
        """Text for events no `say` covered (e.g. ops the tracer saw that the demo did not mean to show)."""
        self.fallback.append((match, text))

    def build(self, summary: str) -> dict:
        rows = self.run.rows
        steps = []
        for row in sorted(self.texts):
            ev = rows[row]
            text = self.texts[row]
            if row == len(rows) - 1:
                text += "\n\n" + summary   # the last event is where the story ends
            steps.append({"match": {"op": ev["op"], "rank": ev["rank"], "id": ev["id"]}, "text": text})
        steps += [{"match": m, "text": t} for m, t in self.fallback]
        steps.append({"match": {}, "text": "(an operation this demo does not explain)"})
        out = {"title": self.title, "intro": self.intro, "steps": steps, "summary": summary}
        if self.view:
            out["view"] = self.view
        return out

    def write(self, summary: str) -> dict:
        data = self.build(summary)
        (self.run.out / "narration.json").write_text(json.dumps(data, indent=1, ensure_ascii=False))
        return data


# -- values --------------------------------------------------------------------------------------

def values(summary: dict | None):
    """The recorded values of a tensor summary (nested lists for lists of tensors), or None."""
    return None if not summary else summary.get("values")


def flat(v) -> list:
    if isinstance(v, list):
        return [x for item in v for x in flat(item)]
    return [v]


def tidy(v):
    if isinstance(v, list):
        return [tidy(x) for x in v]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, float):
        return float(f"{v:.4g}")   # 4 significant digits: gradients are small numbers
    return v


def show(v) -> str:
    """[12.0, 15.0] -> '[12, 15]'."""
    return str(tidy(v))


def show_summary(summary: dict | None) -> str:
    """The values if recorded, else what the summary knows: '[2, 2]' or '4096 values (norm 12.3)'."""
    if not summary:
        return "nothing"
    v = values(summary)
    if v is not None:
        return show(v)
    return f"{summary.get('numel', '?'):,} values (min {summary.get('min'):.6g}, max {summary.get('max'):.6g})"


def chunks(v: list, n: int) -> list[list]:
    size = len(v) // n
    return [v[i * size:(i + 1) * size] for i in range(n)]


def add(*vectors) -> list:
    return [sum(xs) for xs in zip(*vectors)]


# -- events ------------------------------------------------------------------------------------

def duration(ev: dict) -> int | None:
    return None if ev["end_ns"] is None else ev["end_ns"] - ev["start_ns"]

