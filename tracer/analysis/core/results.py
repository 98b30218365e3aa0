"""The results of the analysis, shared by `disttrace report` and the viewer: dataclasses, and CollectiveInstance,
a view of the analysis' CollectiveTable (core/tables.py).

This is a contract: the viewer (tui/) reads these fields, `to_json` turns them into the report's --json
keys. Add fields freely; do not rename or remove them. Event indices (`events`, `send`, `recv`, ...) are
row numbers in the EventTable the analysis was run on. Times are integer ns on the aligned timeline.

A field is in the --json as its plain form (text/json_report.py: a dataclass as a dict of its fields, a rank-keyed dict with
string keys in rank order) unless its metadata says otherwise: `NOT_IN_JSON` (the table, event-row indexes: the
viewer's) or `JSON_IF_SET` (left out when empty).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from types import MappingProxyType
from math import isnan, nan
from typing import TYPE_CHECKING

from ...data.table import NONE, EventTable

if TYPE_CHECKING:
    from .tables import CollectiveTable, P2PTable

NOT_IN_JSON = MappingProxyType({"json": "no"})      # field metadata: the --json leaves the field out
JSON_IF_SET = MappingProxyType({"json": "if set"})  # ... leaves it out when it is empty (falsy)

# Wait-state kinds of collectives (Scalasca's patterns, in PyTorch's words; a message's Late Sender and Late Receiver
# waits are P2PMatch's late_sender_ns and late_receiver_ns)
WAIT_NXN = "wait_at_nxn"            # all_reduce, all_gather, reduce_scatter, all_to_all: latest start - own start
WAIT_BARRIER = "wait_at_barrier"    # barrier: latest start - own start
LATE_BROADCAST = "late_broadcast"   # broadcast/scatter: root start - own start, when positive (non-roots wait)
EARLY_REDUCE = "early_reduce"       # reduce/gather: the root waits for the latest sender


class CollectiveInstance:
    """One collective matched across the ranks of its group by (group, group_seq): a view of row k of the
    analysis' CollectiveTable (core/tables.py), made on demand. Fields read (and model_ns / slow write) its columns.

    What each rank did is read as dicts keyed by rank (`events`, `start_ns`, `end_ns`, `wait_ns`) or as arrays in
    arrival order (`ranks`, `rows`, `starts`, `ends`, `waits`); both are made on each access: loops over every
    instance read the table's columns instead."""

    __slots__ = ("_t", "_k", "__weakref__")  # weakref: the table hands out one view per instance at a time

    def __init__(self, table, k: int):
        self._t = table
        self._k = k

    def __eq__(self, other) -> bool:
        return isinstance(other, CollectiveInstance) and self._t is other._t and self._k == other._k

    def __hash__(self) -> int:
        return hash((id(self._t), self._k))

    def __repr__(self) -> str:
        return f"CollectiveInstance({self.op} #{self.group_seq} of group {self.gid}, ranks {list(self.ranks)})"

    @property
    def op(self) -> str:
        return self._t.op[self._k]

    @property
    def gid(self) -> int:
        """Index into EventTable.groups."""
        return self._t.gid[self._k]

    @property
    def group_ranks(self) -> tuple[int, ...]:
        return self._t.events.groups[self._t.gid[self._k]].ranks

    @property
    def group_seq(self) -> int:
        return self._t.group_seq[self._k]

    @property
    def bytes(self) -> int:
        """Per-rank input size (nccl-tests' S is derived from it per op)."""
        return self._t.bytes[self._k]

    @property
    def wait_kind(self) -> str:
        return self._t.wait_kind[self._k]

    @property
    def skew_ns(self) -> int:
        """Latest start - earliest start."""
        return self._t.skew_ns[self._k]

    @property
    def duration_ns(self) -> int | None:
        """Completion: latest end - latest start (the part after everyone arrived); None if incomplete."""
        d = self._t.duration_ns[self._k]
        return None if d == NULL else d

    @property
    def algbw_gbps(self) -> float | None:
        return _optional(self._t.algbw_gbps[self._k])

    @property
    def busbw_gbps(self) -> float | None:
        return _optional(self._t.busbw_gbps[self._k])

    @property
    def model_ns(self) -> float | None:
        """Alpha-beta model time for this op and size."""
        return _optional(self._t.model_ns[self._k])

    @model_ns.setter
    def model_ns(self, v: float | None) -> None:
        self._t.model_ns[self._k] = nan if v is None else v

    @property
    def slow(self) -> bool:
        """Far slower than the model."""
        return bool(self._t.slow[self._k])

    @slow.setter
    def slow(self, v: bool) -> None:
        self._t.slow[self._k] = bool(v)

    @property
    def root(self) -> int | None:
        r = self._t.root[self._k]
        return None if r == NONE else r

    @property
    def complete(self) -> bool:
        """Every rank of the group entered and finished it."""
        return bool(self._t.complete[self._k])

    @property
    def last_arrival(self) -> int:
        """The rank that arrived last (the one others waited for)."""
        return self._t.last_arrival[self._k]

    @property
    def volume_bytes(self) -> int:
        """Bytes each rank must move (ring algorithms): nccl-tests' busbw factor x S."""
        return self._t.volume_bytes[self._k]

    @property
    def missing(self) -> tuple[int, ...]:
        """Group ranks that never entered it."""
        return self._t.missing.get(self._k, ())

    @property
    def ranks(self) -> array:
        return self._t.ranks_of(self._k)

    @property
    def rows(self) -> array:
        return self._t.rows_of(self._k)

    @property
    def starts(self) -> array:
        return self._t.starts_of(self._k)

    @property
    def ends(self) -> array:
        """Ends, NONE where a rank never finished (an async op's end is when its wait() returned)."""
        return self._t.ends_of(self._k)

    @property
    def waits(self) -> array:
        """Wait caused by late arrivals (pattern of wait_kind), per rank."""
        return self._t.waits_of(self._k)

    @property
    def per_rank(self) -> array:
        """ranks, rows, starts, ends and waits: five runs of equal length, in arrival (table) order."""
        return self.ranks + array("q", self.rows) + self.starts + self.ends + self.waits

    @property
    def events(self) -> dict[int, int]:
        """rank -> event row, for the ranks that entered it."""
        return dict(zip(self.ranks, self.rows))

    @property
    def start_ns(self) -> dict[int, int]:
        return dict(zip(self.ranks, self.starts))

    @property
    def end_ns(self) -> dict[int, int | None]:
        """rank -> end (None: never finished)."""
        return {r: None if e == NONE else e for r, e in zip(self.ranks, self.ends)}

    @property
    def wait_ns(self) -> dict[int, int]:
        """rank -> wait caused by late arrivals (pattern of wait_kind)."""
        return dict(zip(self.ranks, self.waits))

    def row_of(self, rank: int) -> int | None:
        """The event row of `rank` in this instance, or None."""
        ranks = self.ranks
        return self.rows[ranks.index(rank)] if rank in ranks else None

    def wait_of(self, rank: int) -> int:
        ranks = self.ranks
        return self.waits[ranks.index(rank)] if rank in ranks else 0


