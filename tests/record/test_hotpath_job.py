"""A real job traced with the recorder's compiled part and again on its pure-Python twin (DISTTRACE_PURE=1): each
rank's records are the same bytes, times aside. tests/jobs/rec_train.py (DDP, whose ops name DDP's functions, and the
user's own all_reduce), in the full trace (summaries off: the lean path) and in the black box's ring; and
tests/jobs/rec_paths.py (every op family, P2P included, by the fast path, then by the dispatcher kernel's), 2 ranks,
gloo."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
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


@pytest.mark.parametrize("job,black_box", [("rec_train", False), ("rec_train", True), ("rec_paths", False)],
                         ids=["ddp-full", "ddp-black_box", "paths-full"])
def test_a_jobs_records_are_the_same_bytes_either_way(tmp_path, job, black_box):
    run_args = ("--black-box",) if black_box else ()
    runs = {}
    for pure in ("0", "1"):
        out = tmp_path / f"pure{pure}"
        args = [tmp_path / f"w{pure}.pt"] if job == "rec_train" else []
        proc = run_traced(f"{job}.py", out, nproc=2, args=args, summaries="off", run_args=run_args,
                          env={compiled.PURE_ENV: pure}, again=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[pure] = _lines(out, black_box)
    compiled_run, pure_run = runs["0"], runs["1"]
    for rank in (0, 1):
        begins = [ln for ln in compiled_run[rank] if ln.startswith(b'{"k":"b"')]
        assert len(begins) >= 15 and all(b'"site":"' in ln for ln in begins)
        assert any(b'"api":"all_reduce"' in ln for ln in begins)
        assert any(b'"api":"ddp.' in ln for ln in begins) if job == "rec_train" else any(b'"op":"recv"' in ln
                                                                                           for ln in begins)
        # begins in issue order; ends as they came (an async op's end is written on gloo's thread)
        assert [ln for ln in pure_run[rank] if ln.startswith(b'{"k":"b"')] == begins
        assert sorted(pure_run[rank]) == sorted(compiled_run[rank])


# A world of one (no torchrun): ops of three lean keys, each issued 20 times. The Python code reads an op's tensors with
# fastpath._one_plain; the compiled lean path (_hotpath.Lean) only on a key's first sight, when the Python code decides.
_ONE = """
import sys
import torch, torch.distributed as dist
from disttrace.tracer.record import fastpath, hooks
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
reads = [0]
_one_plain = fastpath._one_plain
def counting(ts):
    reads[0] += 1
    return _one_plain(ts)
fastpath._one_plain = counting
hooks.install(sys.argv[1], "off", 0.0)
t = torch.ones(16)
for _ in range(20):
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    dist.all_reduce(t, async_op=True).wait()
hooks.uninstall()
print("READS", reads[0])
"""


@pytest.mark.parametrize("pure", ["0", "1"])
def test_the_compiled_lean_path_reads_an_op_in_c_after_its_keys_first_sight(tmp_path, pure):
    proc = subprocess.run([sys.executable, "-c", _ONE, str(tmp_path / "trace")], capture_output=True, text=True,
                          timeout=120, env={**os.environ, compiled.PURE_ENV: pure})
    assert proc.returncode == 0, proc.stderr[-3000:]
    reads = int(re.search(r"READS (\d+)", proc.stdout).group(1))
    assert reads == (3 if pure == "0" else 60)


# A world of one, every op by the lean path: what the compiled Lean keeps from its last call (t.groups' entry, t.lean's
# entry, the tracer's fields) must never stand for a lookup whose answer changed: call sites and shapes alternate,
# one line's calls change shape or group from one call to the next, a group is made midway (t.groups changes), the
# lean cache is emptied midway (t.lean changes), broadcast and all_reduce interleave; in the full trace and in the
# black box's ring.
_CHANGES = """
import sys
import torch, torch.distributed as dist
from disttrace.tracer.blackbox_files import Config
from disttrace.tracer.record import current, hooks
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
hooks.install(sys.argv[1], "off", 0.0, black_box=Config.make() if sys.argv[2] == "1" else None)
a, b = torch.ones(16), torch.ones(2, 4)
groups = [None]
for n in range(12):
    for x in (a, b, a):  # one line, the shape changing from one call to the next
        dist.all_reduce(x)
    dist.broadcast(a, src=0)
    if n == 4:
        groups.append(dist.new_group([0]))
    for g in groups:  # one line, the group changing from one call to the next
        dist.all_reduce(a, group=g)
    if n == 7:
        current.tracer.lean.clear()
hooks.uninstall()
"""


@pytest.mark.parametrize("black_box", ["0", "1"], ids=["full", "black_box"])
def test_what_the_compiled_lean_path_keeps_never_outlives_a_change(tmp_path, black_box):
    got = {}
    for pure in ("0", "1"):
        out = tmp_path / f"pure{pure}"
        proc = subprocess.run([sys.executable, "-c", _CHANGES, str(out), black_box], capture_output=True, text=True,
                              timeout=120, env={**os.environ, compiled.PURE_ENV: pure})
        assert proc.returncode == 0, proc.stderr[-3000:]
        if black_box == "1":
            lines = read_ring(str(next(out.glob("rank-00000-*.ring"))))
        else:
            lines = next(out.glob("rank-00000-*.jsonl")).read_bytes().splitlines(keepends=True)
        got[pure] = [TIMES.sub(rb'"\1":0', ln) for ln in lines if ln.startswith((b'{"k":"b"', b'{"k":"e"'))]
    assert len(got["0"]) == 2 * (12 * 5 + 8) and got["0"] == got["1"]
    begins = [orjson.loads(ln) for ln in got["0"] if ln.startswith(b'{"k":"b"')]
    assert len({b["site"] for b in begins}) == 3 and {b["g"] for b in begins} == {0, 1}
