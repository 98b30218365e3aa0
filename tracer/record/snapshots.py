"""The black box's snapshots: every rank's ring and rank file as they were when something happened.

A snapshot is a trace dir of its own, snapshots/NNNNNN-REASON/ in the job's trace dir (docs/FORMAT.md, "The black
box"). Any rank's trigger (a hang its watchdog saw, its uncaught exception, SIGUSR1, `disttrace snapshot DIR`)
becomes a snapshot of every rank through the job's c10d store, as the watchdog's hang flag does: the trigger adds 1
to a counter key (its new value is the snapshot's number) and sets the reason under that number; every rank's
watchdog thread looks at the counter every 1.5 s and copies its own files (a thread of its own: it runs while the
job's thread is blocked in C++). The snapshots' files: blackbox_files.py (the launcher and `disttrace snapshot`
handle them too).

Only the job's user: the directories are 0700, the files 0600, the request file of `disttrace snapshot` is
honoured only when its owner is the rank's user, and every path is made of the trace dir, a number, a reason of
format.SNAPSHOT_REASONS and the rank's own file names (never a name read from the store or a file).
"""

from __future__ import annotations

import os
import time

import orjson

from ..blackbox_files import reason as _reason
from ..format import SNAPSHOT_REQUEST

COUNTER = "disttrace/snapshot"  # the store's counter: the last snapshot's number
WORLD = f"{COUNTER}/world"  # this world's token: set by its first request
ACKS_WAIT_S = 5.0  # how long a rank that dies of an exception waits for the others' copies


# -- the store's protocol ---------------------------------------------------------------------------------------
def request(store, reason: str, rank: int) -> tuple[int, dict]:
    """Ask every rank for a snapshot: (its number in this world, its info, with the world's token: the first
    request's, kept in the store, so that the snapshots' numbers on disk follow an earlier world's:
    blackbox_files.write_snapshot)."""
    seq = int(store.add(COUNTER, 1))
    mine = f"{time.time_ns()}-{os.getpid()}"
    world = store.compare_set(WORLD, "", mine)
    info = {"seq": seq, "reason": reason, "by_rank": rank, "wall_ns": time.time_ns(),
            "world": (world.decode() if isinstance(world, bytes) else str(world)) or mine}
    store.set(f"{COUNTER}/{seq}", orjson.dumps(info))
    return seq, info


def poll(store, seen: int) -> tuple[int, dict | None]:
    """The newest snapshot asked for after `seen`: (its number, its info), or (seen, None). One request to the
    store when nothing is new (store.add of 0 reads the counter)."""
    seq = int(store.add(COUNTER, 0))
    if seq <= seen:
        return seen, None
    key = f"{COUNTER}/{seq}"
    if not store.check([key]):
        return seen, None  # counted, its info not set yet: the next look
    try:
        info = orjson.loads(store.get(key))
    except orjson.JSONDecodeError:
        info = {}
    return seq, {"seq": seq, "reason": _reason(info.get("reason")), "by_rank": int(info.get("by_rank", -1)),
                 "wall_ns": int(info.get("wall_ns", time.time_ns())), "world": _token(info.get("world"))}


def _token(value) -> str | None:
    """A world's token read from the store's info: digits and a dash, else none (never a path part)."""
    return value if isinstance(value, str) and len(value) < 64 and all(c.isdigit() or c == "-" for c in value) \
        else None


def ack(store, seq: int) -> None:
    store.add(f"{COUNTER}/{seq}/done", 1)


def wait_acks(store, seq: int, world: int, timeout_s: float = ACKS_WAIT_S) -> int:
    """Wait until `world` ranks have taken snapshot seq (or timeout_s): how many did."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = int(store.add(f"{COUNTER}/{seq}/done", 0))
        if done >= world or time.monotonic() >= deadline:
            return done
        time.sleep(0.05)


# -- `disttrace snapshot DIR`'s request file ---------------------------------------------------------------------
def claim_request(out: str, rank: int) -> bool:
    """Whether a request file of the job's user is in the trace dir; the first rank to rename it away has it."""
    path = os.path.join(out, SNAPSHOT_REQUEST)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    taken = f"{path}.{rank}"
    try:
        os.rename(path, taken)  # atomic: one rank wins
    except OSError:
        return False
    try:
        os.unlink(taken)
    except OSError:
        pass
    return st.st_uid == os.getuid() and not os.path.islink(taken)
