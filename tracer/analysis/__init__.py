"""The analysis engine shared by `disttrace report` and the viewer (no torch, no textual).

analyze(table, progress=None) -> Analysis; to_json(analysis) -> dict (the report's --json);
describe(analysis, row) -> one sentence on what happened at an event. Results are the dataclasses of model.py."""

from .describe import describe, straggler_sentence
from .engine import analyze
from .jsonout import to_json

__all__ = ["analyze", "to_json", "describe", "straggler_sentence"]
