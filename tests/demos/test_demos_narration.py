"""Narrations written from synthetic traces (no torchrun): the text quotes the events' own values."""

from __future__ import annotations

import json

from disttrace.demos.narrate_collectives import all_reduce, reduce_scatter
from disttrace.demos.narrate_common import DemoRun, show, show_summary
from disttrace.tracer.units import fmt_ns_prose as ms
from disttrace.tracer.data.table import EventTable
from disttrace.tui.model.narration import load_narration


def _table(events: list[dict]) -> EventTable:
    t = EventTable()
    for i, ev in enumerate(events):
        t.append({"group": "0", "group_ranks": [0, 1], "dtype": "float32", "id": ev.pop("id", 0),
                  "start_ns": 1000 * (i + 1), "end_ns": 1000 * (i + 1) + 500, **ev})
    t.sort()
    return t


def _summary(values):
    flat = [x for v in values for x in (v if isinstance(v, list) else [v])]
    return {"numel": len(flat), "min": min(flat), "max": max(flat), "values": values}


def _reduce_scatter_table() -> EventTable:
    """The first example of the reduce-scatter demo: 2 ranks, [-1, 5, 2, 2] and [3, -3, 4, 1]."""
    return _table([
        {"rank": 0, "op": "reduce_scatter", "group_seq": 0, "in": _summary([-1.0, 5.0, 2.0, 2.0]),
         "out": _summary([2.0, 2.0])},
        {"rank": 1, "op": "reduce_scatter", "group_seq": 0, "in": _summary([3.0, -3.0, 4.0, 1.0]),
         "out": _summary([6.0, 3.0])},
    ])


def test_reduce_scatter_narration_uses_the_recorded_values(tmp_path):
    t = _reduce_scatter_table()
    data = reduce_scatter(DemoRun("reduce-scatter", tmp_path, t, 2, "gloo"))
    assert json.loads((tmp_path / "narration.json").read_text()) == data
    texts = {s["match"]["rank"]: s["text"] for s in data["steps"] if "rank" in s["match"]}
    assert "sends slice 1 [2, 2] to rank 1, and receives [3, -3] from rank 1" in texts[0]
    assert "[-1, 5] + [3, -3] = [2, 2]" in texts[0]
    assert "[2, 2] + [4, 1] = [6, 3]" in texts[1]
    # The viewer's reader finds the step of each event, and the summary at the last one.
    narration = load_narration([str(tmp_path)])
    assert narration.text_for(t, 0).startswith("The first example: rank 0")
    assert narration.text_for(t, 1).endswith(data["summary"])


def test_all_reduce_narration_says_what_was_recorded_even_when_it_is_wrong(tmp_path):
    # A broken backend that returns the wrong sum on rank 1: the narration reports the recorded value, not the
    # expected one.
    t = _table([
        {"rank": 0, "op": "all_reduce", "group_seq": 0, "in": _summary([1.0, 2.0]), "out": _summary([4.0, 6.0])},
        {"rank": 1, "op": "all_reduce", "group_seq": 0, "in": _summary([3.0, 4.0]), "out": _summary([4.0, 7.0])},
    ])
    data = all_reduce(DemoRun("all-reduce", tmp_path, t, 2, "gloo"))
    texts = {s["match"]["rank"]: s["text"] for s in data["steps"] if "rank" in s["match"]}
    assert "leaves with [4, 6]" in texts[0] and "leaves with [4, 7]" in texts[1]
    assert "[1, 2] + [3, 4]" in texts[1]


def test_formatting():
    assert show([12.0, 15.0, 18.0]) == "[12, 15, 18]"
    assert show([[0.000123456, -2.5]]) == "[[0.0001235, -2.5]]"
    assert show_summary({"numel": 4096, "min": 0.5, "max": 1100.0}) == "4,096 values (min 0.5, max 1100)"
    assert show_summary(None) == "nothing"
    assert (ms(999), ms(1_500_000), ms(2_000_000_000)) == ("1 µs", "1.5 ms", "2.00 s")


def test_the_narrations_name_no_seed_nor_lecture(tmp_path):
    """What a learner reads says what happened, not which course material the numbers come from."""
    import re

    text = json.dumps(reduce_scatter(DemoRun("reduce-scatter", tmp_path, _reduce_scatter_table(), 2, "gloo")))
    assert not re.search(r"\bseeds?\b|lecture|homework", text, re.I), text
