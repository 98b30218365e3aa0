"""The cache policy: the store beside a trace, valid for the same inputs (paths, run, sources' sizes and mtimes,
the reader's code), else the trace is read and the store written for next time."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from ...errors import TraceError
from ...format import is_rank_file
from ..importers.runs import runs_here, scan
from ..table.event_table import EventTable
from ..table.memory import give_back_freed_memory
from ..table.progress import Progress
from . import codec
from .codec import STORE_VERSION, StoreError

CACHE_DIR = ".disttrace-cache"   # inside a trace dir
FILE_SUFFIX = ".disttrace.arrow"  # beside an events file
ENV = "DISTTRACE_CACHE"          # "0" turns the store off
RACY_NS = 2_000_000_000          # a source modified this recently is not cached (coarse file times)


@dataclass(frozen=True)
class StoreOrigin:
    """Where a table's store is and what it was made from (EventTable.origin): results derived from the table
    (the analysis) are kept beside it under the same fingerprint."""

    path: str
    fingerprint: dict = field(hash=False)

    def beside(self, kind: str) -> str:
        """The path of another file of this store: `kind` (e.g. "analysis") in place of "events"."""
        folder, name = os.path.split(self.path)
        if name.endswith(FILE_SUFFIX):
            return os.path.join(folder, name[:-len(FILE_SUFFIX)] + f".{kind}{FILE_SUFFIX}")
        return os.path.join(folder, kind + name[len("events"):])



class PartsFailed(Exception):
    """A build (a parallel first read, a merge of node stores) did not make the store: read the trace in process."""


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "no", "off", "false")


def source_digest(*places: str) -> str:
    """A digest of the sources in `places` (a folder: the .py files in it and in its subfolders, at any depth; a
    file), read once per process: what a file derived by this code (a store, a saved analysis) must have been made
    by, else it is stale."""
    key = tuple(places)
    if key not in _DIGESTS:
        h = hashlib.sha1(str(STORE_VERSION).encode())
        for place in places:
            for f in _sources(place):
                name = os.path.relpath(f, place) if os.path.isdir(place) else os.path.basename(f)
                with open(f, "rb") as fh:
                    h.update(name.encode() + b"\0" + fh.read())
        _DIGESTS[key] = h.hexdigest()[:16]
    return _DIGESTS[key]


def _sources(place: str) -> list[str]:
    """The .py files of a folder and its subfolders (a moved or renamed module changes the digest too), or a file."""
    if not os.path.isdir(place):
        return [place] if os.path.exists(place) else []
    found = []
    for root, dirs, names in os.walk(place):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found += [os.path.join(root, n) for n in sorted(names) if n.endswith(".py")]
    return found


_DIGESTS: dict[tuple[str, ...], str] = {}
_DATA = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tracer/data/


def _code_version() -> str:
    """The reader's code (data/ and its packages, the format and the units): a store written by another reader is
    stale."""
    return source_digest(_DATA, *(os.path.join(os.path.dirname(_DATA), f) for f in ("format.py", "units.py")))


def fingerprint(paths: list[str], run: int | None, sources: list[str]) -> tuple[dict, int]:
    """(what the store must have been made from: the paths, the run, each source's path, size and mtime_ns, the
    reader's code; the newest mtime_ns). The paths are the real ones (_real): however a user spells the trace, its
    store is the same (`disttrace run` stores /abs/trace, and then says "disttrace view trace")."""
    files, newest = [], 0
    real = _real()
    for p in sources:
        st = os.stat(p)
        files.append([real(p), st.st_size, st.st_mtime_ns])
        newest = max(newest, st.st_mtime_ns)
    return {"paths": [os.path.realpath(p) for p in paths], "run": run, "files": files, "code": _code_version()}, newest


def _real():
    """A source file's path made real as os.path.realpath makes it, its folder looked up once (a trace of 1,024
    rank files lies in a few folders)."""
    folders: dict[str, str] = {}

    def real(path: str) -> str:
        folder, name = os.path.split(path)
        if folder not in folders:
            folders[folder] = os.path.realpath(folder or ".")
        return os.path.join(folders[folder], name)
    return real


def cache_path(paths: list[str], run: int | None, is_dir: bool) -> str:
    """Where the store of these paths (trace dirs, or one events file) and run lives: TRACE/.disttrace-cache/
    events-v3[-runN][-HASH].arrow (HASH: of the dirs' real paths, for a trace of several nodes),
    FILE.disttrace.arrow."""
    tag = f"-run{run}" if run is not None else ""
    if not is_dir:
        return f"{paths[0]}{tag.replace('-', '.')}{FILE_SUFFIX}"
    if len(paths) > 1:
        tag += "-" + hashlib.sha1("\0".join(map(os.path.realpath, paths)).encode()).hexdigest()[:12]
    return os.path.join(paths[0], CACHE_DIR, f"events-v{STORE_VERSION}{tag}.arrow")


def cached_load(paths: list[str], run: int | None, sources: list[str], is_dir: bool,
                parse: Callable[[], EventTable], progress: Progress | None = None,
                build: Callable[[str, dict], None] | None = None, settled: bool = False) -> EventTable:
    """Open the valid store of this trace, or read the trace and write its store for next time, and open that:
    by `build(path, fingerprint)`, which writes a store file (a parallel read, data/store/parallel.py; it raises
    parallel.PartsFailed where the trace should be read in process), else by `parse()`. `settled`: no process
    writes the sources any more, so that the store is written even of files changed less than RACY_NS ago."""
    if _job_runs(sources):
        return parse()  # (a running job's files change under any store: a ring's map keeps its size, and its mtime
        # moves only when a written page was clean before)
    target = cache_path(paths, run, is_dir)
    try:
        fp, newest = fingerprint(paths, run, sources)
    except OSError:
        return parse()
    try:
        table = _open_valid(target, fp)
        if progress is not None:
            progress(1.0, "opened the trace store")
        return table
    except ImportError:
        return parse()
    except (StoreError, OSError):
        pass  # none, stale or damaged: read the trace, and write it anew
    started = time.time_ns() + (RACY_NS if settled else 0)

    def keep() -> bool:
        """Whether what was read may be stored: the sources did not change meanwhile, nor just before."""
        return fingerprint(paths, run, sources)[0] == fp and newest < started - RACY_NS

    if build is not None:
        table = _built(build, target, is_dir, fp, keep)
        if table is not None:
            return table
    table = parse()
    try:
        if keep():
            if is_dir:
                os.makedirs(os.path.dirname(target), exist_ok=True)
            codec.write_store(table, target, fp)
            # and opened as a re-open would: the parsed table's columns (the process's own memory) go,
            # the mapped ones come into memory only as they are read
            table = codec.read_store(target, fp)
            table.origin = StoreOrigin(target, fp)
            give_back_freed_memory()
    except Exception:  # noqa: BLE001 - the store is an optimisation: never fail the command for it
        pass
    return table


def _job_runs(sources: list[str]) -> bool:
    """Whether a rank file among `sources` is of a process that runs on this host now (importers/runs.py)."""
    for path in sources:
        if is_rank_file(os.path.basename(path)):
            try:
                rf = scan(path)
            except TraceError:
                continue
            if rf is not None and runs_here(rf.meta):
                return True
    return False


def _open_valid(target: str, fp: dict) -> EventTable:
    """The store at `target`, if it was made from what `fp` says (and is undamaged: codec.read_store checks its
    digest); else StoreError or OSError."""
    table = codec.read_store(target, fp)
    table.origin = StoreOrigin(target, fp)
    return table


def stored(paths: list[str], run: int | None, sources: list[str], is_dir: bool) -> EventTable | None:
    """The trace's valid store opened, as cached_load opens it, or None where it has none that holds (never a
    read of the trace itself): for opening a stored trace ahead, beside other work (the viewer's start)."""
    try:
        return _open_valid(cache_path(paths, run, is_dir), fingerprint(paths, run, sources)[0])
    except (StoreError, OSError, ImportError):
        return None


def _built(build: Callable[[str, dict], None], target: str, is_dir: bool, fp: dict,
           keep: Callable[[], bool]) -> EventTable | None:
    """The table that `build` writes as a store, opened; the store kept at `target` if `keep()` (the sources did
    not change meanwhile, nor just before). Written beside the trace, or in the temp dir where that cannot be (a
    read-only trace dir: the store is then opened and removed). None: read the trace in process (the build
    failed, or wrote nothing readable). Raises TraceError: the trace cannot be read."""
    import tempfile

    folders = [os.path.dirname(target) or ".", tempfile.gettempdir()]
    for folder in folders:
        try:
            if is_dir and folder == folders[0]:
                os.makedirs(folder, exist_ok=True)
            fd, tmp = codec.create_temp(folder)
            os.close(fd)
        except OSError:
            continue
        try:
            build(tmp, fp)
            give_back_freed_memory()  # (the merge's columns, hundreds of MB, freed but kept by the allocator)
            if folder == folders[0] and keep():
                os.replace(tmp, target)
                table = codec.read_store(target, fp)
                table.origin = StoreOrigin(target, fp)
                return table
            return codec.read_store(tmp, fp)
        except (PartsFailed, StoreError, OSError, ImportError):
            return None
        finally:
            try:
                os.unlink(tmp)  # (a table opened from it keeps its mapping)
            except OSError:
                pass
    return None


__all__ = ["CACHE_DIR", "ENV", "FILE_SUFFIX", "RACY_NS", "PartsFailed", "StoreOrigin", "cache_path", "cached_load", "enabled",
           "fingerprint", "source_digest", "stored"]
