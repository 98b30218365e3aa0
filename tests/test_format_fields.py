"""The record's fields have one home, tracer/format.py: the writer's templates (record/op_records.py) write only
its fields, and both readers of rank files (the careful one, data/importers/rank_files.py, and the fast one's
structs, rank_batches.py) and of events files (event_batches.py's struct, the table's known keys) read exactly
them. A new field is added to format.py, and this test says which reader or writer does not know it yet."""

from __future__ import annotations

import msgspec
import orjson
import pytest

from disttrace.tracer import format as fmt
from disttrace.tracer.data.importers import event_batches, rank_batches, rank_files
from disttrace.tracer.data.table import EventTable
from disttrace.tracer.data.table.event_table import KNOWN_KEYS


def struct_keys(struct) -> set[str]:
    """The JSON keys a msgspec struct decodes (its fields' encoded names)."""
    return {f.encode_name for f in msgspec.structs.fields(struct)}


@pytest.mark.parametrize("struct, fields", [(rank_batches._Begin, fmt.BEGIN_FIELDS),
                                            (rank_batches._End, fmt.END_FIELDS),
                                            (rank_batches._Wait, fmt.WAIT_FIELDS)])
def test_the_fast_readers_structs_hold_the_records_fields(struct, fields):
    assert struct_keys(struct) == set(fields)


def test_the_fast_reader_tells_records_apart_by_the_formats_prefix():
    assert set(rank_batches._PREFIX) == {fmt.record_prefix(k) for k in (fmt.BEGIN, fmt.END, fmt.WAIT)}
    assert all(len(p) == rank_batches._PREFIX_LEN for p in rank_batches._PREFIX)


def test_the_events_readers_know_the_events_fields():
    assert struct_keys(event_batches._Event) == set(fmt.EVENT_FIELDS)
    assert KNOWN_KEYS == frozenset(fmt.EVENT_FIELDS)


def test_a_rows_keys_are_the_events_fields():
    table = EventTable()
    table.append({"rank": 0, "op": "send", "start_ns": 1, "end_ns": 2, "group": "0", "group_ranks": [0, 1],
                  "peer": 1})
    assert set(table.row(0)) <= set(fmt.EVENT_FIELDS)


def _every_field_records() -> list[bytes]:
    """A rank file's op records with every field of the format's lists set (a send, and an all_reduce)."""
    begin = {"k": "b", "i": 1, "op": "send", "t": 10, "api": "isend", "g": 0, "gs": 1, "ps": 4, "root": 0, "peer": 1,
             "tag": 3, "bytes": 8, "dtype": "float32", "shape": [2], "async": True, "site": "train.py:1",
             "origin": "funcol.x", "th": 7, "in": {"n": 2}}
    end = {"k": "e", "i": 1, "t": 20, "seq": 5, "st": "error", "err": "RuntimeError: x", "peer": 1,
           "out": {"n": 2}, "bound": True, "dev": 9}
    wait = {"k": "w", "i": 1, "t0": 12, "t1": 18}
    assert (tuple(begin), tuple(end), tuple(wait)) == (fmt.BEGIN_FIELDS, fmt.END_FIELDS, fmt.WAIT_FIELDS)
    return [orjson.dumps(r) for r in (begin, end, wait)]


def test_the_careful_and_the_fast_reader_read_every_field_alike():
    """Every field of the lists decoded by the fast reader (its structs forbid unknown keys: a field it lacks
    fails the decode) and read into the same row by the careful one."""
    begins, ends, waits, other = rank_batches.split(_every_field_records())
    assert not other and rank_batches.decode(begins, ends, waits) is not None
    b, e = orjson.loads(begins[0]), orjson.loads(ends[0])
    extra = rank_files._extra(b, e)
    typed_b, typed_e, _ = rank_batches.decode(begins, ends, waits)
    assert extra == rank_batches._extra(typed_b[0], typed_e[1])
    assert set(extra) == set(fmt.BEGIN_EXTRA) | {"end_is_bound", "device_ns"}


def test_the_writers_templates_write_only_the_formats_fields():
    """The records record/op_records.py writes, every optional key on: their keys are the format's."""
    pytest.importorskip("torch")
    from disttrace.tracer.record import op_records as w

    class Spec:
        op = "send"

    class Group:
        gidx = 0

        @staticmethod
        def global_rank(r: int) -> int:
            return r

    spec, group = Spec(), Group()
    key = (spec, "isend", "funcol.x", "train.py:1", group, 0, 1, 3, "torch.float32", (2,), False, True, -1)
    head, _, _, pair = w.BeginHeads().make(key, 8, {})
    assert pair is not None  # (a send to a known peer: numbered)
    begin = orjson.loads(w.BEGIN_LINE_GS_IN % (head, 1, 2, b',"in":{}', 10))
    begin.update(orjson.loads(w.BEGIN_LINE_PS_IN % (head, 1, 2, b',"in":{}', 10)))  # (a P2P op's: "ps")
    end = orjson.loads(w.END_LINE_SEQ_DEV % (1, 20, 5, 9))
    wait = orjson.loads(w.WAIT_LINE % (1, 12, 18))
    ended = w.end_fields(1, 20, 5, RuntimeError("x"), True, 9)
    assert set(begin) == set(fmt.BEGIN_FIELDS)
    assert set(end) | set(ended) <= set(fmt.END_FIELDS)
    assert set(wait) == set(fmt.WAIT_FIELDS)
