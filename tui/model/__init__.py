"""The viewer without Textual: what the views show, worked out from the analysis' results (no Rich, no Textual:
pyproject.toml's contract), so that each view's widget only lays it out."""

MAX_ROWS = 2000
"""Rows a table view holds, the worst first: the timeline has the rest."""
