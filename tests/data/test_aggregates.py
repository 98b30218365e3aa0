"""The black box's aggregates reader (data/importers/aggregates.py) on hand-built .agg files: rows into columns,
windows aligned to rank 0's clock, keys named alike on every rank, and its damage said in one line each."""

from __future__ import annotations

import os

import pytest

from agg_files import MS, row, simulate, window_row, write_rank
from disttrace.tracer.data.load import read_aggregates
from disttrace.tracer.format import AGG_MAGIC, AGG_SUFFIX


def test_rows_into_columns(tmp_path):
    d = str(tmp_path)
    for r, off in ((0, 0), (1, 7 * MS)):
        write_rank(d, r, 2, [row(0, 1, 3, 30 * MS, 12 * MS, 3 << 22), row(0, 2, 3, 3 * MS, MS, 12),
                             window_row(0, 100 * MS, 200 * MS, 6, first=1, last=10),
                             row(1, 1, 2, 20 * MS, 11 * MS, 2 << 22),
                             window_row(1, 200 * MS, 290 * MS, 2, first=11, last=20, lost=True)], offset_ns=off)
    a = read_aggregates(d)
    assert a.ranks == [0, 1] and a.window_by == "steps" and a.window_every == 10 and not a.damage
    assert a.w_rank.tolist() == [0, 0, 1, 1] and a.w_index.tolist() == [0, 1, 0, 1]
    # rank 1's clock is 7 ms behind rank 0's: its windows aligned by its offset, as its ops are
    assert a.w_start.tolist() == [100 * MS, 200 * MS, 107 * MS, 207 * MS]
    assert a.w_first_step.tolist() == [1, 11, 1, 11] and a.w_last_step.tolist() == [10, 20, 10, 20]
    assert a.w_ops.tolist() == [6, 2, 6, 2] and a.w_lost.tolist() == [False, True, False, True]
    keys = [(k.group, k.group_ranks, k.op, k.lo, k.hi) for k in a.keys]
    assert keys == [("world", (0, 1), "all_reduce", 4 << 20, 8 << 20), ("world", (0, 1), "all_reduce", 4, 8)]
    grad = [i for i in range(len(a.cell_key)) if a.cell_key[i] == 0]
    assert a.cell_window[grad].tolist() == [0, 1, 2, 3] and a.cell_count[grad].tolist() == [3, 2, 3, 2]
    assert a.cell_total[grad].tolist() == [30 * MS, 20 * MS] * 2 and a.cell_max[grad].tolist() == [12 * MS, 11 * MS] * 2


def test_a_window_written_twice_is_merged(tmp_path):
    """A partial window flushed (at exit, say) and then the rest: ops summed, the max kept, the span widened."""
    write_rank(str(tmp_path), 0, 1, [row(0, 1, 2, 10 * MS, 6 * MS, 8), window_row(0, 100, 150, 2, first=1, last=4),
                                     row(0, 1, 1, 9 * MS, 9 * MS, 4), window_row(0, 150, 200, 1, first=5, last=6)])
    a = read_aggregates(str(tmp_path))
    assert (a.w_start.tolist(), a.w_end.tolist(), a.w_ops.tolist()) == ([100], [200], [3])
    assert (a.w_first_step.tolist(), a.w_last_step.tolist()) == ([1], [6])
    assert (a.cell_count.tolist(), a.cell_total.tolist(), a.cell_max.tolist(), a.cell_bytes.tolist()) == \
        ([3], [19 * MS], [9 * MS], [12])


def test_no_agg_files_is_not_a_black_box_trace(tmp_path):
    simulate(str(tmp_path), world=2, steps=20)
    for name in os.listdir(tmp_path):
        if name.endswith(AGG_SUFFIX):
            os.remove(tmp_path / name)
    assert read_aggregates(str(tmp_path)) is None


@pytest.mark.parametrize("damage, said", [
    ("cut", "its last row is cut (20 of 48 bytes): dropped"),
    ("magic", "not an aggregates file"),
    ("key", "2 row(s) of key(s) 7 that no aggkey record defines: dropped"),
    ("alone", "no rank file beside it (left out)"),
    ("no window", "1 key row(s) of window(s) with no window row: dropped"),
])
def test_damage_is_one_line_never_a_traceback(tmp_path, damage, said):
    d = str(tmp_path)
    good = [row(0, 1, 3, 30 * MS, 12 * MS, 3 << 22), window_row(0, 0, 100 * MS, 3, first=1, last=10)]
    write_rank(d, 0, 2, good)
    rows = list(good)
    if damage == "key":
        rows += [row(0, 7, 1, MS, MS, 4), row(1, 7, 1, MS, MS, 4)]
    if damage == "no window":
        rows.append(row(5, 1, 1, MS, MS, 4))
    stem = write_rank(d, 1, 2, rows, magic=b"NOTANAGG" if damage == "magic" else AGG_MAGIC)
    if damage == "cut":
        with open(stem + AGG_SUFFIX, "ab") as f:
            f.write(bytes(20))
    if damage == "alone":
        os.rename(stem + AGG_SUFFIX, os.path.join(d, "rank-00009-node-9.agg"))
    a = read_aggregates(d)
    assert len(a.damage) == 1 and said in a.damage[0] and "\n" not in a.damage[0], a.damage
    # what is whole is read all the same
    assert 0 in a.ranks and a.cell_count[a.w_rank[a.cell_window] == 0].tolist() == [3]


def test_a_malformed_key_definition_is_damage_not_a_traceback(tmp_path):
    write_rank(str(tmp_path), 0, 2, [row(0, 1, 1, MS, MS, 4), window_row(0, 0, MS, 1, first=1, last=10)],
               keys={1: ("all_reduce", "4", 8)})
    a = read_aggregates(str(tmp_path))
    assert a.damage == ["rank-00000-node-1000.agg: 1 row(s) of key(s) 1 that no aggkey record defines: dropped"]
    assert a.w_ops.tolist() == [1] and not len(a.cell_key)
