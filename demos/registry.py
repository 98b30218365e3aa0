"""The demos `disttrace demo` knows: name, program, one line for --list, process counts, narration.

A demo is a program in demos/programs/ (a plain torch.distributed script a learner can read and run with
torchrun) and a narration function that writes narration.json from the recorded trace. Its line in the list says
what the program shows in a newcomer's words (where its numbers come from, a book, a lecture or a post, is in
docs/TEACHING.md and the program's docstring, not there).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PROGRAMS = Path(__file__).resolve().parent / "programs"


@dataclass(frozen=True)
class Demo:
    name: str
    program: str                   # file in demos/programs/
    summary: str                   # one line for --list
    nproc: int                     # default number of ranks (the worked example's where there is one)
    nproc_ok: Callable[[int], bool] = lambda n: 2 <= n <= 8
    nproc_rule: str = "2 to 8"
    narrate: str = ""              # "module:function" in disttrace.demos, called with a DemoRun
    size_help: str | None = None   # what --size means for this demo; None: --size does not apply
    size_per_rank: bool = False    # --size must split evenly over the ranks
    summaries: str = "full"        # tensor summaries recorded: "off" where the demo times megabyte-sized calls
    memory_step: int | None = None  # recorded with `disttrace run --memory --memory-step K` (the demos whose
    #                                 narration measures memory; K: a step after the optimizer's first, whose state
    #                                 exists then: the first steady step is the analysis' choice, timing-dependent)
    section: str = ""

    @property
    def path(self) -> Path:
        return PROGRAMS / self.program

    def narrator(self):
        module, func = self.narrate.split(":")
        return getattr(importlib.import_module(f"disttrace.demos.{module}"), func)


def _powers_of_two_to(limit: int):
    return lambda n: n in {2, 4, 8} and n <= limit


_C = "collectives"
_A = "algorithms and puzzlers"
_P = "parallelism"
_X = "when things go wrong"

DEMOS: dict[str, Demo] = {d.name: d for d in [
    Demo("broadcast", "broadcast.py", "rank 0's [1, 2, 3] copied to every rank", 3,
         narrate="narrate_collectives:broadcast", section=_C),
    Demo("reduce", "reduce.py", "[1,2,3] + [4,5,6] + [7,8,9] summed onto rank 0: [12, 15, 18]", 3,
         narrate="narrate_collectives:reduce", section=_C),
    Demo("all-reduce", "all_reduce.py", "the same sum, [12, 15, 18], on every rank - start here", 3,
         narrate="narrate_collectives:all_reduce", section=_C),
    Demo("gather", "gather.py", "[1,2], [3,4], [5,6] collected on rank 0", 3,
         narrate="narrate_collectives:gather", section=_C),
    Demo("all-gather", "all_gather.py", "[1,2], [3,4], [5,6] collected on every rank", 3,
         narrate="narrate_collectives:all_gather", section=_C),
    Demo("scatter", "scatter.py", "rank 0's [1..6] split, piece i to rank i", 3,
         narrate="narrate_collectives:scatter", section=_C),
    Demo("reduce-scatter", "reduce_scatter.py", "sum, then rank i keeps slice i: [2, 2] and [6, 3]",
         2, narrate="narrate_collectives:reduce_scatter", section=_C),
    Demo("all-to-all", "all_to_all.py", "piece j of every rank goes to rank j: a transpose across ranks", 3,
         narrate="narrate_collectives:all_to_all", section=_C),
    Demo("barrier", "barrier.py", "ranks arrive 200 ms apart and leave together", 3,
         narrate="narrate_collectives:barrier", section=_C),
    Demo("send-recv", "send_recv.py", "point to point: [1, 2, 3] to rank 1 and [11, 12, 13] back", 2,
         narrate="narrate_collectives:send_recv", section=_C),
    Demo("ring-allreduce", "ring_allreduce.py",
         "all-reduce by hand with isend/irecv: reduce-scatter then all-gather, 2(N-1) steps", 3,
         narrate="narrate_algorithms:ring_allreduce", size_help="values per rank, a multiple of N (default 2N)",
         size_per_rank=True,
         section=_A),
    Demo("allreduce-three-ways", "allreduce_three_ways.py",
         "all_reduce vs reduce+broadcast vs reduce_scatter+all_gather, timed side by side", 2,
         narrate="narrate_algorithms:three_ways", size_help="values per tensor (default 2**20, the puzzler's)",
         size_per_rank=True, summaries="off",
         section=_A),
    Demo("p2p-bandwidth", "p2p_bandwidth.py", "copies from rank 0 to each other rank, GB/s per link", 3,
         narrate="narrate_algorithms:p2p_bandwidth",
         size_help="fp32 values per tensor, 10 tensors per link (default 10**6 on gloo, 10**7 on NCCL)",
         summaries="off",
         section=_A),
    Demo("data-parallel", "data_parallel.py",
         "a model copied on every rank, its gradients averaged by all-reduce (DDP)", 2,
         nproc_ok=_powers_of_two_to(8), nproc_rule="2, 4 or 8 (the batch of 8 splits evenly)",
         narrate="narrate_parallel:data_parallel", section=_P),
    Demo("tensor-parallel", "tensor_parallel.py",
         "an MLP's weights split by columns: all-gather forward, all-reduce backward", 2,
         nproc_ok=_powers_of_two_to(4), nproc_rule="2 or 4 (the 4 columns split evenly)",
         narrate="narrate_parallel:tensor_parallel", section=_P),
    Demo("pipeline-parallel", "pipeline_parallel.py",
         "layers split into stages: GPipe and 1F1B drawn as a schedule grid, their bubbles compared", 2,
         nproc_ok=_powers_of_two_to(4), nproc_rule="2 or 4 (the 4 layers split evenly)",
         narrate="narrate_parallel:pipeline_parallel", section=_P),
    Demo("zero1", "zero1.py", "ZeRO-1: each rank keeps 1/N of the optimizer's state; the memory saved, measured", 2,
         nproc_ok=_powers_of_two_to(8), nproc_rule="2, 4 or 8 (the parameters split evenly)",
         narrate="narrate_parallel:zero1", memory_step=1, section=_P),
    Demo("fsdp2", "fsdp2.py",
         "ZeRO-3 (FSDP2's fully_shard): parameters, gradients and optimizer state all 1/N a rank, measured", 2,
         nproc_ok=_powers_of_two_to(8), nproc_rule="2, 4 or 8 (the 64 rows split evenly)",
         narrate="narrate_parallel:fsdp2", memory_step=1, section=_P),
    Demo("straggler", "straggler.py", "one rank is 300 ms late; the others wait in the all-reduce", 3,
         narrate="narrate_problems:straggler", section=_X),
    Demo("hang", "hang.py", "one rank never arrives; the others wait until a 2 s timeout", 2,
         narrate="narrate_problems:hang", section=_X),
]}

START_HERE = "all-reduce"
