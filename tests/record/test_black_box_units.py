"""The black box's arithmetic, without a job: the ring's wrap (record/ring.py, read back by
data/importers/ring.py), the aggregates' rows (record/aggregates.py), the snapshots' bound, the options."""

from __future__ import annotations

import os
import struct

import orjson
import pytest

from disttrace.tracer.data.importers.ring import read_ring
from disttrace.tracer.format import (AGG_DATA_AT, AGG_DAY_BUDGET, AGG_MAGIC, AGG_ROW, AGG_WINDOW_KEY, AGGKEY,
                                     RING_DATA_AT, RING_HEADER, RING_MAGIC, SNAPSHOT_INFO)
from disttrace.tracer import blackbox_files as snapshot_files
from disttrace.tracer.record import snapshots
from disttrace.tracer.record.aggregates import LOST, Aggregates, size_bucket
from disttrace.tracer.blackbox_files import Config
from disttrace.tracer.record.ring import Ring, ring_size


def _line(n: int, width: int = 100) -> bytes:
    body = b'{"k":"w","i":%d,"pad":"' % n
    return body + b"x" * (width - len(body) - 3) + b'"}\n'


def test_ring_size_is_n_times_512_rounded_up_to_64_kib():
    assert ring_size(200) == 128 << 10  # 200 x 512 = 100 KiB, plus the header
    assert ring_size(4000) == 2 << 20  # the default: 2 MB a rank
    assert ring_size(1) == 64 << 10


