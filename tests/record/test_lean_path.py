"""fastpath.py's lean path, without a job: its synchronous ops are in the hang watchdog's sight until their wait()
returns (Completion.in_flight_items), their end records are the general path's (Completion.lean_end), and the black
box's aggregates count them at their end. The lean path's records beside the general path's, in a real job:
test_record_paths.py (summaries off)."""

from __future__ import annotations

import orjson

from disttrace.tracer.record.aggregates import Aggregates
from disttrace.tracer.record.completion import Completion, Event


class _Rec:
    def __init__(self):
        self.lines = []
        self.raw = self.write_raw = self.lines.append

    def write(self, obj):
        self.lines.append(orjson.dumps(obj) + b"\n")


def _entry(i, seq=7, slot=None, start=100):
    return ("all_reduce", "group", 3, start, 1, i, seq, slot)  # op, group, group_seq, start, thread, id, seq, slot


def test_a_lean_synchronous_op_is_in_flight_until_its_end():
    c = Completion(_Rec(), {}, None)
    ev = Event(1, False, "group")
    ev.info = ("broadcast", "group", 2, 50, 1)
    c.in_flight[1] = ev.info
    c.lean_sync[12345] = _entry(2)  # (by its Work's id, as fastpath.py puts it)
    assert sorted(c.in_flight_items()) == [(1, ev.info), (2, ("all_reduce", "group", 3, 100, 1))]
    c.lean_sync.pop(12345)  # the wait returned (hooks.py's Work.wait)
    assert c.in_flight_items() == [(1, ev.info)]


def test_a_lean_end_is_the_general_paths_end_record():
    rec = _Rec()
    c = Completion(rec, {}, None)
    c.lean_end(_entry(2, seq=7), 500)
    c.lean_end(_entry(3, seq=None), 600)  # the black box reads no sequence number
    c.lean_end(_entry(4, seq=9), 700, RuntimeError("boom"))
    general = Completion(_Rec(), {}, None)
    ev = Event(2, True, "group")
    ev.seq = 7
    general.complete(ev, None, 500)
    assert rec.lines[0] == general.rec.lines[0] == b'{"k":"e","i":2,"t":500,"seq":7}\n'
    assert rec.lines[1] == b'{"k":"e","i":3,"t":600}\n'
    assert orjson.loads(rec.lines[2]) == {"k": "e", "i": 4, "t": 700, "seq": 9, "st": "error",
                                          "err": "RuntimeError: boom"}


def test_the_black_box_counts_a_lean_op_at_its_end(tmp_path):
    agg = Aggregates(str(tmp_path / "r.agg"), lambda rec: None, "steps", 10, 10.0)
    c = Completion(_Rec(), {}, None, agg)
    slot = agg.slot(0, "all_reduce", 4096)
    c.lean_end(_entry(2, slot=slot, start=agg.start + 100), agg.start + 350)
    ev = Event(3, False, "group")  # an async op (an Event): counted where it completes
    ev.info, ev.agg = ("all_reduce", "group", 4, agg.start + 400, 1), slot
    c.complete(ev, None, agg.start + 900)
    assert agg.acc == {slot[0]: [2, 250 + 500, 500, 2 * 4096]}
