"""The memory analysis' results (analysis/memory/): what `report`, `report --json` ("memory") and the viewer read.

Bytes are ints; kinds are format.MEM_KINDS' names ("params", "grads", "optimizer", "activations", "temporaries",
"comm"). A rank's sample series (`t_ns`, `total`) is there for a timeline to draw as it is (not in the JSON: the
per-step series is)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.results import JSON_IF_SET, NOT_IN_JSON, Problem


@dataclass
class StepMemory:
    """One rank's bytes in one step: at its start (its first sample), its peak, its end (its last sample)."""

    step: int
    start_ns: int                  # the rank's window of the step (steps.py), on the trace's timeline
    end_ns: int
    start_bytes: int
    peak_bytes: int
    end_bytes: int
    peak_ns: int
    end_by_kind: dict[str, int]    # the bytes at the step's end, by kind (what a leak grows)
    warmup: bool = False


@dataclass
class RankMemory:
    """One rank: the chosen step's breakdown by kind (its fields as `report --json` names them), the per-step
    series, and the samples."""

    rank: int
    params_bytes: int              # params, grads, optimizer: the most the step's samples held
    grads_bytes: int
    optimizer_bytes: int
    activations_peak_bytes: int    # activations, temporaries, comm: their most in the step
    temporaries_peak_bytes: int
    comm_buffers_peak_bytes: int
    outside_allocator_bytes: int | None  # the process's RSS (CUDA: the device's used memory) less what the tracker
    #                                      (CUDA: the caching allocator) holds, at the step's last sample with it
    peak_bytes: int                # the step's peak, all kinds
    peak_by_kind: dict[str, int]   # at that peak
    peak_op: str | None            # the op that reached it ("aten.mm") and the user's line
    peak_site: str | None
    peak_ns: int
    steps: list[StepMemory] = field(default_factory=list)
    predicted: dict[str, int] = field(default_factory=dict, metadata=JSON_IF_SET)  # the formula's, by kind
    t_ns: np.ndarray | None = field(default=None, metadata=NOT_IN_JSON)    # every sample's time
    total: np.ndarray | None = field(default=None, metadata=NOT_IN_JSON)   # ... and bytes held, all kinds


@dataclass
class Formula:
    """What the parameters', gradients' and optimizer state's bytes should be (formula.py; docs/ANALYSIS.md)."""

    scheme: str                    # "ddp", "zero1" (ZeroRedundancyOptimizer, or master copies 1/N of Ψ: a
    #                                hand-written one), "fsdp2" (fully_shard), "replicated"
    #                                (an optimizer, no wrapper found), "unknown"
    psi: int                       # Ψ: the model's parameters (values)
    k: float                       # K: the optimizer state's bytes per parameter value
    n: int                         # N: the sharding (or data-parallel) group's size
    bytes_per_value: dict[str, float]  # "params", "grads": bytes per value, from the dtypes found
    expression: str                # the formula with its numbers: "(4 + 4 + 8)Ψ"
    predicted: dict[int, dict[str, int]]  # rank -> kind -> bytes
    even_optimizer_bytes: int | None = None  # ZeRO-1: KΨ/N, beside its own partition's prediction
    unrecognized: list[str] = field(default_factory=list)  # what the formula could not account for
    notes: list[str] = field(default_factory=list)         # what makes measured and predicted differ


@dataclass
class KindCheck:
    """Predicted against measured for one rank and kind."""

    rank: int
    kind: str
    predicted: int
    measured: int
    ratio: float                   # measured / predicted


@dataclass
class Imbalance:
    """A rank holding more of a kind than the others (breakdown.py's rule)."""

    rank: int
    kind: str
    bytes: int
    typical_bytes: int             # the median of the ranks


@dataclass
class MemoryReport:
    step: int | None               # the step of the breakdown (None: no steps: the whole trace)
    step_chosen: str               # "first steady", "--memory-step", "whole trace"
    ranks: dict[int, RankMemory]
    formula: Formula | None
    checks: list[KindCheck] = field(default_factory=list)
    imbalance: list[Imbalance] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list, metadata=NOT_IN_JSON)  # leaks: the report's problems
    kinds: tuple[str, ...] = field(default=(), metadata=NOT_IN_JSON)
