"""The black box's files and options as both sides handle them: the recorder in the ranks (record/blackbox.py,
record/snapshots.py) and the commands (`disttrace run --black-box`, `disttrace snapshot`), which never import the
recorder. Torch-free.

Snapshots (docs/FORMAT.md, "The black box"): snapshots/NNNNNN-REASON/ in the trace dir, each a trace dir of its own
(0700, its files 0600), written whole (a temporary name, then a rename), the last K kept. Every path is made of the
trace dir, a number, a reason of format.SNAPSHOT_REASONS and file names of our own (never a name read from the
store or a file).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass

import orjson

from .format import (KEEP_SNAPSHOTS_DEFAULT, LEFT, RANK_FILE_SUFFIX, RING_DEFAULT_OPS, RING_SUFFIX, SNAPSHOT_INFO,
                     SNAPSHOT_REASONS, SNAPSHOTS_DIR, WINDOW_DEFAULT, is_rank_file, kind_marker, snapshot_dir_name)

_DIR = re.compile(r"^(\d{6,})-([a-z]+)$")
ENV = {"ring": "DISTTRACE_RING", "keep": "DISTTRACE_KEEP_SNAPSHOTS", "window": "DISTTRACE_WINDOW"}
RING_MAX_OPS = 10_000_000


@dataclass(frozen=True)
class Config:
    ring: int = RING_DEFAULT_OPS  # ops the ring holds at least
    keep: int = KEEP_SNAPSHOTS_DEFAULT  # snapshots kept
    by: str = "steps"  # windows: "steps" (every `every` steps; `every` seconds before the first marker) | "seconds"
    every: int = WINDOW_DEFAULT

    @classmethod
    def make(cls, ring=None, keep=None, window=None) -> "Config":
        """From the options' values (None: the default); ValueError with a one-line message if one is wrong.
        window: W (steps, or W seconds in a job that marks none) or "Ws" (seconds only)."""
        by, every = "steps", WINDOW_DEFAULT
        if window is not None:
            text = str(window).strip()
            by = "seconds" if text.endswith("s") else "steps"
            every = _positive(text.removesuffix("s"), "--window", "a number of steps, or of seconds as 30s", text)
        ring = RING_DEFAULT_OPS if ring is None else _positive(ring, "--ring", "a number of ops")
        if ring > RING_MAX_OPS:
            raise ValueError(f"--ring {ring}: at most {RING_MAX_OPS:,} ops")
        keep = KEEP_SNAPSHOTS_DEFAULT if keep is None else _positive(keep, "--keep-snapshots", "a number")
        return cls(ring, keep, by, every)

    def env(self) -> dict:
        return {ENV["ring"]: str(self.ring), ENV["keep"]: str(self.keep),
                ENV["window"]: f"{self.every}{'s' if self.by == 'seconds' else ''}"}

    @classmethod
    def from_env(cls, environ=os.environ) -> "Config | None":
        """The config `disttrace run --black-box` passed (None: not in black-box mode)."""
        if environ.get("DISTTRACE_BLACK_BOX") != "1":
            return None
        return cls.make(environ.get(ENV["ring"]), environ.get(ENV["keep"]), environ.get(ENV["window"]))

    def meta(self, ring_bytes: int) -> dict:
        window = {"by": self.by, "every": self.every}
        if self.by == "steps":
            window["seconds"] = self.every  # before the first step marker (or in a job that marks none)
        return {"ring_bytes": ring_bytes, "ring_ops": self.ring, "window": window, "keep_snapshots": self.keep}


def _positive(value, option: str, what: str, shown=None) -> int:
    shown = value if shown is None else shown
    try:
        n = int(str(value))
    except ValueError:
        raise ValueError(f"{option} {shown}: expected {what}") from None
    if n < 1:
        raise ValueError(f"{option} {shown}: expected {what}, at least 1")
    return n


def reason(value) -> str:
    """A snapshot's reason as a directory's name may hold it: one of format.SNAPSHOT_REASONS, else "request"."""
    return value if value in SNAPSHOT_REASONS else "request"


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
    number = _number(root, info)
    info = {**info, "number": number}
    path = os.path.join(root, snapshot_dir_name(number, reason(info.get("reason"))))
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.path.islink(path):
        raise OSError(f"{path} is a link")
    _write_new(os.path.join(path, SNAPSHOT_INFO), orjson.dumps(info), exclusive=True)
    for name, data in files.items():
        _write_new(os.path.join(path, os.path.basename(name)), data)
    prune(root, keep, files)
    return path


_AFTER: dict[str, int] = {}  # a world's token -> the number of the last snapshot of earlier worlds, as first seen


def _number(root: str, info: dict) -> int:
    """The snapshot's number on disk. The job's store counts snapshots from 1 in each world (a job that makes a new
    process group, torchrun restarting its workers after a failure: the failure's snapshot is on disk): a world's
    numbers (its token, `world`, set by snapshots.request) follow those of the earlier worlds' snapshots in the trace
    dir, as this process first saw them, so that a new world's snapshot never lands in an earlier one's directory
    (the ranks of one node see one disk, and agree)."""
    seq, world = int(info["seq"]), info.get("world")
    if world is None:  # (the launcher's own "exit" snapshot: numbered from the disk already)
        return seq
    if world not in _AFTER:
        _AFTER[world] = max((n for n, name in snapshots(root)
                             if (_info(os.path.join(root, name)) or {}).get("world") != world), default=0)
    return _AFTER[world] + seq


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


def newest_snapshot(root: str, since_ns: int, of_reason: str | None = None) -> str | None:
    """The path of the newest snapshot in `root` taken at or after `since_ns` (its info's wall clock), of the reason
    `of_reason` where given; None if there is none. A trace dir holds the snapshots of earlier worlds (torchrun
    restarting its workers) and of earlier runs: the newest on disk need not be this job's. A snapshot whose info
    is not written yet is passed over."""
    for _number_, name in reversed(snapshots(root)):
        if of_reason is not None and _DIR.match(name).group(2) != of_reason:
            continue
        info = _info(os.path.join(root, name))
        if info is None:
            continue
        # numbered in the order they were taken: the first one older than since_ns ends the search
        return os.path.join(root, name) if info.get("wall_ns", 0) >= since_ns else None
    return None


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
    path = newest_snapshot(root, int(started_wall * 1e9))
    if path is not None:
        info = _info(path)
        add = [s for s in dead if not os.path.exists(os.path.join(path, s + RING_SUFFIX))]
    else:
        taken = snapshots(root)
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
