"""The recorder's threads. Its append: several threads write at once (ops complete on the backends' worker threads)
while the map grows under them; every record must come out whole, once, in each thread's order. The CUDA watcher:
a group let go of while the watcher looks at its ops is let go of for good."""

from __future__ import annotations

import gc
import threading
import weakref
from types import SimpleNamespace

import orjson

from disttrace.tracer.record import background, recorder


def test_concurrent_writers_while_the_map_grows(tmp_path, monkeypatch):
    monkeypatch.setattr(recorder, "CHUNK", 4096)  # grow every few dozen records
    path = tmp_path / "rank.jsonl"
    rec = recorder.Recorder(str(path))
    n, writers = 5000, 4

    def write(k: int) -> None:
        for i in range(n):
            rec.write_raw(b'{"k":%d,"i":%d,"pad":"%b"}\n' % (k, i, b"x" * (i % 61)))

    threads = [threading.Thread(target=write, args=(k,)) for k in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert len(records) == n * writers
    for k in range(writers):
        assert [r["i"] for r in records if r["k"] == k] == list(range(n))


def test_writes_after_close_are_dropped_quietly(tmp_path):
    rec = recorder.Recorder(str(tmp_path / "rank.jsonl"))
    rec.write_raw(b'{"k":"a"}\n')
    rec.close()
    rec.write_raw(b'{"k":"b"}\n')  # a completion callback that comes after the end: never raises
    assert (tmp_path / "rank.jsonl").read_bytes() == b'{"k":"a"}\n'


def test_ops_let_go_of_during_the_watchers_pass_are_not_put_back():
    # Seen on an H200 (gloo with CUDA tensors, summaries full): destroy_process_group let go of the group's ops
    # while the watcher had taken them out for a pass; the pass put the unfinished one back, and the Work it held
    # past exit made gloo abort the process ("terminate called without an active exception").
    watcher = background._CudaWatcher()  # (not started: the test runs its passes)
    completion, other = object(), object()

    class Work:
        def is_completed(self):  # the job destroys the group while the watcher asks this
            t = threading.Thread(target=watcher.let_go, args=(completion, lambda ev: True, 0.02))
            t.start()
            t.join()
            return False

    work, kept = Work(), SimpleNamespace(is_completed=lambda: False)
    ev = SimpleNamespace(ended=False, stream_end=None)
    watcher.add(completion, ev, work)
    watcher.add(other, ev, kept)  # another tracer's op: still watched
    gone = weakref.ref(work)
    del work
    assert watcher._pass()
    gc.collect()
    assert [item[0] for item in watcher.items] == [other] and gone() is None
