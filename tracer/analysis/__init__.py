"""The analysis engine shared by `disttrace report` and the viewer (no torch, no textual).

This package is the door the viewer (tui/) comes through; `core.results` (the results' dataclasses) is the only
module it imports by name, and tests/test_import_boundaries.py holds it to that. Commands may reach further in.

analyze(table, progress=None) -> Analysis; to_json(analysis) -> dict (the report's --json);
describe(analysis, row) -> one sentence on what happened at an event. The diff's and the analysis-apart's names
are imported on first use: `disttrace report` never needs them.
"""

from importlib import import_module

from .text.sentences import (attribution_summary, describe, micro_batches, run_straggler_sentence, startup_sentence,
                             straggler_sentence, straggler_verdict, what_if_sentence)
from .engine.run import analyze, pending_analysis
from .text.json_report import to_json
from .waits.wait_states import merged
from .waits.whole_run import whole_run
from .memory.analyse import memory_report

# name -> (module, its name there), imported when first asked for
_ON_USE = {
    "compare": ("diff.compare", "compare"), "Diff": ("diff.compare", "Diff"), "signed": ("diff.compare", "signed"),
    "verdict": ("diff.compare", "verdict"), "analysed": ("diff.sides", "analysed"),
    "analyze_apart": ("engine.child_process", "analyze_apart"), "start_apart": ("engine.child_process", "start"),
    "stop_apart": ("engine.child_process", "stop"),
}


def __getattr__(name: str):
    if name not in _ON_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _ON_USE[name]
    value = getattr(import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


__all__ = ["analyze", "to_json", "describe", "straggler_sentence", "straggler_verdict", "attribution_summary",
           "micro_batches", "startup_sentence", "what_if_sentence", "pending_analysis", "merged", "whole_run", "memory_report",
           "run_straggler_sentence", *_ON_USE]
