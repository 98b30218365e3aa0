"""The analysis engine shared by `disttrace report` and the viewer (no torch, no textual).

This package is the door the viewer (tui/) comes through; `core.results` (the results' dataclasses) is the only
module it imports by name, and tests/test_import_boundaries.py holds it to that. Commands may reach further in.

analyze(table, progress=None) -> Analysis; to_json(analysis) -> dict (the report's --json);
describe(analysis, row) -> one sentence on what happened at an event. Every name is imported on first use: the
viewer's start imports `core.results` (and so this package) but not the engine and its stages, which a re-open,
reading the saved analysis, never runs; `disttrace report` never needs the diff's names.
"""

from importlib import import_module

# name -> (module, its name there), imported when first asked for
_ON_USE = {
    **{name: ("text.sentences", name) for name in (
        "attribution_summary", "describe", "micro_batches", "run_straggler_sentence", "startup_sentence",
        "straggler_sentence", "straggler_verdict", "what_if_sentence")},
    "analyze": ("engine.run", "analyze"), "pending_analysis": ("core.tables", "pending_analysis"),
    "to_json": ("text.json_report", "to_json"), "merged": ("waits.wait_states", "merged"),
    "whole_run": ("waits.whole_run", "whole_run"), "widened": ("waits.whole_run", "widened"),
    "memory_report": ("memory.analyse", "memory_report"),
    "memory_fields": ("memory.breakdown", "FIELDS"), "short_site": ("memory.breakdown", "short_site"),
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


__all__ = list(_ON_USE)
