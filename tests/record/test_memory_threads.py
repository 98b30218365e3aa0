"""record/memory.py's counters from several threads: frees (weak references' callbacks) run on whatever thread drops a
storage, and count() on the autograd engine's threads too; the counters must stay exact."""

import gc
import queue
import sys
import threading

import pytest
import torch

from disttrace.tracer.record import memory


class _Rec:
    path = "/nonexistent/rank-0.mem"

    def write(self, rec):
        pass


@pytest.fixture
def tracker():
    return memory.Tracker(_Rec())


def _settled(t):
    """(total, totals, storages counted) once the frees queued so far are uncounted."""
    with t._lock:
        t._settle()
        return t.total, list(t.totals), len(t.live)


def test_frees_from_threads_leave_exact_totals(tracker):
    """Storages counted here and dropped on 3 other threads (a DataLoader's pin thread, autograd's threads, GC),
    while this thread counts and re-kinds: what is left is exactly what is held."""
    q: queue.Queue = queue.Queue()

    def drop():
        while q.get() is not None:
            pass  # the storage goes with the reference, on this thread

    threads = [threading.Thread(target=drop) for _ in range(3)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for th in threads:
            th.start()
        kept = []
        for i in range(3000):
            a = torch.empty(i % 7 + 1, dtype=torch.uint8)
            tracker.count(a, memory.ACTIVATIONS)
            if i % 3 == 0:
                tracker.count(a, memory.GRADS)
            if i % 10 == 0:
                kept.append(a)
            else:
                q.put(a)
            del a
        for _ in threads:
            q.put(None)
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    gc.collect()
    want = [0] * len(memory.MEM_KINDS)
    for i in range(0, 3000, 10):
        want[memory.GRADS if i % 3 == 0 else memory.ACTIVATIONS] += i % 7 + 1
    assert _settled(tracker) == (sum(want), want, len(kept))
    kept.clear()
    assert _settled(tracker) == (0, [0] * len(memory.MEM_KINDS), 0)


def test_one_storage_counted_from_two_threads_at_once_is_counted_once(tracker, monkeypatch):
    """count()'s look-up and insert is a check-then-act: two threads (the main one sampling the parameters' gradients,
    an autograd device thread producing them) both past the look-up counted the storage twice and orphaned one
    _Ref, whose bytes were never uncounted. Both are held at the _Ref's creation until the other comes (or 0.1 s
    pass: under the lock the other cannot come)."""
    both = threading.Barrier(2, timeout=0.1)

    class HeldRef(memory._Ref):
        __slots__ = ()

        def __new__(cls, *args):
            try:
                both.wait()
            except threading.BrokenBarrierError:
                pass
            return super().__new__(cls, *args)

    monkeypatch.setattr(memory, "_Ref", HeldRef)
    g = torch.ones(1000)
    threads = [threading.Thread(target=tracker.count, args=(g, memory.GRADS)) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert _settled(tracker)[0] == 4000
    del g
    gc.collect()
    assert _settled(tracker) == (0, [0] * len(memory.MEM_KINDS), 0)


def test_a_free_inside_our_own_locked_section_neither_blocks_nor_is_lost(tracker):
    """A GC pass can run in the middle of the tracker's own work (any allocation): the callback it runs on this
    thread must not wait for the lock this thread holds."""
    cycle = [torch.ones(250)]
    cycle.append(cycle)
    tracker.count(cycle[0], memory.ACTIVATIONS)
    del cycle
    done = threading.Event()

    def collect_under_the_lock():
        with tracker._lock:
            gc.collect()
        done.set()

    th = threading.Thread(target=collect_under_the_lock, daemon=True)
    th.start()
    assert done.wait(5), "a free inside the locked section waited for the lock"
    assert _settled(tracker) == (0, [0] * len(memory.MEM_KINDS), 0)
