"""The NCCL completion hook's matching (record/ncclhook.py), on CPU: the hook is called directly with WorkInfo-like
objects, as ProcessGroupNCCL's hook thread would call it, against a Completion with pending CUDA ops."""

from __future__ import annotations

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
def traced(tmp_path, monkeypatch):
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
    w = _Work()
    t.completion.track(ev, w, ours=True)
    return ev, w


def _info(kind, seq, dev_us=1500, finished=None):
    finished = time.monotonic_ns() if finished is None else finished
    return SimpleNamespace(op_type=kind, seq=seq, time_started=timedelta(microseconds=finished // 1000 - 5000),
                           time_finished=timedelta(microseconds=finished // 1000),
                           active_duration=timedelta(microseconds=dev_us))


def test_the_hook_ends_the_op_with_its_group_and_seq_and_the_device_duration(traced):
    t, group, hook, watched = traced
    ev, _ = _issue(t, group, 7, "all_reduce", 3)
    assert not watched and group.hook.table  # the hook's, not the watcher's
    finished = time.monotonic_ns()
    hook(_info(OpType.ALLREDUCE, 3, dev_us=1234, finished=finished))
    assert ev.ended and not group.hook.table and not watched
    e = _ends(t)[7]
    assert e["seq"] == 3 and e["dev"] == 1_234_000 and abs(e["t"] - finished) < 1000


def test_p2p_coalesced_and_unknown_ops_go_to_the_watcher(traced):
    t, group, hook, watched = traced
    send, _ = _issue(t, group, 1, "send", 0)          # a P2P op's Work counts another seq
    first, _ = _issue(t, group, 2, "all_reduce", 1)   # a coalescing block: two ops, one seq
    second, _ = _issue(t, group, 3, "all_reduce", 1)
    nos, _ = _issue(t, group, 4, "all_gather", None)  # no seq read
    assert [ev for ev, _ in watched] == [send, second, nos]
    hook(_info(OpType.SEND, 1))  # the P2P counter's 1: not the collective's
    assert not first.ended and 1 in group.hook.table
    hook(_info(OpType.COALESCED, 1))  # the block's Work: its seq may be P2P's, so the watcher decides
    assert not first.ended and [ev for ev, _ in watched][-1] is first and not group.hook.table


def test_earlier_ops_and_mismatched_kinds_fall_back_and_an_early_completion_is_kept(traced):
    t, group, hook, watched = traced
    a, _ = _issue(t, group, 1, "broadcast", 5)
    b, _ = _issue(t, group, 2, "all_gather", 6)
    hook(_info(OpType.ALLREDUCE, 6))  # not what was issued as 6: the watcher; 5 is done (in order): too
    assert not a.ended and not b.ended and {ev for ev, _ in watched} == {a, b}
    hook(_info(OpType.BROADCAST, 7, dev_us=10))  # reported before its op was handed over
    c, _ = _issue(t, group, 3, "broadcast", 7)
    assert c.ended and _ends(t)[3]["dev"] == 10_000


def test_barrier_runs_as_an_all_reduce_and_a_raising_hook_never_escapes(traced, monkeypatch):
    t, group, hook, watched = traced
    ev, _ = _issue(t, group, 1, "barrier", 2)
    hook(_info(OpType.ALLREDUCE, 2))
    assert ev.ended
    hook(object())  # no attributes at all
    monkeypatch.setattr(current, "tracer", None)
    hook(_info(OpType.ALLREDUCE, 3))  # tracing stopped: nothing


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
