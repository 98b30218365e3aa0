"""The black box's snapshots: every rank's ring and rank file as they were when something happened.

A snapshot is a trace dir of its own, snapshots/NNNNNN-REASON/ in the job's trace dir (docs/FORMAT.md, "The black
box"). Any rank's trigger (a hang its watchdog saw, its uncaught exception, SIGUSR1, `disttrace snapshot DIR`)
becomes a snapshot of every rank through the job's c10d store, as the watchdog's hang flag does: the trigger adds 1
to a counter key (its new value is the snapshot's number) and sets the reason under that number; every rank's
watchdog thread looks at the counter every 1.5 s and copies its own files (a thread of its own: it runs while the
job's thread is blocked in C++). Each rank keeps the last K snapshots' files of its own.

Only the job's user: the directories are 0700, the files 0600, the request file of `disttrace snapshot` is
honoured only when its owner is the rank's user, and every path is made of the trace dir, a number, a reason of
format.SNAPSHOT_REASONS and the rank's own file names (never a name read from the store or a file).
"""

from __future__ import annotations

import os
import re
import shutil
import time

import orjson

from ..format import (LEFT, RANK_FILE_SUFFIX, RING_SUFFIX, SNAPSHOT_INFO, SNAPSHOT_REASONS, SNAPSHOT_REQUEST,
                      SNAPSHOTS_DIR, is_rank_file, kind_marker, snapshot_dir_name)

COUNTER = "disttrace/snapshot"  # the store's counter: the last snapshot's number
ACKS_WAIT_S = 5.0  # how long a rank that dies of an exception waits for the others' copies
_DIR = re.compile(r"^(\d{6,})-([a-z]+)$")


# -- the store's protocol ---------------------------------------------------------------------------------------
def request(store, reason: str, rank: int) -> tuple[int, dict]:
    """Ask every rank for a snapshot: (its number, its info)."""
    seq = int(store.add(COUNTER, 1))
    info = {"seq": seq, "reason": reason, "by_rank": rank, "wall_ns": time.time_ns()}
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
                 "wall_ns": int(info.get("wall_ns", time.time_ns()))}


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


def _reason(value) -> str:
    return value if value in SNAPSHOT_REASONS else "request"


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


# -- the copies -------------------------------------------------------------------------------------------------
def snapshot_root(out: str) -> str:
    root = os.path.join(out, SNAPSHOTS_DIR)
    os.makedirs(root, mode=0o700, exist_ok=True)
    if os.path.islink(root) or not os.path.isdir(root):
        raise OSError(f"{root} is not a directory of disttrace's")
    return root


def write_snapshot(out: str, info: dict, files: dict[str, bytes], keep: int) -> str:
    """Write `files` (name -> bytes) into the snapshot `info` names; then keep only the last `keep` snapshots of
    these names. Returns the snapshot's path."""
    root = snapshot_root(out)
    path = os.path.join(root, snapshot_dir_name(int(info["seq"]), _reason(info.get("reason"))))
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.path.islink(path):
        raise OSError(f"{path} is a link")
    _write_new(os.path.join(path, SNAPSHOT_INFO), orjson.dumps(info), exclusive=True)
    for name, data in files.items():
        _write_new(os.path.join(path, os.path.basename(name)), data)
    prune(root, keep, files)
    return path


def _write_new(path: str, data: bytes, exclusive: bool = False) -> None:
    """Write a file whole (0600): through a temporary name and a rename, so that a reader never sees half of it;
    `exclusive`: only if it does not exist."""
    if exclusive and os.path.lexists(path):
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def snapshots(root: str) -> list[tuple[int, str]]:
    """(number, name) of the snapshots under root, oldest first."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted((int(m.group(1)), n) for n in names if (m := _DIR.match(n)))


def prune(root: str, keep: int, names) -> None:
    """Remove the files `names` from all but the last `keep` snapshots; a snapshot left with its info alone goes."""
    for _seq, name in snapshots(root)[:-keep] if keep > 0 else snapshots(root):
        d = os.path.join(root, name)
        for n in names:
            try:
                os.unlink(os.path.join(d, os.path.basename(n)))
            except OSError:
                pass
        try:
            rest = os.listdir(d)
            if rest in ([], [SNAPSHOT_INFO]):
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            pass


# -- the launcher, after the job failed ------------------------------------------------------------------------
def add_dead_ranks(out: str, started_wall: float, keep: int) -> str | None:
    """`disttrace run`, once a black-box job failed: the ranks that died without leaving (a SIGKILL, a C++ abort,
    torchrun's SIGTERM) took no snapshot, but their rings are on disk. Copy them into the snapshot taken when the job
    failed (the last one since the job started), or, if none was, into a new "exit" snapshot of every rank. Returns
    the snapshot's path (None: nothing to add)."""
    stems = sorted(n[: -len(RANK_FILE_SUFFIX)] for n in os.listdir(out) if is_rank_file(n)
                   and os.path.exists(os.path.join(out, n[: -len(RANK_FILE_SUFFIX)] + RING_SUFFIX)))
    dead = [s for s in stems if kind_marker(LEFT) not in _read(os.path.join(out, s + RANK_FILE_SUFFIX))]
    if not dead:
        return None
    root = snapshot_root(out)
    taken = snapshots(root)
    info = _info(os.path.join(root, taken[-1][1])) if taken else None
    if info is not None and info.get("wall_ns", 0) >= started_wall * 1e9:
        path = os.path.join(root, taken[-1][1])
        add = [s for s in dead if not os.path.exists(os.path.join(path, s + RING_SUFFIX))]
    else:
        seq = (taken[-1][0] if taken else 0) + 1
        info = {"seq": seq, "reason": "exit", "by_rank": -1, "wall_ns": time.time_ns()}
        path, add = os.path.join(root, snapshot_dir_name(seq, "exit")), stems
    files = {}
    for s in add:
        files[s + RANK_FILE_SUFFIX] = _read(os.path.join(out, s + RANK_FILE_SUFFIX)).rstrip(b"\0")
        files[s + RING_SUFFIX] = _read(os.path.join(out, s + RING_SUFFIX))
    if files:
        write_snapshot(out, info, files, keep)
    return path


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _info(path: str) -> dict | None:
    try:
        return orjson.loads(_read(os.path.join(path, SNAPSHOT_INFO)))
    except orjson.JSONDecodeError:
        return None
