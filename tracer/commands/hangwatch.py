"""Live hang diagnosis in `disttrace run`: print, while the job is still hung, who did not arrive where.

The launcher sees every local rank's trace file as it is written. Each rank's watchdog (watchdog.py) records
a "stacks" record when one of its ops has been in flight longer than the hang timeout, and every other rank
then records its own stacks too. When such a record appears, this monitor waits a moment for the others' stacks,
reads the trace as it is (the reader tolerates files being written), runs the analysis for its hang,
mismatch, died, error and unmatched-P2P problems (the wavefront: who entered, who never did and their last
event), and prints that with where each rank is now in its code. It kills the job only when asked
(--kill-on-hang).
Imports neither torch nor textual.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import orjson

from ..blackbox_files import newest_snapshot
from ..data.table import stacks_site
from ..data.load import find_rank_files
from ..format import META, RING_SUFFIX, SNAPSHOTS_DIR, STACKS, kind_marker

GRACE_S = 3.0  # how long to wait for the other ranks' stacks after the first report (they look every
#                record/watchdog.py's FLAG_EVERY ticks)
SNAPSHOT_WAIT_S = 5.0  # --kill-on-hang on a black box: how long the kill waits for every rank's hang snapshot
# The hang's snapshot is taken after its op began: at the first in-flight stacks record seen, now less the op's time
# in flight (`for_ns`) less this, for the record's way to the monitor (a poll, a flush), bounds the op's start from
# below; an earlier world's snapshots are older (a restart takes longer than this)
SEEN_LATE_NS = 2_000_000_000

_STACKS, _META = kind_marker(STACKS), kind_marker(META)  # only these records matter here: found unparsed


class HangMonitor(threading.Thread):
    def __init__(self, out_dir: str, timeout_s: float, proc_to_kill=None, stream=None):
        super().__init__(name="disttrace-hangwatch", daemon=True)
        self.out_dir, self.timeout_s, self.proc = out_dir, timeout_s, proc_to_kill
        self.stream = stream or sys.stderr
        self.offsets: dict[str, int] = {}
        self.rank_of: dict[str, int] = {}
        self.stacks: dict[int, dict] = {}   # rank -> latest stacks record
        self.first_report: float | None = None
        self.hang_since_ns = 0  # the wall clock before the reported hang's op began (await_snapshot)
        self.reported: set = set()
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.poll()
            except Exception as e:  # noqa: BLE001 - never disturb the job because of the monitor
                self.stream.write(f"disttrace: hang monitor stopped: {type(e).__name__}: {e}\n")
                return

    def poll(self) -> None:
        for path in find_rank_files(self.out_dir):
            self._tail(path)
        if self.first_report is not None and time.monotonic() - self.first_report >= GRACE_S:
            self.first_report = None
            self.diagnose()

    def _tail(self, path: str) -> None:
        start = self.offsets.get(path, 0)
        try:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
        except OSError:
            return
        data = data.split(b"\0", 1)[0]
        end = data.rfind(b"\n")
        if end < 0:
            return
        self.offsets[path] = start + end + 1
        for line in data[: end + 1].splitlines():
            if _STACKS not in line and _META not in line:
                continue
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if rec.get("k") == META:
                self.rank_of[path] = rec.get("rank")
            elif rec.get("k") == STACKS and path in self.rank_of:
                self.stacks[self.rank_of[path]] = rec
                if rec.get("reason") == "in_flight" and self.first_report is None:
                    self.first_report = time.monotonic()
                    self.hang_since_ns = time.time_ns() - int(rec.get("for_ns") or 0) - SEEN_LATE_NS

    def diagnose(self) -> None:
        lines = self.explain()
        key = tuple(lines[:2])
        if key in self.reported:
            return
        self.reported.add(key)
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        if self.proc is not None:
            self.await_snapshot()
            self.stream.write("disttrace: --kill-on-hang: stopping the job\n")
            self.stream.flush()
            kill_tree(self.proc.pid)

    def await_snapshot(self, wait_s: float = SNAPSHOT_WAIT_S) -> bool:
        """A black-box job's hang snapshot taken before it is killed: wait until this hang's snapshot (the newest
        "hang" one taken since its op began) holds every local rank's ring (each rank's watchdog copies its own
        within seconds of the trigger), `wait_s` at most. Whether it does (True too for a job without rings:
        nothing to wait for)."""
        if not any(f.endswith(RING_SUFFIX) for f in os.listdir(self.out_dir)):
            return True
        root, deadline = os.path.join(self.out_dir, SNAPSHOTS_DIR), time.monotonic() + wait_s
        while True:
            path = newest_snapshot(root, self.hang_since_ns, "hang")
            if path is not None:
                try:
                    held = sum(f.endswith(RING_SUFFIX) for f in os.listdir(path))
                except OSError:
                    held = 0
                if held >= len(self.rank_of):
                    return True
            if time.monotonic() >= deadline:
                self.stream.write("disttrace: --kill-on-hang: the hang's snapshot is not whole after "
                                  f"{wait_s:g} s; stopping the job anyway\n")
                return False
            time.sleep(0.1)

    def explain(self) -> list[str]:
        stuck = {r: s for r, s in self.stacks.items() if s.get("reason") == "in_flight"}
        secs = max((s.get("for_ns", 0) for s in stuck.values()), default=0) / 1e9
        head = (f"disttrace: HANG — rank{'s' if len(stuck) > 1 else ''} {_ranks(stuck)} "
                f"stuck in a collective or P2P op for {secs:.0f} s (over --hang-timeout {self.timeout_s:g} s); "
                f"the job is still running")
        lines = [head]
        lines += ["  " + m for m in self._problems()]
        lines.append("  where each rank is now:")
        for rank in sorted(self.stacks):
            lines.append(f"    rank {rank}: {stacks_site(self.stacks[rank])}")
        missing = sorted(set(self.rank_of.values()) - set(self.stacks))
        if missing:
            lines.append(f"    (no stacks yet from rank(s) {_ranks(missing)})")
        lines.append(f"  the trace so far is in {self.out_dir}: disttrace report {self.out_dir}")
        return lines

    def _problems(self) -> list[str]:
        try:
            from ..analysis import analyze
            from ..data.load import load_trace

            a = analyze(load_trace([self.out_dir], cache=False))  # a live trace: no store
        except Exception as e:  # noqa: BLE001
            return [f"(could not analyse the trace yet: {type(e).__name__}: {e})"]
        msgs = [f"{p.kind}: {p.message}" for p in a.problems if p.kind in ("hang", "unmatched", "mismatch", "died",
                                                                            "error")]
        return msgs or ["no rank has been waiting on another yet; see the stacks below"]


def _ranks(ranks) -> str:
    return ", ".join(str(r) for r in sorted(ranks))


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every process below it. Not SIGTERM: torchrun turns that into a SignalException and
    30 lines of traceback under the diagnosis, and the hung ranks could not end cleanly anyway. The tree is listed
    before the first kill, so that ranks orphaned by their launcher's death are found too (Linux: /proc)."""
    tree, children = [pid], _children()
    for p in tree:
        tree += children.get(p, [])
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return out
    for p in pids:
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])  # the command name may hold spaces and ')'
        except (OSError, ValueError, IndexError):
            continue
        out.setdefault(ppid, []).append(p)
    return out
