"""The Problems tab: the report's problems (the analysis': tracer/analysis/problems/checks.py), under what the input
lost and the analysis' notes, as the report says them first; enter jumps there."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import OptionList, Static

from ..model import MAX_ROWS
from ..model.replay import row_at_time
from ..model.store import TraceStore
from .messages import ShowInTimeline


class ProblemsView(Vertical):
    """The report's problems (mismatches, deaths, hangs, errors, non-finite values, divergences, unmatched
    messages, clock problems), under what the input lost, as the report says it first; enter jumps there."""

    DEFAULT_CSS = """
    ProblemsView { height: 1fr; }
    ProblemsView Static { height: auto; padding: 0 1; }
    ProblemsView OptionList { height: 1fr; }
    """

    def __init__(self, store: TraceStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store

    def compose(self) -> ComposeResult:
        t = self.store.table
        if t.warnings:
            head = t.damage_line() or "warnings about the input:"
            shown = [f"\n  {w}" for w in t.warnings[:5]]
            more = (f"\n  … and {len(t.warnings) - 5} more (disttrace report lists them all)"
                    if len(t.warnings) > 5 else "")
            yield Static(Text.assemble((head, "bold yellow"), *shown, more), id="input-warnings")
        notes = self.store.analysis.notes
        if notes:  # the report's notes (a black box's window, steps found ambiguous, ...): how to read the findings
            yield Static(Text.assemble(("notes:", "bold yellow"), *(f"\n  {n}" for n in notes)), id="analysis-notes")
        problems = self.store.analysis.problems
        if not problems:
            yield Static("No problems found: no mismatch, dead rank, hang, error, non-finite value, divergence, "
                         "unmatched message or clock violation.")
            return
        yield Static(f"{len(problems)} problem(s), worst first. enter: show it in the timeline")
        options = []
        for p in problems[:MAX_ROWS]:
            where = f"{p.op}, group_seq {p.group_seq}" if p.op and p.group_seq is not None else (p.op or "")
            options.append(Text.assemble((f"{p.kind.upper():<11}", "bold red"), (f"{where}\n", "bold"),
                                         (p.message, ""), "\n"))
        yield OptionList(*options, id="problem-list")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        p = self.store.analysis.problems[event.option_index]
        if p.events:
            self.post_message(ShowInTimeline(p.events[0]))
        elif p.time_ns is not None:
            self.post_message(ShowInTimeline(row_at_time(self.store, p.time_ns)))
