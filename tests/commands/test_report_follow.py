"""Following a trace that is still being written: `disttrace report --follow` keeps up until the job ends."""

from __future__ import annotations

import subprocess
import time

import orjson
import pytest

from harness import disttrace_cmd, torchrun_cmd

pytestmark = pytest.mark.slow


def test_report_follow_sees_the_trace_grow_and_stops_when_the_job_ends(tmp_path):
    out = tmp_path / "t"
    job = subprocess.Popen(disttrace_cmd("run", "--out", out, "--", *torchrun_cmd("rec_slow.py", 2)),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        proc = subprocess.run(disttrace_cmd("report", "--follow", "--json", "--interval", "0.3", out),
                              capture_output=True, text=True, timeout=180)
    finally:
        job.wait(timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    reports = [orjson.loads(line) for line in proc.stdout.splitlines()]
    counts = [len(r["collectives"]) for r in reports]
    assert len(reports) >= 3, counts          # it reported while the job ran, not only at the end
    assert counts == sorted(counts) and counts[0] < 10 and counts[-1] == 10, counts
    assert "Traceback" not in proc.stderr
    # each rank's file read at its own moment while the job ran: an all_reduce one rank had begun and the other had
    # not yet (or had, after its file was read) is no death and no hang; the reports say the job was running, the
    # last (the job over) does not
    for r in reports:
        assert not [p for p in r["problems"] if p["kind"] in ("died", "hang")], r["problems"]
    running = ["the job was running" in " ".join(r["summary"]["notes"]) for r in reports]
    assert running[0] and not running[-1], running
