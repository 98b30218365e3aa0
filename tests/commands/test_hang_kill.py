"""`disttrace run --kill-on-hang` on a black box: the kill waits for the hang's snapshot of every local rank
(each rank's watchdog copies its own ring within seconds of the trigger), a bounded time at most."""

from __future__ import annotations

import io
import threading
import time

import orjson

from disttrace.tracer.commands.hangwatch import HangMonitor
from disttrace.tracer.format import RING_SUFFIX, SNAPSHOT_INFO, SNAPSHOTS_DIR


def _monitor(out, ranks: int) -> HangMonitor:
    m = HangMonitor(str(out), 2.0, stream=io.StringIO())
    m.rank_of = {f"rank-{r:05d}-h-{r}.jsonl": r for r in range(ranks)}
    for r in range(ranks):
        (out / f"rank-{r:05d}-h-{r}{RING_SUFFIX}").write_bytes(b"\0" * 64)
    m.hang_since_ns = time.time_ns() - 10**9
    return m


def _snapshot(out, name: str, ranks=(), wall_ns=None):
    """A snapshot directory as write_snapshot leaves it: its info first, then the rings named."""
    path = out / SNAPSHOTS_DIR / name
    path.mkdir(parents=True)
    (path / SNAPSHOT_INFO).write_bytes(orjson.dumps({"reason": name.split("-")[1],
                                                     "wall_ns": wall_ns or time.time_ns()}))
    for r in ranks:
        (path / f"rank-{r:05d}-h-{r}{RING_SUFFIX}").write_bytes(b"")
    return path


def test_the_kill_waits_for_every_rank_s_ring_in_the_hang_snapshot(tmp_path):
    m = _monitor(tmp_path, 2)
    _snapshot(tmp_path, "000001-signal", range(2))  # an older snapshot, whole: not the hang's

    def copies():  # rank 0's watchdog at once, rank 1's 0.6 s later
        snap = _snapshot(tmp_path, "000002-hang", [0])
        time.sleep(0.6)
        (snap / f"rank-00001-h-1{RING_SUFFIX}").write_bytes(b"")

    threading.Thread(target=copies).start()
    t0 = time.monotonic()
    assert m.await_snapshot(wait_s=5.0)
    assert 0.5 <= time.monotonic() - t0 < 4.0


def test_a_snapshot_never_whole_delays_the_kill_a_bounded_time_and_is_said(tmp_path):
    m = _monitor(tmp_path, 2)
    _snapshot(tmp_path, "000001-hang", [0])
    t0 = time.monotonic()
    assert not m.await_snapshot(wait_s=0.3)
    assert time.monotonic() - t0 < 1.0
    assert "the hang's snapshot is not whole" in m.stream.getvalue()


def test_a_job_without_rings_is_killed_at_once(tmp_path):
    m = HangMonitor(str(tmp_path), 2.0, stream=io.StringIO())
    t0 = time.monotonic()
    assert m.await_snapshot(wait_s=5.0) and time.monotonic() - t0 < 0.1


def test_an_earlier_world_s_whole_hang_snapshot_is_not_this_hang_s(tmp_path):
    """torchrun restarted the workers after a first hang: its snapshot, whole, is on disk; the kill waits for this
    hang's own (here never whole: the wait runs out, and says so)."""
    m = _monitor(tmp_path, 2)
    _snapshot(tmp_path, "000001-hang", range(2), wall_ns=m.hang_since_ns - 30 * 10**9)
    assert not m.await_snapshot(wait_s=0.3)
    _snapshot(tmp_path, "000002-hang", range(2))
    assert m.await_snapshot(wait_s=0.3)
