"""Steps found without markers where the ops repeat inside a step (steps.py): a step over identical layers (many
all-reduces of one size, then an odd one), and steps of identical ops told apart by the time between them, or said
to be ambiguous. Synthetic traces with exact times (the real jobs: tests/jobs/verdict_identical_*.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from disttrace.tracer.analysis import to_json
from disttrace.tracer.analysis.waits.steps import _step_starts
from synthetic import MS, Trace

US = MS // 1000


def layers(steps: int = 12, ops: int = 50, odd: bool = True, forward_ms: float = 0.0, late: dict | None = None,
           seed: int = 0) -> Trace:
    """Two ranks of data parallelism: each step a forward (`forward_ms` of compute, none: back-to-back ops), then
    `ops` all-reduces from one line (one helper), all of 1 KB but the last, the loss, of 4 KB where `odd`; rank 1
    sleeps late[k] ms at the start of step k. Each op takes 100 µs after its last arrival, and a rank issues the
    next one 20-40 µs after (Python's time between two calls)."""
    late = late or {}
    rnd = random.Random(seed)
    tr = Trace(2)
    clock = [0, 0]
    for k in range(steps):
        clock = [c + int(forward_ms * MS) + rnd.randrange(20 * US, 40 * US) for c in clock]
        clock[1] += int(late.get(k, 0) * MS)
        for i in range(ops):
            end = max(clock) + 100 * US
            nbytes = 4096 if odd and i == ops - 1 else 1024
            tr.coll("all_reduce", {0: clock[0], 1: clock[1]}, end, nbytes=nbytes, site="train.py:12 in average")
            clock = [end + rnd.randrange(20 * US, 40 * US) for _ in clock]
    return tr


def test_a_period_that_leaves_out_the_odd_op_is_not_the_step():
    # 49 all-reduces of one size, then the loss: the unit of one op repeats 49 times in a row, but not the loss;
    # the step is the unit of 50 that holds it once (the ops alone: the loss's size is the mark)
    keys = ([1] * 49 + [2]) * 10
    assert _step_starts(np.array(keys), [1] * len(keys)) == list(range(0, 500, 50))
    # an op left out once (an evaluation, a checkpoint) belongs to the step before: the period stays
    keys = [1, 2, 3] * 40 + [9] + [1, 2, 3] * 40
    assert _step_starts(np.array(keys), keys) == list(range(0, 120, 3)) + list(range(121, 241, 3))
    # two runs of one size each: the unit holds both
    keys = ([1] * 40 + [2] * 40) * 6
    assert _step_starts(np.array(keys), keys) == list(range(0, 480, 80))


def test_a_step_over_identical_layers_is_found_and_its_straggler_named():
    a = layers(late=dict.fromkeys(range(8, 12), 40)).analyze()
    assert a.steps_source == "detected" and len(a.steps) == 12 and not a.notes
    assert [s.index for s in a.steps if s.late_rank == 1] == [8, 9, 10, 11]
    v = a.straggler
    assert v is not None and v.rank == 1 and v.steps == [8, 9, 10, 11], v
    assert v.delay_cost_ns == pytest.approx(4 * 40 * MS, rel=0.05)


def test_identical_ops_are_cut_into_steps_where_the_gaps_recur():
    # every op the same: the forward's 5 ms between the steps' ops (20-40 µs apart) marks each step
    a = layers(odd=False, forward_ms=5, late=dict.fromkeys(range(8, 12), 40)).analyze()
    assert len(a.steps) == 12 and not a.notes
    assert all(sum(1 for k in a.step_of if k == s.index) == 100 for s in a.steps)  # 50 ops a step on each rank
    v = a.straggler
    assert v is not None and v.rank == 1 and v.steps == [8, 9, 10, 11], v


def test_identical_ops_with_no_gap_to_tell_their_steps_are_said_to_be_ambiguous():
    # back-to-back identical ops, rank 1 late from step 6: no gap pattern on rank 0, and rank 1's late starts alone
    # (a quarter of its steps) are no step's compute: each op is taken as a step, and the report says so
    a = layers(steps=8, ops=25, odd=False, late=dict.fromkeys(range(6, 8), 40)).analyze()
    assert len(a.steps) == 200
    (note,) = [n for n in a.notes if "ambiguous" in n]
    assert "on ranks 0, 1:" in note and "mark_step()" in note
    assert note in to_json(a)["summary"]["notes"]
    assert a.straggler is None or a.straggler.rank == 1


def test_a_straggler_every_few_one_op_steps_is_not_read_as_a_step_boundary():
    # one all-reduce a step (DDP with one bucket) after 5 ms of compute, rank 1 late by 60 ms every 4th step: its
    # long gaps recur every 4 ops, on that rank alone; the steps stay one op each (the gaps do not agree)
    a = layers(steps=16, ops=1, odd=False, forward_ms=5, late=dict.fromkeys((3, 7, 11, 15), 60)).analyze()
    assert len(a.steps) == 16
    v = a.straggler
    assert v is not None and v.rank == 1 and v.steps == [3, 7, 11, 15] and v.period == 4, v
