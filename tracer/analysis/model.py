"""The results of the analysis: plain dataclasses shared by `disttrace report` and the viewer.

This is a contract: the viewer (tui/) reads these fields, `to_json` turns them into the report's --json
keys. Add fields freely; do not rename or remove them. Event indices (`events`, `send`, `recv`, ...) are
row numbers in the EventTable the analysis was run on. Times are integer ns on the aligned timeline.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from ..events import NONE, EventTable

# Wait-state kinds (Scalasca's patterns, in PyTorch's words)
WAIT_NXN = "wait_at_nxn"            # all_reduce, all_gather, reduce_scatter, all_to_all: latest start - own start
WAIT_BARRIER = "wait_at_barrier"    # barrier: latest start - own start
LATE_BROADCAST = "late_broadcast"   # broadcast/scatter: root start - own start, when positive (non-roots wait)
EARLY_REDUCE = "early_reduce"       # reduce/gather: the root waits for the latest sender
LATE_SENDER = "late_sender"         # recv posted before its send started: the receiver waits
LATE_RECEIVER = "late_receiver"     # send started before its recv was posted: the sender waits


@dataclass(slots=True)  # slots: a 1M-event trace makes ~10^5 of these
class CollectiveInstance:
    """One collective matched across the ranks of its group by (group, group_seq).

    What each rank did is read as dicts keyed by rank (`events`, `start_ns`, `end_ns`, `wait_ns`: made on each
    access) or as arrays in arrival order (`ranks`, `rows`, `starts`, `ends`, `waits`: slices, for loops over
    every instance). Both come from `per_rank`: four dicts per instance were most of a big trace's analysis."""

    op: str
    gid: int                       # index into EventTable.groups
    group_ranks: tuple[int, ...]
    group_seq: int
    per_rank: array                # ranks that entered it, then their rows, starts, ends (NONE: never finished)
                                   # and waits: five runs of equal length, in arrival (table) order
    bytes: int                     # per-rank input size (nccl-tests' S is derived from it per op)
    wait_kind: str
    skew_ns: int                   # latest start - earliest start
    duration_ns: int | None        # completion: latest end - latest start (the part after everyone arrived)
    algbw_gbps: float | None
    busbw_gbps: float | None
    model_ns: float | None = None  # alpha-beta model time for this op and size
    slow: bool = False             # far slower than the model
    root: int | None = None
    complete: bool = True          # every rank of the group entered and finished it
    last_arrival: int | None = None  # the rank that arrived last (the one others waited for)
    volume_bytes: int = 0          # bytes each rank must move (ring algorithms): nccl-tests' busbw factor x S
    missing: tuple[int, ...] = ()  # group ranks that never entered it

    def _run(self, k: int) -> array:
        n = len(self.per_rank) // 5
        return self.per_rank[k * n:(k + 1) * n]

    @property
    def ranks(self) -> array:
        return self._run(0)

    @property
    def rows(self) -> array:
        return self._run(1)

    @property
    def starts(self) -> array:
        return self._run(2)

    @property
    def ends(self) -> array:
        """Ends, NONE where a rank never finished (an async op's end is when its wait() returned)."""
        return self._run(3)

    @property
    def waits(self) -> array:
        """Wait caused by late arrivals (pattern of wait_kind), per rank."""
        return self._run(4)

    @property
    def events(self) -> dict[int, int]:
        """rank -> event row, for the ranks that entered it."""
        return dict(zip(self._run(0), self._run(1)))

    @property
    def start_ns(self) -> dict[int, int]:
        return dict(zip(self._run(0), self._run(2)))

    @property
    def end_ns(self) -> dict[int, int | None]:
        """rank -> end (None: never finished)."""
        return {r: None if e == NONE else e for r, e in zip(self._run(0), self._run(3))}

    @property
    def wait_ns(self) -> dict[int, int]:
        """rank -> wait caused by late arrivals (pattern of wait_kind)."""
        return dict(zip(self._run(0), self._run(4)))

    def row_of(self, rank: int) -> int | None:
        """The event row of `rank` in this instance, or None."""
        ranks = self._run(0)
        return self._run(1)[ranks.index(rank)] if rank in ranks else None

    def wait_of(self, rank: int) -> int:
        ranks = self._run(0)
        return self._run(4)[ranks.index(rank)] if rank in ranks else 0


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
    """Something a person must act on: kind is hang, mismatch, divergence, unmatched or clock."""

    kind: str
    op: str | None
    group_ranks: tuple[int, ...]
    group_seq: int | None
    ranks: list[int]
    message: str
    events: list[int] = field(default_factory=list)  # rows to jump to in the viewer
    time_ns: int | None = None


@dataclass
class StageStats:
    rank: int
    stage: int
    window_ns: int
    blocked_ns: int
    bubble_fraction: float


@dataclass
class PipelineStats:
    stages: list[int]              # ranks in stage order
    micro_batches: int
    bubble_fraction: float
    expected_fraction: float       # (P-1)/(M+P-1)
    per_stage: list[StageStats]


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
class Analysis:
    table: EventTable
    collectives: list[CollectiveInstance]
    instance_of: array             # event row -> index in collectives, or -1 (array of "i")
    p2p: list[P2PMatch]
    p2p_of: array                  # event row -> index in p2p, or -1 (array of "i")
    waits: dict[int, int]          # rank -> total wait ns
    stragglers: list[Straggler]    # worst first
    links: list[Link]
    pipeline: PipelineStats | None
    problems: list[Problem]
    models: dict[str, AlphaBeta]
    span_ns: tuple[int, int] = (0, 0)  # earliest start, latest end of the trace
    notes: list[str] = field(default_factory=list)  # things worth saying that are not problems
