"""One side of a diff: a run analysed as `analyze` does, keeping what the comparison re-times with, the
replay of its steady steps (causal/what_if.py's `_Replay`) and their pacing (causal/attribution.py's `Pacing`), which `analyze`
drops once its own stages have read them.

Its compute spans are keyed across runs (`StepSpans`): a span is the compute before a host interval (causal/what_if_loop.py's
start events), named by the identities of the ops around it (diff/align.py's Identities: op, site, group's ranks, peer),
the interval's kind and its occurrence in the rank's step; its name ("file.py:40 → file.py:52") is the critical
path's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ...data.table import EventTable, gc_paused
from ..engine import run
from ..core import jit, saved_analysis
from .align import Identities, Ops, ops_of
from .timing import per_step_unions
from ..core.matching import ends_kept, finished
from ..core.results import Analysis
from ..waits.peers import occurrences


@dataclass
class StepSpans:
    """A step's compute spans (its timeline's start events `ev`), each with its rank, the identities of the op
    before it and of its own (Identities'; -1: none before), its host interval's kind, its occurrence, its name
    (an id of the diff's span names) and its measured length (`gap`)."""

    ev: np.ndarray
    rank: np.ndarray
    before: np.ndarray
    ident: np.ndarray
    kind: np.ndarray
    occ: np.ndarray
    name: np.ndarray
    gap: np.ndarray

    def key(self) -> list[np.ndarray]:
        """The columns that say which span of which rank it is, in either run."""
        return [self.rank, self.before, self.ident, self.kind, self.occ]


class Side:
    """A run analysed for a diff: its Analysis, and its replay and pacing (None where it has no steps to replay)."""

    def __init__(self, label: str, table: EventTable, results: dict) -> None:
        self.label = label
        self.table = table
        self.analysis: Analysis = Analysis(**{f.name: results[f.name] for f in fields(Analysis)})
        self.replay = results.get("replay")
        self.pacing = results.get("pacing")
        self.walker = results.get("walker")
        self.ks: list[int] = list(self.replay.windows) if self.replay is not None else []
        n = len(table)
        comm = self.pacing._ops.comm if self.pacing is not None else None  # (causal/attribution.py's: no public name yet)
        self.comm = comm if comm is not None else np.zeros(n, np.int64)
        # each op's end (matching.finished: its end, else its wait()'s return), as the replay reads it
        self.fin = (np.frombuffer(self.walker.fin, np.int64) if self.walker is not None else
                    np.frombuffer(finished(table), np.int64))
        # what ops() and spans() made, for one diff at a time (its Identities, its ident_of_row and span names: a
        # Side compared again, with another run, numbers its ops and names its spans anew)
        self._ops: dict = {}
        self._ops_for: Identities | None = None
        self._spans: dict[int, StepSpans] = {}
        self._spans_for: tuple = (None, None)

    def comm_spans(self, keys: list, ops: Ops, ks: list[int]) -> dict:
        """key -> per step of ks, the time its ops (keys: one per row of `ops`) communicated, each instant once:
        the union of their intervals from the last arrival each needed to its end."""
        fin, comm = self.fin[ops.rows], self.comm[ops.rows]
        return per_step_unions(keys, ops.step, fin - comm, fin, ks)

    @property
    def step_of(self) -> np.ndarray:
        """Each row's step, as the replay numbers them: without steps, the whole run is step 0."""
        if self.analysis.steps:
            return np.frombuffer(self.analysis.step_of, np.int32)
        return np.zeros(len(self.table), np.int32)

    def length(self, k: int) -> int:
        """Step k's measured length (the replay's, which an unchanged replay gives back)."""
        return int(self.replay.timeline(k)[4] or 0)

    def lengths(self, ks: list[int] | None = None) -> list[int]:
        return [self.length(k) for k in (self.ks if ks is None else ks)]

    def site_of(self, full: str) -> str:
        return self.walker.site_of(full) if self.walker is not None else (full.partition(" in ")[0] or "?")

    def ops(self, names: Identities, ks: list[int]) -> Ops:
        if names is not self._ops_for:
            self._ops, self._ops_for = {}, names
        key = tuple(ks)
        got = self._ops.get(key)
        if got is None:
            got = self._ops[key] = ops_of(self.table, self.step_of, ks, self.site_of, names)
        return got

    def spans(self, k: int, ident_of_row: np.ndarray, span_names: dict[str, int]) -> StepSpans:
        """Step k's compute spans, keyed by the identities ident_of_row (per row); names through span_names (a
        name -> id map both runs share)."""
        made_for = self._spans_for
        if made_for[0] is not ident_of_row or made_for[1] is not span_names:
            self._spans, self._spans_for = {}, (ident_of_row, span_names)
        got = self._spans.get(k)
        if got is not None:
            return got
        events, ranks, _, _, _, gap, prev = self.replay.timeline(k)
        _, is_end, slot, h = events
        _, _, hrow, hkind, _ = self.walker.columns
        ev = np.flatnonzero(np.asarray(is_end) == 0)
        rank = np.asarray(ranks)[np.asarray(slot)[ev]]
        row = np.asarray(hrow)[np.asarray(h)[ev]]
        before = np.asarray(prev)[ev]
        kind = np.asarray(hkind)[np.asarray(h)[ev]].astype(np.int64)
        ident = ident_of_row[row]
        ident_before = np.where(before >= 0, ident_of_row[np.maximum(before, 0)], -1)
        occ = occurrences(rank, ident_before, ident, kind) if len(ev) else np.zeros(0, np.int64)
        name = np.array([span_names.setdefault(self.walker.span(int(x), int(y)), len(span_names))
                         for x, y in zip(before.tolist(), row.tolist())], np.int64)
        got = self._spans[k] = StepSpans(ev, rank, ident_before, ident, kind, occ, name,
                                         np.asarray(gap)[ev].astype(np.int64))
        return got


def analysed(table: EventTable, label: str) -> Side:
    """The run's analysis made stage by stage as run.analyze makes it (without what-ifs asked for), every
    result kept: the diff re-times the replay the attribution made. The Analysis is saved beside the trace's store
    as analyze would save it, so that a later view or report of the run opens it."""
    results: dict = {"table": table, "progress": None, "changes": ()}
    with gc_paused(), ends_kept(table):
        jit.warm(len(table))
        for stage in run.STAGES:
            out = stage.run(*(results[name] for name in stage.reads))
            if len(stage.adds) == 1:
                results[stage.adds[0]] = out
            elif stage.adds:
                results.update(zip(stage.adds, out))
        side = Side(label, table, results)
    if table.origin is not None:
        saved_analysis.save(side.analysis)
    return side


__all__ = ["Side", "StepSpans", "analysed"]