NULL = -(1 << 63)  # None in the integer columns whose values may be negative (a duration across skewed clocks)


def _optional(v: float) -> float | None:
    return None if isnan(v) else v


@dataclass(slots=True)
class P2PMatch:
    """A send matched with its recv by (src, dst, order). One side may be missing (unmatched)."""

    src: int
    dst: int
    order: int                     # index of this message among src->dst messages
    send: int | None               # event row of the send, or None
    recv: int | None               # event row of the recv, or None
    bytes: int
    late_sender_ns: int            # recv posted before the send started: receiver's wait
    late_receiver_ns: int          # send started before the recv was posted: sender's wait
    transfer_ns: int | None        # from the later of the two starts to the earlier of the two ends... see analysis


@dataclass
class Link:
    """Point-to-point traffic from src to dst (the communication matrix)."""

    src: int
    dst: int
    bytes: int
    messages: int
    transfer_ns: int
    gbps: float | None


@dataclass
class Problem:
    """Something a person must act on: kind is hang, mismatch, divergence, unmatched, clock, error (an op raised),
    died (a rank's trace ends while the others went on), nonfinite (NaN/Inf in an op's input) or leak (memory
    growing at every steady step: analysis/memory/leaks.py, added by `report` for a trace recorded with --memory)."""

    kind: str
    op: str | None
    group_ranks: tuple[int, ...]
    group_seq: int | None
    ranks: list[int]
    message: str
    events: list[int] = field(default_factory=list)  # rows to jump to in the viewer
    time_ns: int | None = None
    # hang: rank -> "file:line in function" from its stacks
    where: dict[int, str] = field(default_factory=dict, metadata=JSON_IF_SET)
    step: int | None = None        # the training step it happened in (the latest of its events'), None: none