def test_ring_wraps_in_place_and_reads_back_its_last_lines_in_order(tmp_path):
    path = tmp_path / "r.ring"
    ring = Ring(str(path), ring_size(1))
    size = os.path.getsize(path)
    for n in range(2000):  # 200 KB of lines through a 64 KiB ring: three wraps and more
        ring.write_raw(_line(n))
    ring.close()
    assert os.path.getsize(path) == size  # fixed: never grows
    magic, pos, wraps, hsize = struct.unpack_from(RING_HEADER, path.read_bytes())
    per_lap = (size - RING_DATA_AT) // 100
    assert (magic, hsize, wraps) == (RING_MAGIC, size, (2000 - 1) // per_lap)
    assert pos == RING_DATA_AT + 100 * (2000 - wraps * per_lap)
    ids = [orjson.loads(line)["i"] for line in read_ring(path)]
    # the newest line last; every line of the last lap and of the older one after pos, in order, none torn
    assert ids[-1] == 1999 and ids == list(range(ids[0], 2000))
    assert len(ids) >= per_lap - 2


def test_ring_reader_drops_the_line_torn_by_the_wrap(tmp_path):
    path = tmp_path / "r.ring"
    ring = Ring(str(path), ring_size(1))
    for n in range(654):  # (64 KiB - the header) // 100: the data is full but for 72 bytes
        ring.write_raw(_line(n, 100))
    ring.write_raw(_line(654, 250))  # does not fit before the end: wraps, overwriting 2.5 lines' worth
    ring.close()
    lines = read_ring(path)
    ids = [orjson.loads(line)["i"] for line in lines]  # all parse: the torn one was left out
    assert ids[-1] == 654 and ids[:-1] == list(range(ids[0], 654))
    assert ids[0] == 3  # lines 0 and 1 overwritten, line 2 torn


def test_ring_without_a_wrap_holds_everything(tmp_path):
    ring = Ring(str(tmp_path / "r.ring"), ring_size(1))
    for n in range(10):
        ring.write_raw(_line(n))
    ring.write({"k": "step", "t": 5, "n": 1, "src": "api"})
    ring.close()
    lines = read_ring(tmp_path / "r.ring")
    assert len(lines) == 11 and orjson.loads(lines[-1])["k"] == "step"


def test_not_a_ring_has_no_lines(tmp_path):
    (tmp_path / "x.ring").write_bytes(b"\0" * 100)
    assert read_ring(tmp_path / "x.ring") == []


# -- the aggregates ----------------------------------------------------------------------------------------------
def _rows(path) -> list[tuple]:
    data = path.read_bytes()
    assert data[:8] == AGG_MAGIC
    return [struct.unpack_from(AGG_ROW, data, at) for at in range(AGG_DATA_AT, len(data), 48)]


def _agg(tmp_path, by="steps", every=2, **kw):
    keys = []
    agg = Aggregates(str(tmp_path / "r.agg"), keys.append, by, every, float(every), **kw)
    return agg, keys


def test_size_buckets_are_powers_of_two():
    assert [size_bucket(n) for n in (0, 1, 3, 4, 4095, 4096)] == [(0, 1), (1, 2), (2, 4), (4, 8), (2048, 4096),
                                                                 (4096, 8192)]


def test_aggregate_rows_per_window_of_steps(tmp_path):
    agg, keys = _agg(tmp_path, every=2)
    slots = {"all_reduce": agg.slot(0, "all_reduce", 4096), "broadcast": agg.slot(0, "broadcast", 100)}
    assert agg.slot(0, "all_reduce", 5000) == (0, 5000)  # the same bucket: the same key, its own bytes
    t = agg.start + 1_000
    for step in range(1, 5):  # 4 steps: two windows of 2 steps
        for k in range(3):  # two 4 KiB all-reduces and a 100-byte broadcast a step
            agg.add(slots["broadcast" if k == 2 else "all_reduce"], t, t + 50 * (k + 1))
            t += 1000
        agg.step(step, t)
        if step == 3:
            agg.tick(now=t)  # written in two parts
    agg.finish()
    assert keys == [{"k": AGGKEY, "id": 0, "g": 0, "op": "all_reduce", "lo": 4096, "hi": 8192},
                    {"k": AGGKEY, "id": 1, "g": 0, "op": "broadcast", "lo": 64, "hi": 128}]
    rows = _rows(tmp_path / "r.agg")
    assert len(rows) == 2 * 3  # 2 windows x (2 keys + the window's own row)
    w0 = [r for r in rows if r[0] == 0]
    by_key = {r[1]: r for r in w0}
    # window, key, flags, count, pad, total, max, bytes, end
    assert by_key[0][3:8] == (4, 0, 4 * 75, 100, 4 * 4096)
    assert by_key[1][3:8] == (2, 0, 2 * 150, 150, 200)
    win = by_key[AGG_WINDOW_KEY]
    assert (win[2], win[3], win[6], win[7]) == (0, 6, 2, 1)  # flags, ops, last step, first step
    assert win[8] == by_key[0][8] and win[8] > win[5]  # the window ends at step 2's marker, after it began
    assert os.path.getsize(tmp_path / "r.agg") == AGG_DATA_AT + 48 * len(rows)


@pytest.mark.parametrize("step_ms, width", [(1.0, 1280), (14.0, 160), (100.0, 20), (200.0, 10)])
def test_windows_of_short_steps_widen_to_keep_to_the_day_budget(tmp_path, step_ms, width):
    """A job of 10 keys (11 rows a window) whose steps last step_ms, for 4,000 steps. Windows of 10 steps of 1 ms
    would write 11 rows every 10 ms, 4.6 GB a day. With nothing allowed before (allowance 0), at the first window's
    close `every` doubles until windows of it at that pace keep to 80% of AGG_DAY_BUDGET: the least 10 x 2^k steps
    of at least 528 B x 86,400 s / 40 MB = 1.14 s. The next window ends at a multiple of it (nested in a narrower
    rank's windows), then every one lasts it. With the default allowance (256 KB written first), these 400 windows
    of 10 steps (211 KB) keep their width: a short run keeps the resolution asked for."""
    def run(agg):
        slots = [agg.slot(0, "all_reduce", 1 << k) for k in range(10)]
        t = agg.start
        for step in range(1, 4001):
            for slot in slots:
                agg.add(slot, t, t + 1000)
            t += int(step_ms * 1e6)
            agg.step(step, t)
            if step % 50 == 0:
                agg.tick(now=t)
        agg.finish()

    (tmp_path / "short").mkdir()
    short, _ = _agg(tmp_path / "short", every=10)
    run(short)
    assert short.every == 10 and len(_rows(tmp_path / "short" / "r.agg")) == 400 * 11
    agg, _ = _agg(tmp_path, every=10, allowance=0)
    run(agg)
    wins = [r for r in _rows(tmp_path / "r.agg") if r[1] == AGG_WINDOW_KEY]
    first, last = [w[7] for w in wins], [w[6] for w in wins]
    assert first[0] == 1 and last[-1] == 4000 and all(f == lo + 1 for lo, f in zip(last, first[1:]))
    assert agg.every == width and last[0] == 10 and all(n % width == 0 for n in last[1:-1]), last
    assert all(b - a + 1 == width for a, b in zip(first[2:-1], last[2:-1])), list(zip(first, last))
    day = 11 * 48 * 86_400e9 / (width * step_ms * 1e6)
    assert day <= 0.8 * AGG_DAY_BUDGET and (width == 10 or 2 * day > 0.8 * AGG_DAY_BUDGET), day


def test_an_op_counts_in_the_window_where_it_ended(tmp_path):
    agg, _ = _agg(tmp_path, every=1)
    t = agg.start
    slot = agg.slot(0, "all_reduce", 4096)
    agg.step(1, t + 1500)  # (its begin at t + 1000, before the marker)
    agg.add(slot, t + 1000, t + 2000)
    agg.step(2, t + 2500)
    agg.finish()
    rows = _rows(tmp_path / "r.agg")
    wins = [r for r in rows if r[1] == AGG_WINDOW_KEY]
    assert [w[3] for w in wins] == [0, 1]
    assert [r[0] for r in rows if r[1] == 0] == [1] and [r[5] for r in rows if r[1] == 0] == [1000]


def test_windows_of_seconds_where_the_job_marks_no_steps(tmp_path):
    agg, _ = _agg(tmp_path, by="steps", every=1)  # no marker: every second
    start = agg.start
    slot = agg.slot(0, "all_reduce", 4096)
    for k in range(5):  # an op every 0.4 s: windows [0, 1), [1, 2) s hold 3 and 2 of them (ends at +0.1 s)
        t = start + k * 400_000_000
        agg.add(slot, t, t + 100_000_000)
    agg.tick(now=start + 2_100_000_000)  # closes [1, 2) s ([0, 1) s closed by the op that ended past it)
    agg.tick(now=start + 2_200_000_000)  # writes both
    rows = _rows(tmp_path / "r.agg")
    wins = [r for r in rows if r[1] == AGG_WINDOW_KEY]
    assert [(w[3], w[5] - start, w[8] - start, w[6], w[7]) for w in wins] == [
        (3, 0, 1_000_000_000, -1, -1), (2, 1_000_000_000, 2_000_000_000, -1, -1)]
    assert [(r[0], r[3]) for r in rows if r[1] == 0] == [(0, 3), (1, 2)]  # the key's rows, window by window


def test_a_closed_window_is_written_a_tick_later_with_an_end_that_took_it_just_before(tmp_path):
    """An op's end on another thread that took the window's rows just before a step marker closed it lands in
    them after the close: the watchdog writes a window one tick after it closed, not at once."""
    agg, _ = _agg(tmp_path, every=1)
    t = agg.start
    slot = agg.slot(0, "all_reduce", 4096)
    agg.add(slot, t, t + 10)
    late = agg.acc  # what that other thread holds
    agg.step(1, t + 100)
    late[slot[0]][0] += 1  # its update, after the swap
    agg.tick(now=t + 200)
    assert _rows(tmp_path / "r.agg") == []  # closed since the last tick: not yet
    agg.tick(now=t + 300)
    rows = _rows(tmp_path / "r.agg")
    assert [r[3] for r in rows if r[1] == 0] == [2]


def test_more_keys_than_a_row_names_are_counted_in_the_window_and_flagged(tmp_path, monkeypatch):
    monkeypatch.setattr("disttrace.tracer.record.aggregates.AGG_WINDOW_KEY", 1)
    agg, keys = _agg(tmp_path, every=1)
    t = agg.start
    agg.add(agg.slot(0, "all_reduce", 4096), t, t + 10)
    agg.add(agg.slot(0, "broadcast", 4096), t, t + 10)  # the second key: no id left
    agg.step(1, t + 100)
    agg.finish()
    win = [r for r in _rows(tmp_path / "r.agg") if r[1] == 1][0]  # (the window's own row: key 1 here)
    assert len(keys) == 1 and win[2] & LOST and win[3] == 2


# -- snapshots: bounded, private -------------------------------------------------------------------------------
def test_snapshots_keep_the_last_k_of_a_ranks_files(tmp_path):
    for seq in range(1, 6):
        info = {"seq": seq, "reason": "signal", "by_rank": 0, "wall_ns": seq}
        snapshot_files.write_snapshot(str(tmp_path), info, {"/x/rank-00000-h-1.ring": b"r%d" % seq}, keep=3)
    root = tmp_path / "snapshots"
    assert sorted(os.listdir(root)) == ["000003-signal", "000004-signal", "000005-signal"]
    assert (root / "000005-signal" / "rank-00000-h-1.ring").read_bytes() == b"r5"
    assert orjson.loads((root / "000005-signal" / SNAPSHOT_INFO).read_bytes())["seq"] == 5
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    assert oct((root / "000005-signal" / "rank-00000-h-1.ring").stat().st_mode & 0o777) == "0o600"


def test_a_request_file_of_another_user_is_not_honoured(tmp_path):
    req = tmp_path / ".snapshot-request"
    req.write_bytes(b"{}")
    assert snapshots.claim_request(str(tmp_path), 0) and not req.exists()
    assert not snapshots.claim_request(str(tmp_path), 0)  # taken once
    if os.getuid() == 0:
        req.write_bytes(b"{}")
        os.chown(req, 12345, 12345)
        assert not snapshots.claim_request(str(tmp_path), 0)


@pytest.mark.parametrize("kwargs, message", [
    ({"ring": "0"}, "--ring 0: expected a number of ops, at least 1"),
    ({"ring": "x"}, "--ring x: expected a number of ops"),
    ({"keep": "-1"}, "--keep-snapshots -1"),
    ({"window": "0s"}, "--window 0s"),
])
def test_bad_options_say_which_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Config.make(**kwargs)


def test_options_reach_the_ranks_through_the_environment():
    c = Config.make("200", "3", "30s")
    assert (c.ring, c.keep, c.by, c.every) == (200, 3, "seconds", 30)
    assert Config.from_env({"DISTTRACE_BLACK_BOX": "1", **c.env()}) == c
    assert Config.from_env({}) is None


def test_the_python_api_refuses_the_black_box_options_without_it():
    from disttrace.tracer import trace

    with pytest.raises(ValueError, match="black_box=True"):
        with trace("unused", ring=200):
            pass
    with pytest.raises(ValueError, match="--ring 0"):
        with trace("unused", black_box=True, ring=0):
            pass


# -- the ring written by the compiled part (_hotpath.RingWriter) beside ring.py's Python write ---------------------
def _python_ring(path, size) -> Ring:
    """A Ring on ring.py's own write, wherever the compiled writer is built."""
    ring = Ring(str(path), size)
    if ring._c is not None:
        ring._c.release()
        ring._c = None
        del ring.write_raw  # the class's method again
    return ring


@pytest.mark.skipif(Ring.__init__.__globals__["_Writer"] is None, reason="the compiled part is not built here")
def test_the_compiled_ring_writes_the_same_bytes_as_the_python_one(tmp_path):
    size = ring_size(1)
    c, py = Ring(str(tmp_path / "c.ring"), size), _python_ring(tmp_path / "py.ring", size)
    assert c._c is not None and c.write_raw == c._c.write
    lines = [_line(n, 60 + n % 90) for n in range(3000)]  # many wraps, lines of odd lengths
    lines[1500] = b"x" * (size * 2)  # longer than the whole ring: lost, on either
    lines[1501] = bytearray(_line(1501))  # mmap.write takes any bytes-like: so does the compiled write
    copies = {}
    for ring, name in ((c, "c"), (py, "py")):
        for n, line in enumerate(lines):
            ring.write_raw(line)
            if n == 2000:
                copies[name] = ring.copy()  # a snapshot's copy while the compiled writer holds the map
        assert ring.lost == 1
    assert copies["c"] == copies["py"]
    c.close()
    py.close()
    assert (tmp_path / "c.ring").read_bytes() == (tmp_path / "py.ring").read_bytes()
    assert read_ring(tmp_path / "c.ring")[-1] == lines[-1].rstrip(b"\n")


@pytest.mark.skipif(Ring.__init__.__globals__["_Writer"] is None, reason="the compiled part is not built here")
def test_the_compiled_ring_lets_go_of_the_map_at_close_and_at_stop(tmp_path):
    ring = Ring(str(tmp_path / "r.ring"), ring_size(1))
    ring.write_raw(_line(1))
    ring.close()  # (an exported buffer would make mmap.close raise: close() releases it first)
    assert ring._map.closed and not ring.enabled
    ring.write_raw(_line(2))  # dropped, never a write into the unmapped memory
    ring.close()
    assert [orjson.loads(ln)["i"] for ln in read_ring(tmp_path / "r.ring")] == [1]
    stopped = Ring(str(tmp_path / "s.ring"), ring_size(1))
    stopped.write_raw(_line(1))
    stopped.stop()  # (the black box disabled: BlackBox.disable)
    stopped.write_raw(_line(2))
    assert not stopped.enabled and len(read_ring(tmp_path / "s.ring")) == 1
    stopped.write_raw("not bytes")  # after a stop: nothing, as ring.py's own write does
    stopped.close()
    odd = Ring(str(tmp_path / "o.ring"), ring_size(1))
    odd.write_raw("not bytes")  # an odd line: the ring is disabled, as ring.py's own write does, never an exception
    assert not odd.enabled
    odd.close()
