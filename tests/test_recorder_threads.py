"""The recorder's append: several threads write at once (ops complete on the backends' worker threads) while the
map grows under them; every record must come out whole, once, in each thread's order."""

from __future__ import annotations

import threading

import orjson

from disttrace.tracer.record import recorder


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