@dataclass
class StageStats:
    rank: int
    stage: int
    window_ns: int
    blocked_ns: int
    bubble_fraction: float
    compute_ns: int = 0            # time in the windows outside communication (window - time in its ops)


@dataclass
class PipelineStats:
    stages: list[int]              # ranks in stage order
    micro_batches: int             # per iteration
    bubble_fraction: float
    expected_fraction: float       # (P-1)/(vM+P-1), M the micro-batches of one iteration, v the virtual stages
    per_stage: list[StageStats]
    iterations: int = 1            # pipeline iterations (training steps) the micro-batches were counted over
    slow_stage: int | None = None  # the stage whose compute sets the pace (causal/attribution.py's kind "stage"), or None
    slow_factor: float = 1.0       # its compute over the median of the other stages'
    # every pipeline's ranks in stage order (DP x PP: many); the viewer's and the straggler verdict's, not the --json's
    pipelines: list[list[int]] = field(default_factory=list, metadata=NOT_IN_JSON)
    # per stage, its ranks over the pipeline's replicas (data x pipeline parallel: one rank of each replica)
    stage_ranks: list[list[int]] = field(default_factory=list)
    virtual_stages: int = 1        # stages each rank holds (interleaved 1F1B: v, its ring of P ranks passed v times)
    # the schedule read from the trace (pipeline/schedule.py; docs/FORMAT.md, "pipeline"). Per iteration of each pipeline:
    # [pipeline, iteration, schedule, micro_batches, start_ns, end_ns, startup_ns, bubble, expected, ideal_bubble,
    # ideal, warmup]: its bubble from its first forward to its last backward, the start-up waits (startup_ns) apart;
    # warmup: one of the first iterations, unlike the steady ones (the steps' rule, waits/steps.py)
    schedule_iterations: list[tuple[int, int, str, int, int, int, int, float, float, float, int, bool]] = field(
        default_factory=list)
    # the mean of the steady iterations' bubbles (the warm-up ones left out; bubble_fraction: blocked over the
    # windows)
    schedule_fraction: float = 0.0
    # every forward and backward: [iteration, rank, stage, "F" or "B", micro_batch, start_ns, end_ns, estimated]
    schedule: list[tuple[int, int, int, str, int, int, int, bool]] = field(default_factory=list)
    # per iteration and rank, its idle ns in the iteration's span: [iteration, rank, warmup, cooldown, blocked with
    # the stage before, with the stage after, other, the most micro-batches in flight]
    stage_idle: list[tuple[int, int, int, int, int, int, int, int]] = field(default_factory=list)
    # the textbook grids (`ideal` of an iteration): [stage row, stage, "F" or "B", micro_batch, start_ns, end_ns]
    ideal_schedules: list[list[tuple[int, int, str, int, int, int]]] = field(default_factory=list)
    schedule_note: str = ""        # iterations not read as a schedule, and why
    # the start-up waits cut from the iterations' spans: [pipeline, iteration, start_ns, end_ns]
    schedule_startup: list[tuple[int, int, int, int]] = field(default_factory=list)


@dataclass
class AlphaBeta:
    """Latency-bandwidth model t = alpha + beta * bytes, fitted per op from the trace's own messages."""

    op: str
    alpha_ns: float
    beta_ns_per_byte: float
    samples: int


@dataclass
class Straggler:
    rank: int
    delay_cost_ns: int             # waiting this rank caused others
    late_count: int                # collectives where it arrived last


@dataclass
class Step:
    """One training iteration (waits/steps.py): user-marked, or found as the repeating sequence of ops on each rank."""

    index: int
    start_ns: int                  # the earliest rank's start: the end of its op before the step's first one
    end_ns: int                    # the latest rank's end of its last op of the step
    wait_ns: dict[int, int]        # rank -> time it waited for peers in this step
    caused_ns: dict[int, int]      # rank -> waiting it caused the others in this step
    late_rank: int | None          # the rank the others waited for most, None when nobody waited significantly
    warmup: bool = False           # one of the first steps, unlike the steady ones (longer, or other ops); or outside
    # before a black-box trace's window (core/window.py): no rank's ring holds it whole; kept out of everything as a
    # warm-up step is (its number is the job's: the list stays indexed by step)
    outside: bool = field(default=False, metadata=JSON_IF_SET)


@dataclass
class PathPart:
    """A stretch of a step's critical path (causal/critical_path.py): a rank computing (its span: the sites of the ops
    around it), communicating in an op, or waiting in one for a cause the trace does not show."""

    rank: int
    kind: str                      # "compute", "comm" or "wait"
    ns: int
    start_ns: int
    span: str | None = field(default=None, metadata=JSON_IF_SET)  # compute: "train.py:40 → train.py:52"
    op: str | None = field(default=None, metadata=JSON_IF_SET)    # comm, wait: "all_reduce world #3"
    # the event it is shown at: the op communicated or waited in, or the op a compute span ended at (-1: none)
    row: int = field(default=-1, metadata=NOT_IN_JSON)


@dataclass
class CriticalPath:
    """The longest chain of compute and communication through a step, across ranks; its parts add up to it."""

    index: int                     # the step (0: the whole trace, when no steps were found)
    length_ns: int
    parts: list[PathPart]          # in time order


@dataclass
class DelayCause:
    """A root cause of waiting: what ran on the path while ranks waited (a rank's compute span, or an op)."""

    rank: int
    kind: str                      # "compute", "comm" or "wait" (a wait whose own cause is not in the trace)
    span: str                      # the compute span, or the op
    caused_wait_ns: int
    ranks_delayed: list[int]
    # a rank's start-up ("start → its first op's site"), kept apart from the steady steps' causes (listed after
    # them): the waiting it caused, and startup_ns, the time from the trace's first op to the rank's first
    startup: bool = field(default=False, metadata=JSON_IF_SET)
    startup_ns: int = field(default=0, metadata=JSON_IF_SET)


@dataclass
class WhatIf:
    """A change, its steps replayed with it (causal/what_if.py): the mean steady step measured and predicted."""

    change: str                    # "rank 1 at its peers' pace", "the spans ending at train.py:52 50% faster", ...
    step_ns_before: int
    step_ns_after: int | None      # None: it cannot be predicted (the note says why)
    steps: int                     # the steps replayed (a sample of the steady ones when they are very many)
    note: str = field(default="", metadata=JSON_IF_SET)  # why the change could not be re-timed, if so
    # step index -> (measured, predicted) length of each step replayed (the viewer's, per step)
    per_step: dict[int, tuple[int, int]] = field(default_factory=dict, metadata=NOT_IN_JSON)


@dataclass
class Attribution:
    """Why the steps are slower than they could be (causal/attribution.py, docs/ANALYSIS.md "Peers, the ideal step, and
    attribution"): the steps replayed with every compute span and op at its typical duration (the ideal step), and
    the share of the slowdown each candidate removes, put on pace alone."""

    kind: str = "none"             # "worker" (one rank), "stage" (every rank of a pipeline stage), "spread"
    #                                (different ranks in different steps) or "none" (nothing beyond the noise)
    slowdown: float = 1.0          # the mean measured step over the mean ideal one
    step_ns: int = 0               # the mean measured step, over the steps replayed
    ideal_step_ns: int = 0         # ... replayed with every span and op at its typical duration
    rank: int | None = None        # the worker, for kind "worker"
    stage: int | None = None       # the stage, for kind "stage"
    # the share of (measured - ideal) removed by putting each candidate on pace, the others as measured: a rank at
    # its peers' pace, a stage at the typical other stage's, an op kind at its typical duration, a compute span at
    # its typical on every rank (candidates whose excess is within the noise are not replayed: not listed)
    ranks: dict[int, float] = field(default_factory=dict)
    stages: dict[int, float] = field(default_factory=dict)
    ops: dict[str, float] = field(default_factory=dict)
    spans: dict[str, float] = field(default_factory=dict)
    steps: int = 0                 # the steady steps replayed (a seeded sample when there are very many)
    roles: str = ""                # the peers found: "the ranks of each pipeline stage (...)"
    reason: str = ""               # why the kind, in a sentence
    note: str = field(default="", metadata=JSON_IF_SET)  # steps sampled, candidates left out


