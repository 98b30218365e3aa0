"""`disttrace snapshot DIR`: ask a running black-box job (`disttrace run --black-box --out DIR`) for a snapshot of
every rank's ring and rank file, wait for it, and say where it is. The job goes on.

The request is a file in the trace dir (format.SNAPSHOT_REQUEST, 0600): only a user who may write there can make
it, and a rank honours it only if it is its own user's. One rank of each node looks for it every 1.5 s, the first to
take it asks every rank through the job's store (record/snapshots.py).
"""

from __future__ import annotations

import argparse
import os
import socket
import time

import orjson

from ..errors import TraceError
from ..format import LEFT, RANK_FILE_SUFFIX, RING_SUFFIX, SNAPSHOT_REQUEST, is_rank_file, kind_marker
from ..blackbox_files import snapshot_root, snapshots
from ..data.load import runs_here


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = "disttrace snapshot [--timeout SECONDS] DIR"
    p.add_argument("trace", metavar="DIR", help="the trace dir of a job running under disttrace run --black-box")
    p.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS",
                   help="how long to wait for every rank's copy (default 15)")


def main(args) -> int:
    out = os.path.abspath(args.trace)
    if not os.path.isdir(out):
        raise TraceError(f"{args.trace}: no such directory")
    if args.timeout <= 0:
        raise TraceError("--timeout must be a number of seconds above 0")
    running = _running_ranks(out)
    root = snapshot_root(out)
    before = {n for _, n in snapshots(root)}
    request = os.path.join(out, SNAPSHOT_REQUEST)
    try:
        fd = os.open(request, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.write(fd, orjson.dumps({"wall_ns": time.time_ns(), "host": socket.gethostname(), "pid": os.getpid()}))
        os.close(fd)
    except FileExistsError:
        pass  # asked already, not answered yet: this one waits for that snapshot
    except OSError as e:
        raise TraceError(f"cannot ask the job through {out}: {e.strerror or e}") from None
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        new = [n for _, n in snapshots(root) if n not in before and n.endswith("-request")]
        if new:
            path = os.path.join(root, new[-1])
            have = sum(n.endswith(RING_SUFFIX) for n in os.listdir(path))
            if have >= running:
                print(f"disttrace: snapshot of {have} rank{'s' if have != 1 else ''} in {_shown(path)}")
                return 0
        time.sleep(0.1)
    if os.path.exists(request):
        try:
            os.unlink(request)
        except OSError:
            pass
        raise TraceError(f"no rank answered within {args.timeout:g} s: is the job running under "
                         f"disttrace run --black-box --out {args.trace}?")
    new = [n for _, n in snapshots(root) if n not in before]
    if not new:
        raise TraceError(f"the request was taken but no snapshot appeared within {args.timeout:g} s")
    path = os.path.join(root, new[-1])
    have = sum(n.endswith(RING_SUFFIX) for n in os.listdir(path))
    print(f"disttrace: snapshot of {have} of {running} ranks in {_shown(path)} (the others did not answer within "
          f"{args.timeout:g} s)")
    return 1


def _running_ranks(out: str) -> int:
    """How many of the trace dir's black-box ranks are still running (no "left" record; a local one's process
    alive); TraceError if none is."""
    stems = [n[: -len(RANK_FILE_SUFFIX)] for n in os.listdir(out) if is_rank_file(n)]
    rings = [s for s in stems if os.path.exists(os.path.join(out, s + RING_SUFFIX))]
    if not rings:
        raise TraceError(f"{out} holds no black-box trace (no rank's .ring): run the job with "
                         f"disttrace run --black-box --out DIR")
    host, running = socket.gethostname(), 0
    for s in rings:
        with open(os.path.join(out, s + RANK_FILE_SUFFIX), "rb") as f:
            data = f.read()
        if kind_marker(LEFT) in data:
            continue
        try:
            meta = orjson.loads(data[: data.index(b"\n")])
        except (ValueError, orjson.JSONDecodeError):
            meta = {}
        if meta.get("host") == host and not runs_here(meta):
            continue
        running += 1
    if not running:
        raise TraceError(f"the job traced in {out} is not running (every rank has left or died)")
    return running


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel
