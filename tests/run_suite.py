"""The README's test command: the quiet tests and the rest at once, the rest at the lowest CPU weight.

    python tests/run_suite.py [--serial]

The quiet tests' ground truths are timings (pairs of runs at one pace, waits within tolerances), so they want the
machine to themselves; the rest is bound by CPU (every job's ranks import torch) and does not care when it gets it.
Run one after the other, the two leave the quiet part's sleeping jobs' CPU idle. Here the rest runs beside the quiet
part and takes only what the quiet part leaves: its processes get the lowest weight the kernel gives without
privilege, which is nice 19 where all tasks share one run queue, and where the kernel groups CPU time by session
(autogroups: /proc/sys/kernel/sched_autogroup_enabled) the session's autogroup nice 19, since there a session's share
is its autogroup's, whatever its tasks' nice. torchrun starts every rank in a session of its own and tmux its
server, so a watcher sets each new session of the rest's process tree as it appears (a process may lower its own
sessions' weight: no root, nothing of the machine's configuration changed, nothing in the jobs themselves).

--serial runs the two parts one after the other, as the suite ran before (`pytest -n 2 --dist loadscope -m "not
quiet"`, then `pytest -m quiet`). The exit code is the first non-zero of the two parts' (pytest's own codes).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARALLEL = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadscope", "-m", "not quiet"]
QUIET = [sys.executable, "-m", "pytest", "-q", "-m", "quiet"]
# Inherited by everything the rest starts: how the watcher knows a session whose parent it did not see (an orphan
# reparented to init)
MARK = "DISTTRACE_SUITE_BACKGROUND"
POLL_S = 0.02
IDLEST = 19


def _stat(pid: str) -> tuple[int, int] | None:
    """(parent pid, session id) of a live process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[3])


def _marked(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return (MARK + "=1").encode() in f.read().split(b"\0")
    except OSError:
        return False


def _lower_session(pid: str) -> bool:
    """Set the autogroup of the session PID leads to nice 19; False to try again later (the kernel lets an unprivileged
    process change an autogroup once a 100 ms, system-wide)."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(IDLEST))
    except BlockingIOError:
        return False
    except OSError:
        pass  # gone, or a kernel without autogroups (where nice 19, inherited, is the weight)
    return True


class Watcher(threading.Thread):
    """Puts each new session under ROOT_PID (by parentage, or by MARK in its environment) at autogroup nice 19."""

    def __init__(self, root_pid: int):
        super().__init__(daemon=True, name="idle-weight")
        self.tree = {root_pid}
        self.seen: set[str] = set()
        self.again: set[str] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(POLL_S):
            self.poll()

    def poll(self) -> None:
        live = {name for name in os.listdir("/proc") if name.isdigit()}
        self.seen &= live
        self.again &= live
        self.tree &= {int(pid) for pid in live}
        for pid in sorted(live - self.seen, key=int):  # (a parent's pid is smaller but where pids wrap)
            self.seen.add(pid)
            stat = _stat(pid)
            if stat is None:
                continue
            parent, session = stat
            if parent in self.tree or _marked(pid):
                self.tree.add(int(pid))
                if session == int(pid):
                    self.again.add(pid)
        self.again = {pid for pid in self.again if not _lower_session(pid)}


def _shown(command: list[str]) -> str:
    return "python " + " ".join(f'"{a}"' if " " in a else a for a in command[1:])


def _run_serial() -> int:
    for command in (PARALLEL, QUIET):
        print("$", _shown(command), flush=True)
        rc = subprocess.call(command, cwd=ROOT)
        if rc:
            return rc
    return 0


def at_idle_weight(command: list[str], out) -> tuple[subprocess.Popen, Watcher]:
    """Start `command` (its output to the file `out`) at the lowest weight, itself and all it starts: a session of
    its own at nice 19, watched. Stop the watcher (`.done.set()`) once the process has ended."""
    proc = subprocess.Popen(command, cwd=ROOT, env={**os.environ, MARK: "1"}, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=lambda: os.nice(IDLEST))
    watcher = Watcher(proc.pid)
    watcher.poll()
    watcher.start()
    return proc, watcher


def _run_together() -> int:
    log = tempfile.NamedTemporaryFile("w+b", prefix="disttrace-suite-", suffix=".log", delete=False)
    print(f"$ {_shown(PARALLEL)}  (at idle weight, beside the quiet part; its output, in {log.name}, follows "
          "the quiet part's)", flush=True)
    rest, watcher = at_idle_weight(PARALLEL, log)
    try:
        print("$", _shown(QUIET), flush=True)
        quiet_rc = subprocess.call(QUIET, cwd=ROOT)
        rest_rc = rest.wait()
    except KeyboardInterrupt:
        os.killpg(rest.pid, signal.SIGINT)
        rest.wait()
        raise
    finally:
        watcher.done.set()
    print(f"\n$ {_shown(PARALLEL)}", flush=True)
    log.seek(0)
    sys.stdout.buffer.write(log.read())
    sys.stdout.flush()
    log.close()
    os.unlink(log.name)
    return quiet_rc or rest_rc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serial", action="store_true", help="the two parts one after the other")
    args = parser.parse_args()
    if args.serial or not Path("/proc/self/stat").exists():
        return _run_serial()
    return _run_together()


if __name__ == "__main__":
    sys.exit(main())
