"""`disttrace run --kill-on-hang` on a black box: the kill waits for the hang's snapshot of every local rank
(each rank's watchdog copies its own ring within seconds of the trigger), a bounded time at most."""

from __future__ import annotations

import io
import threading
import time

from disttrace.tracer.commands.hangwatch import HangMonitor
from disttrace.tracer.format import RING_SUFFIX, SNAPSHOTS_DIR


def _monitor(out, ranks: int) -> HangMonitor:
    m = HangMonitor(str(out), 2.0, stream=io.StringIO())
    m.rank_of = {f"rank-{r:05d}-h-{r}.jsonl": r for r in range(ranks)}
    for r in range(ranks):
        (out / f"rank-{r:05d}-h-{r}{RING_SUFFIX}").write_bytes(b"\0" * 64)
    return m


def test_the_kill_waits_for_every_rank_s_ring_in_the_hang_snapshot(tmp_path):
    m = _monitor(tmp_path, 2)
    snap = tmp_path / SNAPSHOTS_DIR / "000002-hang"
    (tmp_path / SNAPSHOTS_DIR / "000001-signal").mkdir(parents=True)  # an older snapshot: not the hang's
    for r in range(2):
        (tmp_path / SNAPSHOTS_DIR / "000001-signal" / f"rank-{r:05d}-h-{r}{RING_SUFFIX}").write_bytes(b"")

    def copies():  # rank 0's watchdog at once, rank 1's 0.6 s later
        snap.mkdir(parents=True)
        (snap / f"rank-00000-h-0{RING_SUFFIX}").write_bytes(b"")
        time.sleep(0.6)
        (snap / f"rank-00001-h-1{RING_SUFFIX}").write_bytes(b"")

    threading.Thread(target=copies).start()
    t0 = time.monotonic()
    assert m.await_snapshot(wait_s=5.0)
    assert 0.5 <= time.monotonic() - t0 < 4.0


def test_a_snapshot_never_whole_delays_the_kill_a_bounded_time_and_is_said(tmp_path):
    m = _monitor(tmp_path, 2)
    (tmp_path / SNAPSHOTS_DIR / "000001-hang").mkdir(parents=True)
    t0 = time.monotonic()
    assert not m.await_snapshot(wait_s=0.3)
    assert time.monotonic() - t0 < 1.0
    assert "the hang's snapshot is not whole" in m.stream.getvalue()


def test_a_job_without_rings_is_killed_at_once(tmp_path):
    m = HangMonitor(str(tmp_path), 2.0, stream=io.StringIO())
    t0 = time.monotonic()
    assert m.await_snapshot(wait_s=5.0) and time.monotonic() - t0 < 0.1
