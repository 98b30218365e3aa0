"""Live hang diagnosis: a rank that never arrives is named, with its file:line, while the job is still hung."""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time

import pytest

from harness import JOBS, disttrace_cmd, torchrun_cmd

pytestmark = pytest.mark.slow
TIMEOUT_S = 3


def test_hang_diagnosis_names_the_missing_rank_and_its_line(tmp_path):
    cmd = disttrace_cmd("run", "--out", tmp_path / "t", "--hang-timeout", TIMEOUT_S, "--kill-on-hang", "--",
                        *torchrun_cmd("rec_hang.py", 2))
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
    got, seen_at = [], None
    try:
        while time.monotonic() - started < TIMEOUT_S + 90:  # never wait forever on a job that hangs by design
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            got.append(line.rstrip())
            if line.startswith("disttrace: HANG"):
                seen_at = time.monotonic() - started
            if "--kill-on-hang: stopping the job" in line:
                break
        try:
            proc.wait(timeout=60)  # --kill-on-hang ends the job once diagnosed
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.5)
        while not lines.empty():  # what came after: the end of the job
            got.append(lines.get().rstrip())
    finally:
        proc.kill()
        subprocess.run(["pkill", "-f", str(JOBS / "rec_hang.py")], capture_output=True)
    text = "\n".join(got)
    assert seen_at is not None, text
    # torch's start-up takes a few seconds on this machine; the diagnosis follows the timeout within seconds
    assert seen_at < TIMEOUT_S + 25, seen_at
    job = str(JOBS / "rec_hang.py")
    assert re.search(r"all_reduce #1 of group \S+ never completed: rank 0 entered it .* but rank 1 never did", text)
    assert f"rank 1: {job}:10 in load_next_batch" in text       # where the missing rank is stuck
    assert f"rank 0: {job}:20 in main" in text                   # and where the waiting one waits
    assert "--kill-on-hang: stopping the job" in text
    assert proc.returncode == 128 + 9  # the job was killed (SIGKILL)
    # ... silently: no traceback from torchrun's signal handler (SignalException) under the diagnosis
    assert "Traceback" not in text and "SignalException" not in text, text
