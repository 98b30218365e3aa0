"""A real job traced with the recorder's compiled part and again on its pure-Python twin (DISTTRACE_PURE=1): each
rank's records are the same bytes, times aside (tests/jobs/rec_train.py: DDP, whose ops name DDP's functions, and the
user's own all_reduce, 2 ranks, gloo). The full trace (summaries off: the lean path) and the black box's ring."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import run_traced
from disttrace.tracer.data.importers.ring import read_ring
from disttrace.tracer.record import compiled

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(compiled.hotpath is None, reason="the compiled part is not built here")]
TIMES = re.compile(rb'"(t|t0|t1)":\d+')


def _lines(out: Path, black_box: bool) -> dict[int, list[bytes]]:
    """Each rank's op records ("b", "e", "w"), times zeroed."""
    got = {}
    for rank in (0, 1):
        if black_box:
            lines = read_ring(str(next(out.glob(f"rank-{rank:05d}-*.ring"))))
        else:
            lines = next(out.glob(f"rank-{rank:05d}-*.jsonl")).read_bytes().splitlines()
        got[rank] = [TIMES.sub(rb'"\1":0', ln.rstrip(b"\n")) for ln in lines if ln.startswith((b'{"k":"b"', b'{"k":"e"',
                                                                                                   b'{"k":"w"'))]
    return got


@pytest.mark.parametrize("black_box", [False, True], ids=["full", "black_box"])
def test_a_jobs_records_are_the_same_bytes_either_way(tmp_path, black_box):
    run_args = ("--black-box",) if black_box else ()
    runs = {}
    for pure in ("0", "1"):
        out = tmp_path / f"pure{pure}"
        proc = run_traced("rec_train.py", out, nproc=2, args=[tmp_path / f"w{pure}.pt"], summaries="off",
                          run_args=run_args, env={compiled.PURE_ENV: pure})
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[pure] = _lines(out, black_box)
    compiled_run, pure_run = runs["0"], runs["1"]
    for rank in (0, 1):
        begins = [ln for ln in compiled_run[rank] if ln.startswith(b'{"k":"b"')]
        assert len(begins) >= 15 and all(b'"site":"' in ln for ln in begins)
        assert any(b'"api":"ddp.' in ln for ln in begins) and any(b'"api":"all_reduce"' in ln for ln in begins)
        # begins in issue order; ends as they came (an async op's end is written on gloo's thread)
        assert [ln for ln in pure_run[rank] if ln.startswith(b'{"k":"b"')] == begins
        assert sorted(pure_run[rank]) == sorted(compiled_run[rank])
