"""The README's test command: the quiet tests and the rest at once where the rest can be put at idle CPU weight,
else one after the other.

    python tests/run_suite.py [--serial]

The quiet tests' ground truths are timings (pairs of runs at one pace, waits within tolerances), so they want the
machine to themselves; the rest is bound by CPU (every job's ranks import torch) and does not care when it gets it.
Run one after the other, the two leave the quiet part's sleeping jobs' CPU idle. So the rest runs beside the quiet
part in a cgroup of its own at idle weight (`cpu.idle`: the kernel runs its tasks only where no other task wants
the CPU, and takes the CPU back the moment one wakes), made under this process's own cgroup for the run and
removed after it. Every process the rest starts stays in it, whatever its session (torchrun starts every rank in a
session of its own).

Where no such cgroup can be made (no permission: neither root nor a delegated cgroup; no `cpu.idle`: a kernel
before 5.15), the two parts run one after the other (`--serial`), as they do on request. Lower weights that need no
privilege are not enough: nice 19 loses to the kernel's autogroups (a session's share is its autogroup's), and an
autogroup at nice 19 still lets a background task keep the CPU for its slice when a quiet job's rank wakes: a
pipeline's prediction then missed in 2 of 6 runs, against none of 4 alone or in the cgroup (docs/PERFORMANCE.md).
The exit code is the first non-zero of the two parts' (pytest's own codes).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARALLEL = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadscope", "-m", "not quiet"]
QUIET = [sys.executable, "-m", "pytest", "-q", "-m", "quiet"]
CGROUPS = Path("/sys/fs/cgroup")


def idle_cgroup() -> tuple[Path | None, str]:
    """(a new cgroup at idle CPU weight under this process's own, or None, and why not)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError as e:
        return None, f"no /proc/self/cgroup ({e.strerror})"
    mine = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            mine[c] = path
    if "cpu" in mine and (CGROUPS / "cpu").is_dir():  # cgroup v1: the cpu controller's own hierarchy
        parent = CGROUPS / "cpu" / mine["cpu"].lstrip("/")
    elif "" in mine and (CGROUPS / "cgroup.controllers").exists():  # v2 (a child needs "cpu" in subtree_control)
        parent = CGROUPS / mine[""].lstrip("/")
    else:
        return None, "no cgroup with the cpu controller"
    made = parent / f"disttrace-tests-{os.getpid()}"
    try:
        made.mkdir()
    except OSError as e:
        return None, f"cannot make a cgroup under {parent} ({e.strerror})"
    try:
        (made / "cpu.idle").write_text("1")
    except OSError as e:
        made.rmdir()
        return None, f"cannot set {made}/cpu.idle ({e.strerror})"
    return made, ""


def at_idle_weight(command: list[str], out, cgroup: Path) -> subprocess.Popen:
    """Start `command` (its output to the file `out`) in `cgroup` (idle_cgroup's), in a session of its own."""
    procs = str(cgroup / "cgroup.procs")

    def enter() -> None:  # (in the child, before it runs anything: all it starts is born in the cgroup)
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    return subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=enter)


def remove(cgroup: Path) -> None:
    """Remove the cgroup once the processes left in it (a job a stopped run left behind) are gone."""
    try:
        left = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    except OSError:
        left = []
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for _ in range(50):
        try:
            cgroup.rmdir()
            return
        except OSError:
            time.sleep(0.1)


def _shown(command: list[str]) -> str:
    return "python " + " ".join(f'"{a}"' if " " in a else a for a in command[1:])


def _run_serial() -> int:
    for command in (PARALLEL, QUIET):
        print("$", _shown(command), flush=True)
        rc = subprocess.call(command, cwd=ROOT)
        if rc:
            return rc
    return 0


def _run_together(cgroup: Path) -> int:
    log = tempfile.NamedTemporaryFile("w+b", prefix="disttrace-suite-", suffix=".log", delete=False)
    print(f"$ {_shown(PARALLEL)}  (at idle weight, in {cgroup}, beside the quiet part; its output, in {log.name}, "
          "follows the quiet part's)", flush=True)
    rest = at_idle_weight(PARALLEL, log, cgroup)
    try:
        print("$", _shown(QUIET), flush=True)
        quiet_rc = subprocess.call(QUIET, cwd=ROOT)
        rest_rc = rest.wait()
    except KeyboardInterrupt:
        os.killpg(rest.pid, signal.SIGINT)
        rest.wait()
        raise
    finally:
        remove(cgroup)
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
    if args.serial:
        return _run_serial()
    cgroup, why = idle_cgroup()
    if cgroup is None:
        print(f"run_suite: the two parts one after the other: {why}", flush=True)
        return _run_serial()
    return _run_together(cgroup)


if __name__ == "__main__":
    sys.exit(main())
