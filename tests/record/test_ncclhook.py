"""The NCCL completion hook's matching (record/ncclhook.py), on CPU: the hook is called directly with WorkInfo-like
objects, as ProcessGroupNCCL's hook thread would call it, against a Completion with pending CUDA ops."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import orjson
import pytest
import torch

from disttrace.tracer.data.load import load_trace
from disttrace.tracer.record import background, current, ncclhook
from disttrace.tracer.record.completion import Completion, Event
from disttrace.tracer.record.recorder import Recorder

OpType = torch._C._distributed_c10d.OpType


class _Work:
    def __init__(self, done=False):
        self.done = done

    def is_completed(self):
        return self.done


class _Tracer:  # what the hook reads of the current tracer: its groups and its Completion
    def __init__(self, path):
        self.rec = Recorder(str(path))
        self.completion = Completion(self.rec, {}, lambda *a: None)
        self.groups = {}


@pytest.fixture
def with_hook(tmp_path, monkeypatch):
    """(tracer, group, the group's completion hook, what the CUDA watcher was given): a tracer with one NCCL group
    whose hook is installed; not conftest's `traced` (a traced torchrun job)."""
    t = _Tracer(tmp_path / "rank.jsonl")
    group = SimpleNamespace(gidx=0, hook=ncclhook.DeviceEnds(), pg=None)
    t.groups[1234] = group
    monkeypatch.setattr(current, "tracer", t)
    watched = []
    monkeypatch.setattr(background, "cuda_watcher",
                        lambda: SimpleNamespace(add=lambda c, ev, w: watched.append((ev, w))))
    yield t, group, ncclhook._make_hook(1234), watched
    t.rec.close()


def _ends(t):
    t.rec.close()
    lines = [orjson.loads(x) for x in open(t.rec.path, "rb").read().splitlines() if x.strip()]
    return {r["i"]: r for r in lines if r["k"] == "e"}


def _issue(t, group, i, op, seq):
    ev = Event(i, False, group)
    ev.cuda, ev.seq, ev.info = True, seq, (op, group, i, time.monotonic_ns(), 0)
    t.completion.in_flight[i] = ev.info  # (as capture.begin puts every CUDA op)
    w = _Work()
    t.completion.track(ev, w, ours=True)
    return ev, w


def _info(kind, seq, dev_us=1500, finished=None):
    finished = time.monotonic_ns() if finished is None else finished
    return SimpleNamespace(op_type=kind, seq=seq, time_started=timedelta(microseconds=finished // 1000 - 5000),
                           time_finished=timedelta(microseconds=finished // 1000),
                           active_duration=timedelta(microseconds=dev_us))


def test_the_op_ends_when_the_watcher_saw_it_done_with_the_hook_s_device_duration(with_hook):
    # the hook's time_finished is when ProcessGroupNCCL's watchdog looked (every ~100 ms): never the end
    t, group, hook, watched = with_hook
    ev, _ = _issue(t, group, 7, "all_reduce", 3)
    assert [e for e, _ in watched] == [ev] and 3 in group.hook.table
    done = time.monotonic_ns()
    t.completion.device_done(ev, done)
    assert not ev.ended and 7 not in t.completion.in_flight  # done: out of the watchdog's sight, the end waits
    hook(_info(OpType.ALLREDUCE, 3, dev_us=1234, finished=done + 80_000_000))
    assert ev.ended and not group.hook.table
    e = _ends(t)[7]
    assert e["seq"] == 3 and e["dev"] == 1_234_000 and e["t"] == done


def test_a_duration_reported_before_the_watcher_saw_the_op_done_waits_for_it(with_hook):
    t, group, hook, _ = with_hook
    ev, _ = _issue(t, group, 8, "broadcast", 4)
    hook(_info(OpType.BROADCAST, 4, dev_us=50))
    assert not ev.ended and 8 in t.completion.in_flight
    done = time.monotonic_ns()
    t.completion.device_done(ev, done)
    assert ev.ended and _ends(t)[8]["t"] == done and _ends(t)[8]["dev"] == 50_000


def test_p2p_coalesced_and_unknown_ops_end_without_a_duration(with_hook):
    t, group, hook, watched = with_hook
    send, _ = _issue(t, group, 1, "send", 0)          # a P2P op's Work counts another seq
    first, _ = _issue(t, group, 2, "all_reduce", 1)   # a coalescing block: two ops, one seq
    second, _ = _issue(t, group, 3, "all_reduce", 1)
    nos, _ = _issue(t, group, 4, "all_gather", None)  # no seq read
    assert [ev for ev, _ in watched] == [send, first, second, nos] and list(group.hook.table) == [1]
    hook(_info(OpType.SEND, 1))  # the P2P counter's 1: not the collective's
    assert first.hooked is group.hook
    hook(_info(OpType.COALESCED, 1))  # the block's Work: its seq may be P2P's, so no duration is taken
    assert first.hooked is None and first.dev is None and not first.ended and not group.hook.table
    for ev in (send, first, second, nos):
        t.completion.device_done(ev, time.monotonic_ns())
    assert all(ev.ended for ev in (send, first, second, nos)) and not any("dev" in e for e in _ends(t).values())


def test_earlier_ops_and_mismatched_kinds_get_no_duration_and_an_early_one_is_kept(with_hook):
    t, group, hook, _ = with_hook
    a, _ = _issue(t, group, 1, "broadcast", 5)
    b, _ = _issue(t, group, 2, "all_gather", 6)
    t.completion.device_done(a, 100)
    hook(_info(OpType.ALLREDUCE, 6))  # not what was issued as 6: no duration; 5 is done (in order): none either
    assert a.ended and not b.ended and b.hooked is None and b.dev is None
    t.completion.device_done(b, 200)
    hook(_info(OpType.BROADCAST, 7, dev_us=10))  # reported before its op was handed over
    c, _ = _issue(t, group, 3, "broadcast", 7)
    assert c.dev == 10_000 and c.hooked is None and not c.ended
    t.completion.device_done(c, 300)
    ends = _ends(t)
    assert [(ends[i]["t"], ends[i].get("dev")) for i in (1, 2, 3)] == [(100, None), (200, None), (300, 10_000)]


def test_barrier_runs_as_an_all_reduce_and_a_raising_hook_never_escapes(with_hook, monkeypatch):
    t, group, hook, watched = with_hook
    ev, _ = _issue(t, group, 1, "barrier", 2)
    hook(_info(OpType.ALLREDUCE, 2, dev_us=7))
    t.completion.device_done(ev, 50)
    assert ev.ended and _ends(t)[1]["dev"] == 7000
    hook(object())  # no attributes at all
    monkeypatch.setattr(current, "tracer", None)
    hook(_info(OpType.ALLREDUCE, 3))  # tracing stopped: nothing


def test_a_group_that_goes_ends_its_done_ops_without_the_duration_and_leaves_the_rest_to_the_watcher(with_hook):
    t, group, hook, _ = with_hook
    done, _ = _issue(t, group, 1, "all_reduce", 1)
    running, _ = _issue(t, group, 2, "all_reduce", 2)
    t.completion.device_done(done, 123)
    group.hook.settle(timeout_s=0.02)  # the hook never comes: a bounded wait
    group.hook.flush(t.completion)
    assert done.ended and not running.ended and running.hooked is None
    t.completion.device_done(running, 456)
    assert [(e["t"], e.get("dev")) for e in _ends(t).values()] == [(123, None), (456, None)]


def test_a_cuda_op_stays_watched_after_the_job_s_wait_returns(with_hook):
    # NCCL's wait() only makes the job's stream wait: an op stuck on the device must still be seen by the watchdog
    t, group, _, _ = with_hook
    ev, w = _issue(t, group, 1, "all_reduce", 1)
    t.completion.wait_begins(w, 10)
    t.completion.waited(w, 10, 20, None)
    assert not ev.ended and t.completion.in_flight[1][3] == ev.info[3]
    t.completion.device_done(ev, 30)
    hook_ends = group.hook
    hook_ends.flush(t.completion)
    assert ev.ended and 1 not in t.completion.in_flight and _ends(t)[1]["t"] == 30


def test_the_reader_carries_the_device_duration(tmp_path):
    lines = [{"k": "meta", "v": 2, "rank": 0, "world_size": 1, "host": "h", "pid": 1, "mono_ns": 0, "wall_ns": 0},
             {"k": "group", "g": 0, "name": "0", "desc": "default_pg", "ranks": [0], "backend": "nccl"},
             {"k": "b", "op": "all_reduce", "api": "all_reduce", "g": 0, "bytes": 4, "async": True, "i": 0, "gs": 0,
              "t": 100},
             {"k": "e", "i": 0, "t": 200, "seq": 1, "dev": 50},
             {"k": "b", "op": "all_reduce", "api": "all_reduce", "g": 0, "bytes": 4, "async": True, "i": 1, "gs": 1,
              "t": 300},
             {"k": "e", "i": 1, "t": 400, "seq": 2}]
    (tmp_path / "rank-00000-h-1.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    table = load_trace(str(tmp_path))
    assert [table.row(i).get("device_ns") for i in range(len(table))] == [50, None]


def test_attach_refuses_what_is_not_nccl(monkeypatch):
    pg = SimpleNamespace(_register_on_completion_hook=lambda h: None,
                         _get_backend=lambda d: object())
    assert ncclhook.attach(pg) is None
    monkeypatch.setenv(ncclhook.ENV, "0")
    assert ncclhook.attach(pg) is None


def test_a_job_s_own_hook_on_a_hooked_group_is_called_after_disttrace_s():
    # PyTorch allows one completion hook per group: once disttrace holds it, the job's registration must still
    # succeed, and its hook be called, as untraced
    from disttrace.tracer.record import ncclhook

    class FakePG:
        registered = []

        def _register_on_completion_hook(self, hook):
            FakePG.registered.append(hook)

    ours, theirs = FakePG(), FakePG()
    ncclhook._ATTACHED.add(id(ours))
    saved = ncclhook._REGISTER
    try:
        ncclhook._REGISTER = None
        ncclhook._share_registration(FakePG)
        calls = []
        ours._register_on_completion_hook(calls.append)       # on a group whose hook is disttrace's: kept by us
        theirs._register_on_completion_hook("their own")        # on another group: PyTorch's registration
        assert FakePG.registered == ["their own"]
        ncclhook._make_hook(id(ours))("info")
        assert calls == ["info"]
    finally:
        FakePG._register_on_completion_hook = ncclhook._REGISTER
        ncclhook._REGISTER = saved
        ncclhook._ATTACHED.discard(id(ours))
        ncclhook._JOB_HOOKS.pop(id(ours), None)


def test_a_synchronous_cuda_op_without_a_work_is_followed_to_its_stream_s_end(with_hook, monkeypatch):
    # torch 2.11's NCCL runs async_op=False collectives on the job's stream and returns no Work (seen on an H200):
    # ending the op at issue made it 'done' before the device ran it, and hid a device hang from the watchdog
    from disttrace.tracer.record import completion

    t, group, hook, watched = with_hook
    ends_at = completion.StreamEnd(SimpleNamespace(query=lambda: True))  # (a CUDA event on the job's stream)
    monkeypatch.setattr(completion.StreamEnd, "after", staticmethod(lambda ev: ends_at))
    ev = Event(1, True, group)
    ev.cuda, ev.info = True, ("all_reduce", group, 0, time.monotonic_ns(), 0)
    t.completion.in_flight[1] = ev.info
    group.pg = SimpleNamespace(_get_sequence_number_for_group=lambda: 5)
    t.completion.issued_work(ev, None)
    assert not ev.ended and watched == [(ev, ends_at)] and 1 in t.completion.in_flight and 5 in group.hook.table
    assert ends_at.is_completed()
    t.completion.device_done(ev, 99)  # (lets go of its end as of a Work: weakly; a StreamEnd without a weakref
    hook(_info(OpType.ALLREDUCE, 5, dev_us=3))  # slot failed here on an H200, and every such op read 'error')
    assert _ends(t)[1] == {"k": "e", "i": 1, "t": 99, "seq": 5, "dev": 3000}


def test_the_watcher_lets_go_of_a_group_s_ops_that_never_end_and_ends_those_that_do():
    from disttrace.tracer.record.background import _CudaWatcher

    class C:
        def __init__(self):
            self.ended = []

        def device_done(self, ev, t):
            ev.ended = True
            self.ended.append(ev)

    w = _CudaWatcher()
    w.start()
    c, other = C(), C()
    done, stuck, elsewhere = (SimpleNamespace(ended=False, stream_end=None, group=g) for g in ("a", "a", "b"))
    finishing = _Work()
    w.add(c, done, finishing)
    w.add(c, stuck, _Work())
    w.add(other, elsewhere, _Work())
    threading.Timer(0.05, lambda: setattr(finishing, "done", True)).start()
    w.let_go(c, lambda ev: ev.group == "a", timeout_s=0.5)
    assert c.ended == [done] and not stuck.ended
    assert [item[1] for item in w.items] == [elsewhere]  # another tracer's, or another group's: still followed
