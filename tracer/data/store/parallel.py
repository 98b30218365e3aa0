"""The first read of a large trace, split across worker processes, straight into the trace store.

Parsing JSON is CPU-bound Python, so threads would not help: each worker is a process (`python -m` this module)
that reads a share of the trace (whole rank files of a trace dir, or a byte range of an events file, cut at line
starts) with the in-process readers into an EventTable of its own, and writes it as a store part (an Arrow IPC
file like the store, data/store/). The parent then merges the parts in Arrow (no per-event Python object): the
groups and the text columns' dictionaries made one, the rows sorted as EventTable.sort sorts them, the table-level
records (ranks, warnings, notes, stacks) joined in order, and writes the trace store. The shares are contiguous and
merged in file order, so the table is the one the in-process reader makes (tests/data/test_store.py compares them).
A share is at most MAX_SHARE_BYTES and at most workers() run at once, so that what the workers hold together stays
bounded whatever the trace's size.

Used where it pays (data/load.py): a first read that writes the store, of a trace of at least PARALLEL_BYTES, with
more than one CPU. Anything odd in the machinery (a worker killed, a value the store cannot hold) makes the caller
read in process instead: this is an optimisation, never a new way to fail. A worker's TraceError (a newer format)
is the reader's message, raised here.

Imports neither torch nor textual; pyarrow and numpy on use.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
from dataclasses import dataclass, field

import orjson

from ...errors import TraceError
from ..importers import events_files, rank_files
from ..importers.ring import has_ring, ring_path
from ..table.event_table import EventTable
from ..table.memory import gc_paused
from ..table.progress import Progress, part_of
from .cache import PartsFailed
from .codec import StoreError, write_store
from .merge import merge_parts

PARALLEL_BYTES = 48 << 20  # smaller traces are read in process: the workers' start costs more than they save
SHARE_BYTES = 24 << 20     # no worker gets less than this
MAX_SHARE_BYTES = 256 << 20  # nor more: a worker holds its share as a table, a few times its JSON
MAX_WORKERS = 8            # at once; a large trace has more shares than workers, read a few at a time
ENV = "DISTTRACE_WORKERS"  # how many workers to use ("1": read in process); default: the CPUs


@dataclass
class Plan:
    """A parallel read: the workers' shares (specs), and what the parent found before splitting (the trace's runs,
    its run, the warnings of finding them), kept in `head`, an empty table the parts are merged after."""

    kind: str                 # "dirs" or "events"
    paths: list[str]          # as the user gave them (the messages name them)
    shares: list[dict]
    head: EventTable = field(default_factory=EventTable)


def workers() -> int:
    """How many workers a read may use: DISTTRACE_WORKERS, else the CPUs this process may run on; at most
    MAX_WORKERS."""
    try:
        n = int(os.environ[ENV])
    except (KeyError, ValueError):
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
    return max(1, min(n, MAX_WORKERS))


def _how_many(size: int) -> int:
    """How many shares a trace of `size` bytes is read in: one per worker, more where a worker's share would
    exceed MAX_SHARE_BYTES (the workers' memory together is what a first read needs, whatever the trace's size)."""
    if size < PARALLEL_BYTES:
        return 1
    return max(min(workers(), max(1, size // SHARE_BYTES)), -(-size // MAX_SHARE_BYTES))


def plan_trace_dirs(paths: list[str], run: int | None) -> Plan | None:
    """The shares of a trace dir read: its run's rank files in contiguous runs of about equal bytes. None: too
    small (or one file) to split."""
    head = EventTable()
    files = rank_files.run_files(paths, head, run)
    # (a black-box rank's bytes are mostly its ring's)
    sizes = [max(_file_size(f) + (_file_size(ring_path(f)) if has_ring(f) else 0), 1) for f in files]
    k = min(_how_many(sum(sizes)), len(files))
    if k < 2:
        return None
    # k contiguous shares, each cut at the file boundary nearest its even share of the bytes (and never empty: a
    # small file first, as a killed rank leaves, must not leave the rest in one share)
    before = [0]
    for size in sizes:
        before.append(before[-1] + size)
    cuts = [0]
    for j in range(1, k):
        lo, hi = cuts[-1] + 1, len(files) - (k - j)
        cuts.append(min(range(lo, hi + 1), key=lambda b: abs(before[b] * k - before[-1] * j)))
    cuts.append(len(files))
    return Plan("dirs", list(paths), [{"files": files[a:b]} for a, b in zip(cuts, cuts[1:])], head)


def plan_events_file(path: str, run: int | None) -> Plan | None:
    """The shares of an events file: byte ranges cut at line starts. None: too small to split."""
    size = _file_size(path)
    k = _how_many(size)
    if k < 2:
        return None
    head = EventTable()
    with open(path, "rb") as fh:
        keep = events_files.run_to_keep(path, fh, run, head)
        cuts = [0]
        for j in range(1, k):
            fh.seek(max(size * j // k - 1, cuts[-1]))
            fh.readline()  # on to the next line's start
            cuts.append(min(fh.tell(), size))
        cuts.append(size)
    shares = [{"range": [a, b], "run": keep} for a, b in zip(cuts, cuts[1:]) if b > a]
    return Plan("events", [path], shares, head) if len(shares) > 1 else None


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# -- the parent -----------------------------------------------------------------------------------------------

def read_parts(plan: Plan, folder: str, progress: Progress | None = None) -> list[str]:
    """Run the plan's workers (their parts written in `folder`); the parts' paths, in order. Raises TraceError
    (a worker's reader said the trace cannot be read) or PartsFailed."""
    _remove_stale_parts(folder)
    token = f"{os.getpid()}-{os.urandom(4).hex()}"
    outs = [os.path.join(folder, f"{_PART_PREFIX}{token}-{k}.arrow") for k in range(len(plan.shares))]
    procs: dict[int, subprocess.Popen] = {}  # the running workers, by share
    codes: list[int | None] = [None] * len(outs)
    sel = selectors.DefaultSelector()
    lanes = workers()
    done = [0.0] * len(outs)
    errs = [b""] * len(outs)
    open_pipes: dict[int, int] = {}

    def start(k: int) -> None:
        spec = dict(plan.shares[k], kind=plan.kind, path=plan.paths[0], out=outs[k], parent=os.getpid())
        p = subprocess.Popen([sys.executable, "-m", __spec__.name], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs[k] = p
        p.stdin.write(orjson.dumps(spec))
        p.stdin.close()
        sel.register(p.stdout, selectors.EVENT_READ, (k, "out"))
        sel.register(p.stderr, selectors.EVENT_READ, (k, "err"))
        open_pipes[k] = 2

    try:
        waiting = list(range(len(outs)))
        for _ in range(min(lanes, len(waiting))):
            start(waiting.pop(0))
        import numpy  # noqa: F401 - the merge's, loaded while the workers read (this process waits anyway)
        import pyarrow.compute  # noqa: F401

        while open_pipes:
            for key, _ in sel.select():
                k, which = key.data
                chunk = os.read(key.fileobj.fileno(), 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_pipes[k] -= 1
                    if not open_pipes[k]:  # this worker is done: the next share takes its place
                        del open_pipes[k]
                        p = procs.pop(k)
                        codes[k] = p.wait()
                        p.stdout.close()
                        p.stderr.close()
                        if codes[k]:
                            waiting.clear()  # (it failed: the read is over)
                        elif waiting:
                            start(waiting.pop(0))
                elif which == "err":
                    errs[k] = (errs[k] + chunk)[-4000:]
                else:
                    last = chunk.rstrip().rsplit(b"\n", 1)[-1]
                    try:
                        done[k] = float(last)
                    except ValueError:
                        pass
                    if progress is not None:
                        progress(sum(done) / len(done), "reading (%d processes)" % min(lanes, len(outs)))
    except BaseException:
        for p in procs.values():
            p.kill()
            p.wait()
        _remove(outs)
        raise
    finally:
        sel.close()
        for p in procs.values():
            for pipe in (p.stdout, p.stderr):
                pipe.close()
    for k, code in enumerate(codes):
        if code == _TRACE_ERROR:
            _remove(outs)
            raise TraceError(errs[k].decode(errors="replace").strip())
    if any(codes):
        _remove(outs)
        k = next(k for k, c in enumerate(codes) if c)
        raise PartsFailed(f"worker {k} exited with {codes[k]}: {errs[k].decode(errors='replace')[-500:]}")
    return outs


_PART_PREFIX = ".part-"  # a part's name: .part-PID-RANDOM-K.arrow, PID the parent's


def _remove_stale_parts(folder: str) -> None:
    """Remove the parts that a parent killed while it merged them left behind (its PID is gone)."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(_PART_PREFIX) and n.endswith(".arrow")]
    except OSError:
        return
    for name in names:
        try:
            os.kill(int(name[len(_PART_PREFIX):].split("-", 1)[0]), 0)
        except ProcessLookupError:
            _remove([os.path.join(folder, name)])
        except (ValueError, OSError):
            pass


def _remove(paths: list[str]) -> None:
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


def build(plan: Plan, target: str, fingerprint: dict, progress: Progress | None = None) -> None:
    """Read the trace by `plan` in worker processes and write its trace store to `target` (store.write_store's
    file: what read_store opens). Raises TraceError (the trace cannot be read: the reader's message) or PartsFailed
    (read it in process)."""
    folder = os.path.dirname(target) or "."
    try:
        parts = read_parts(plan, folder, part_of(progress, 0.0, 0.9))
    except OSError as e:
        raise PartsFailed(f"cannot start the workers: {e}") from None
    try:
        if progress is not None:
            progress(0.9, "merging")
        merge_parts(parts, plan.head, target, fingerprint, _finish(plan))
    except StoreError as e:
        raise PartsFailed(f"cannot merge the parts: {e}") from None
    finally:
        _remove(parts)


def _finish(plan: Plan):
    """What the reader says of the whole trace once the parts' records are joined (`parts`: each part's "part"
    record): the events file's one warning of malformed lines, each rank's source; TraceError when nothing was read
    (the in-process reader's words)."""
    def finish(table: EventTable, n: int, parts: list[dict]) -> None:
        if plan.kind == "dirs":
            if not sum(p["read"] for p in parts):
                raise TraceError(rank_files.no_readable([f for s in plan.shares for f in s["files"]]))
        else:
            events_files.events_read(plan.paths[0], table, n, sum(p["bad"] for p in parts),
                                   next((p["first_bad"] for p in parts if p["first_bad"]), ""))
        if not n:
            raise TraceError(events_files.no_events(plan.paths))
    return finish


# -- a worker -------------------------------------------------------------------------------------------------

_TRACE_ERROR = 3


def _work(spec: dict) -> int:
    table = EventTable()
    last = [0.0]

    def progress(fraction: float, label: str) -> None:
        if os.getppid() != spec["parent"]:  # the reader that wanted this is gone (a viewer quit while loading)
            os._exit(1)
        if fraction - last[0] >= 0.02 or fraction >= 1.0:
            last[0] = fraction
            os.write(1, b"%.3f\n" % fraction)

    try:
        if spec["kind"] == "dirs":
            with gc_paused():
                part = {"read": rank_files.read_rank_files(spec["files"], table, progress)}
        else:
            a, b = spec["range"]
            bad, first_bad = events_files.read_range(spec["path"], a, b, table, spec["run"], progress)
            part = {"bad": bad, "first_bad": first_bad}
    except TraceError as e:
        sys.stderr.write(str(e))
        return _TRACE_ERROR
    write_store(table, spec["out"], {}, part=part)
    return 0


if __name__ == "__main__":
    try:  # batch work: a viewer showing the trace's head meanwhile answers its keys first (data/store/head.py)
        os.nice(10)
    except OSError:
        pass
    sys.exit(_work(orjson.loads(sys.stdin.buffer.read())))


__all__ = ["ENV", "PARALLEL_BYTES", "Plan", "build", "plan_events_file", "plan_trace_dirs",
           "read_parts", "workers"]