@dataclass
class Overlap:
    """A rank's communication and how much of it ran while the rank computed, as far as the trace proves it
    (causal/overlap.py)."""

    rank: int
    comm_ns: int                   # the union of its ops' communication: from the arrival needed to the end
    overlapped_ns: int             # ...of which the host went on calling ops and was not blocked in one


@dataclass
class StragglerVerdict:
    """The rank whose late arrivals cost the others significantly more than the job's own jitter."""

    rank: int
    delay_cost_ns: int             # the waiting it caused the others, in all (warm-up excluded when there are steps)
    steps: list[int]               # the steps it was significantly late in (empty: no steps were found)
    period: int | None             # it was late every `period` steps
    site: str | None               # "previous op's site → arrival site" of its costliest late arrival
    from_site: str | None          # the site of its op before that arrival
    to_site: str | None            # the site of that arrival
    per_step_ns: int               # delay cost per step it was late in (per late collective without steps)
    noise_ns: int                  # the threshold a step's cost had to pass: the job's own jitter
    late_count: int                # the steps (without steps: collectives and messages) it was late in
    share: float                   # its share of all the waiting caused
    # which of its spans between those two sites a step it was (0: the first): where one line issues several ops a
    # step (a gradient hook's all-reduce per bucket), the span before the first is not the one between two of them
    site_nth: int | None = None
    # the steps it was late in by far less than in those (under MINOR of the next larger, and together under
    # MINOR_SHARE of its cost: stragglers.split_minor), and its cost per such step: said apart, not in `steps`
    minor_steps: list[int] = field(default_factory=list)
    minor_ns: int = 0


@dataclass
class Analysis:
    """What analyze() returns, built by keyword from its stages' results (run.STAGES). The order of the fields is the
    order of the --json's keys (after its "summary", which holds the table's counts, span_ns and notes). A new
    field takes a default, its empty value, which run.pending_analysis (the viewer's stand-in) then keeps; an
    array indexed by event row has none and is made there, at the table's length."""

    table: EventTable = field(metadata=NOT_IN_JSON)
    collectives: CollectiveTable   # reads like a list of CollectiveInstance
    instance_of: array = field(metadata=NOT_IN_JSON)  # event row -> index in collectives, or -1 (array of "i")
    waits: dict[int, int]          # rank -> total wait ns
    stragglers: list[Straggler]    # worst first
    links: list[Link]
    p2p: P2PTable                  # reads like a list of P2PMatch
    p2p_of: array = field(metadata=NOT_IN_JSON)  # event row -> index in p2p, or -1 (array of "i")
    # event row -> the time it waited for a late peer (ns, 0: none; array of "q"): the waiting part the viewer draws
    event_wait_ns: array = field(metadata=NOT_IN_JSON)
    pipeline: PipelineStats | None
    problems: list[Problem]
    models: dict[str, AlphaBeta]
    span_ns: tuple[int, int] = (0, 0)  # earliest start, latest end of the trace
    notes: list[str] = field(default_factory=list)  # things worth saying that are not problems
    steps: list[Step] = field(default_factory=list)
    # event row -> step index, or -1 (outside steps)
    step_of: array = field(default_factory=lambda: array("i"), metadata=NOT_IN_JSON)
    steps_source: str = ""         # "marker" (the user's), "detected" (repeating ops), "" (none found)
    straggler: StragglerVerdict | None = None
    critical_path: list[CriticalPath] = field(default_factory=list)  # per step
    # the root causes of the steady steps' waits, worst first; then each rank's start-up (`startup`), apart
    causes: list[DelayCause] = field(default_factory=list)
    what_if: list[WhatIf] = field(default_factory=list)
    attribution: Attribution = field(default_factory=Attribution)
    overlap: list[Overlap] = field(default_factory=list)              # per rank
    # event row -> the ns of it that overlapped its rank's compute (array of "q"; 0 for a synchronous op)
    event_overlap_ns: array = field(default_factory=lambda: array("q"), metadata=NOT_IN_JSON)
