"""What a demo says while it runs: its phases, and the job's own output, each line whole and with its rank.

torchrun writes each rank's stdout and stderr into files (`--redirects 3 --log-dir DIR/job-output`); `RankOutput`
follows those files from a thread of `disttrace demo` and prints every complete line as `  rank R │ line`. Ranks
that share one terminal cut into each other's lines; here a line is printed once its newline is written (a rank's
last line, unterminated, when the job has ended). The ranks run unbuffered (`PYTHONUNBUFFERED=1`), so that a line
shows as it is printed, not when the rank exits. The thread reads a few small files ten times a second: it does
not slow the job.
"""

from __future__ import annotations

import glob
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from disttrace.tracer.format import RANK_FILE_PREFIX, RANK_FILE_SUFFIX

OUTPUT_DIR = "job-output"  # in the trace dir: torchrun's --log-dir (DIR/job-output/RUN_ID/attempt_0/RANK/stdout.log)
POLL_S = 0.1
STILL_STARTING_S = 10.0  # until every rank has joined, a line this often says how many have


def say(text: str) -> None:
    """One line of the demo's own, at once (the job writes to the same terminal)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class RankOutput:
    """Follows the ranks' output files under `log_dir` and prints their complete lines with the rank in front;
    says once when all `nproc` ranks have joined the process group (their trace files in `out`)."""

    def __init__(self, log_dir: Path, out: Path, nproc: int, write: Callable[[str], None] = say,
                 started: float | None = None) -> None:
        self.log_dir, self.out, self.nproc, self.write = Path(log_dir), Path(out), nproc, write
        self.started = time.monotonic() if started is None else started
        self._files: dict[str, tuple[int, int, bytes]] = {}  # path -> (rank, bytes read, the partial line)
        self._joined = False
        self._next_note = STILL_STARTING_S
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disttrace-demo-output", daemon=True)

    def __enter__(self) -> RankOutput:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.poll(final=True)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self.poll()

    def poll(self, final: bool = False) -> None:
        """Print what the ranks wrote since the last poll: whole lines, and, when `final`, what is left."""
        if not self._joined:
            joined = sum(1 for n in _names(self.out) if n.startswith(RANK_FILE_PREFIX) and n.endswith(RANK_FILE_SUFFIX))
            took = time.monotonic() - self.started
            if joined >= self.nproc:
                self._joined = True
                self.write(f"  all {self.nproc} ranks have joined the process group ({took:.1f} s); the job runs")
            elif took >= self._next_note and not final:
                self._next_note += STILL_STARTING_S
                self.write(f"  starting: {joined} of {self.nproc} ranks have joined so far ({took:.0f} s)")
        for path in sorted(glob.glob(str(self.log_dir / "*" / "attempt_*" / "*" / "std*.log"))):
            rank, done, partial = self._files.get(path) or (_rank_of(path), 0, b"")
            try:
                with open(path, "rb") as f:
                    f.seek(done)
                    data = f.read()
            except OSError:
                continue
            text = partial + data
            lines = text.split(b"\n")
            partial = lines.pop()
            if final and partial:
                lines.append(partial)
                partial = b""
            for line in lines:
                self.write(f"  rank {rank} │ {line.decode(errors='replace').rstrip()}")
            self._files[path] = (rank, done + len(data), partial)


def _names(d: Path) -> list[str]:
    try:
        return os.listdir(d)
    except OSError:
        return []


def _rank_of(path: str) -> int | str:
    """The local rank of .../attempt_N/RANK/stdout.log (the rank: a demo runs on one node)."""
    name = Path(path).parent.name
    return int(name) if name.isdigit() else name
