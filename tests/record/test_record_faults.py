"""Faults around the job never change it: a disk that fills up mid-job, collectives from several threads."""

from __future__ import annotations

import subprocess

import pytest

from harness import run_disttrace, torchrun_cmd
from disttrace.tracer.data.load import load_trace

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.decode().strip()[:100]})")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_mid_job_the_job_goes_on_and_the_user_is_told_once(small_disk, tmp_path):
    out = small_disk / "trace"
    weights = tmp_path / "w.pt"
    # 32 KiB chunks: the first ones fit, and with full summaries the 160 KiB disk fills up mid-job
    cmd = ["run", "--out", out, "--summaries", "full", "--", *torchrun_cmd("rec_threads.py", 2, [300])]
    proc = run_disttrace(*cmd, env={"DISTTRACE_CHUNK_BYTES": str(32 << 10)}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]  # the job's own assertions held
    told = [l for l in proc.stderr.splitlines() if "tracing disabled" in l]
    assert len(told) == 1 and "no space left" in told[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    table = load_trace([str(out)])  # what was recorded before the disk filled up is readable
    assert 0 < len(table) < 2 * 2 * 300


def test_collectives_from_several_threads_are_recorded_intact(traced):
    table = load_trace([str(traced("rec_threads.py", nproc=2, args=(200,), summaries="stats"))])
    assert not table.warnings
    for rank in (0, 1):
        for group in {table.groups[g].name for g in table.gid}:
            seqs = [table.group_seq[i] for i in range(len(table))
                    if table.rank[i] == rank and table.groups[table.gid[i]].name == group]
            assert sorted(seqs) == list(range(200)), (rank, group)
    assert all(s == "ok" for s in table.status)
    # the two threads' ops interleave in time, and each kept its own thread id
    threads = {(table.rank[i], (table.extra[i] or {}).get("th")) for i in range(len(table))}
    assert len(threads) == 4
