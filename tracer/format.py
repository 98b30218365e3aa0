"""The trace format's one home: its version, the rank files' names, and which stack frames are the user's.

docs/FORMAT.md describes the records; what both the recorder (record/, in rank processes) and the readers (data/,
commands/) must agree on is defined here, once. Imports neither torch nor anything of disttrace's: every layer may
import it.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import sysconfig
import tempfile

# The on-disk format's version: the "v" of a rank file's meta record. A reader refuses a newer one.
FORMAT_VERSION = 2
# The normalized events' version (the "v" of each line `disttrace events` prints; docs/FORMAT.md). 3: the `run` key
EVENTS_VERSION = 3

# -- records ---------------------------------------------------------------------------------------
# A rank file is JSON Lines; each record's "k" says its kind (docs/FORMAT.md lists their keys).
META, GROUP = "meta", "group"                 # the rank and its process; a process group it used
BEGIN, END, WAIT, SUMMARY = "b", "e", "w", "s"  # an op issued, an op ended, a wait() on it, a tensor summary
STEP, CLOCK, LEFT, STACKS = "step", "clock", "left", "stacks"  # a step marker; clock offsets; how the rank left;
#                                                                  all threads' stacks (the watchdog, on a hang)


# -- the op records' fields ------------------------------------------------------------------------
# Every key an op's records may hold (docs/FORMAT.md), "k" first. The one list of each: the writer's templates
# (record/op_records.py) write only these, the careful reader (data/importers/rank_files.py) and the fast one's
# structs (data/importers/rank_batches.py) read exactly these; tests/test_format_fields.py holds them to it.
BEGIN_FIELDS = ("k", "i", "op", "t", "api", "g", "gs", "ps", "root", "peer", "tag", "bytes", "dtype", "shape",
                "async", "site", "origin", "th", "in")
END_FIELDS = ("k", "i", "t", "seq", "st", "err", "peer", "out", "bound", "dev")
WAIT_FIELDS = ("k", "i", "t0", "t1")
# A begin record's keys that no column holds: kept in the event's `extra` as they are
BEGIN_EXTRA = ("origin", "th")

# The normalized events' fields: a line of `disttrace events` (docs/FORMAT.md), what EventTable.row gives; the
# events-file readers (data/importers/events_files.py, event_batches.py) read these, and keep any other in `extra`.
EVENT_FIELDS = ("v", "run", "rank", "host", "op", "api", "group", "group_ranks", "group_seq", "seq", "peer", "root",
                "tag", "bytes", "dtype", "shape", "async_op", "start_ns", "end_ns", "wait_start_ns", "wait_end_ns",
                "status", "error", "in", "out", "site", "id", "step", "pair_seq")


def says_left(rec: dict) -> bool:
    """Whether a record says that its rank left the job alive (destroy_process_group, a clean exit): a "left"
    record, or in traces from before it, the one clock "end" measurement, taken at destroy_process_group."""
    k = rec.get("k")
    return k == LEFT or (k == CLOCK and rec.get("phase") == "end" and "window" not in rec)


def kind_marker(kind: str) -> bytes:
    """The bytes that every record of this kind holds (records are written compact, "k" first): for finding
    records in raw bytes without parsing every line."""
    return b'"k":"%s"' % kind.encode()


def record_prefix(kind: str) -> bytes:
    """The bytes every record of this kind starts with (compact, "k" first): `{"k":"b",`."""
    return b"{" + kind_marker(kind) + b","


# -- rank files ----------------------------------------------------------------------------------
RANK_FILE_PREFIX, RANK_FILE_SUFFIX = "rank-", ".jsonl"


def rank_file_stem(rank: int, host: str, pid: int, restart: str = "0") -> str:
    """A rank file's name without its suffix: rank-RRRRR-HOST-PID, with -rN for torchrun's N-th restart."""
    return f"{RANK_FILE_PREFIX}{rank:05d}-{host}-{pid}" + (f"-r{restart}" if restart != "0" else "")


def is_rank_file(name: str) -> bool:
    return name.startswith(RANK_FILE_PREFIX) and name.endswith(RANK_FILE_SUFFIX)


# -- the black box (`disttrace run --black-box`; docs/FORMAT.md "The black box") ----------------------------
# A black-box rank keeps its rank file (RANK_FILE_SUFFIX) for the records that are few (meta, group, clock, left,
# stacks, aggkey) and writes its op records ("b", "e", "w", "s") and step markers into a ring beside it: a file of
# fixed size, mapped MAP_SHARED so that it can be read (and copied) while the rank runs, is stuck, or after it died.
RING_SUFFIX = ".ring"
RING_MAGIC = b"DTRING01"
# The ring's header: magic, the offset of the next write (from the file's start), how many times the writer came
# back to the data's start, the file's size. Little-endian; the data (JSON lines, as in a rank file) follows it.
RING_HEADER = "<8sQQQ"
RING_DATA_AT = 64  # the header's room (its struct, then zeros)
# The aggregates of the whole run: fixed-size binary rows after a header (magic, then zeros to AGG_DATA_AT).
# A row: window, key id, flags, count, (pad), then total ns, max ns, bytes and the window's end (monotonic ns).
# Key ids are defined by "aggkey" records in the rank file; the window's own row has key AGG_WINDOW_KEY.
AGG_SUFFIX = ".agg"
AGG_MAGIC = b"DTAGG001"
AGG_DATA_AT = 16
AGG_ROW = "<IHHIIqqqq"
AGG_ROW_BYTES = struct.calcsize(AGG_ROW)  # 48
AGG_WINDOW_KEY = 0xFFFF
# What a rank's aggregates may write in a day (docs/USAGE.md, "Leave it on"): windows of steps widen to keep under
# AGG_HEADROOM of it, once a rank has written AGG_ALLOWANCE (a short run, a test, a demo, keeps the resolution asked
# for); a window of seconds that passes it is told the --window that keeps it under the same margin
AGG_DAY_BUDGET = 50_000_000
AGG_HEADROOM = 0.8
AGG_ALLOWANCE = 256 << 10
AGGKEY, WINDOW = "aggkey", "window"  # an aggregate key's definition; (in the JSON report) a window of the run
SNAPSHOTS_DIR = "snapshots"  # a black-box trace dir's snapshots: snapshots/NNNNNN-REASON/, each a trace dir
EXCEPTION = "exception"  # (a black-box rank file's record) the uncaught exception that ended the rank
COPIED = "copied"  # (the last record of a snapshot's copy of a rank file) when the rank copied its files: "t"
SNAPSHOT_INFO = "snapshot.json"  # in each snapshot: {"seq", "reason", "by_rank", "wall_ns", "world", "number"}
SNAPSHOT_REASONS = ("hang", "exception", "signal", "request", "exit")
# asked of a job that runs on: each rank's ring is copied at another moment (RankInfo.ring's "live")
LIVE_REASONS = ("signal", "request")
SNAPSHOT_REQUEST = ".snapshot-request"  # `disttrace snapshot DIR` asks the running job by this file in DIR
RING_OP_BYTES = 512  # --ring N: the ring is N x this, rounded up to RING_ROUND (an op's "b" and "e": 250-350 bytes)
RING_ROUND = 64 << 10
RING_DEFAULT_OPS, WINDOW_DEFAULT, KEEP_SNAPSHOTS_DEFAULT = 4000, 10, 8


# -- memory (`disttrace run --memory`; docs/FORMAT.md "Memory") -------------------------------------------------
# A rank traced with --memory writes its memory samples into a file of its own beside its rank file (the same stem):
# JSON Lines, "k" first, as a rank file's records. MEM_VERSION is its "memmeta" record's "v".
MEM_SUFFIX, MEM_VERSION = ".mem", 1
MEM_META, MEM_SAMPLE, MEM_WRAP, MEM_OPT = "memmeta", "m", "mwrap", "mopt"  # the file's head; a sample; a wrapper
#                                                  (DDP, FSDP2) found as the job made it; an optimizer at its 1st step
# A sample's bytes ("b"), by kind, in this order (one home: the recorder writes it, the reader and analysis read it)
MEM_KINDS = ("params", "grads", "optimizer", "activations", "temporaries", "comm")
# A sample's "at": at a collective (before it runs), the peak since the sample before, around an optimizer's step,
# at the end of tracing
MEM_AT_OP, MEM_AT_PEAK, MEM_AT_OPT, MEM_AT_END = "op", "peak", "opt", "end"


def snapshot_dir_name(seq: int, reason: str) -> str:
    """snapshots/NNNNNN-REASON: the seq-th snapshot of the job, taken for REASON (one of SNAPSHOT_REASONS)."""
    return f"{seq:06d}-{reason}"


# -- whose frame is it -----------------------------------------------------------------------------
# One rule for the recorder's call sites (record/callsite.py), the stacks a hung rank's watchdog wrote
# (data/table/stacks.stacks_site, read by the live hang diagnosis and the analysis) and Flight Recorder's frames.
USER, OWN, TORCH, GENERATED, SYSTEM = "user", "disttrace", "torch", "generated", "system"

OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep  # disttrace's tracer: its hooks sit in the stack
# ... and disttrace installed elsewhere (stacks recorded on another machine)
_OWN_INSTALLED = os.sep + "disttrace" + os.sep + "tracer" + os.sep


def _torch_dir() -> str | None:
    """This interpreter's torch package directory, found without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return os.path.abspath(locations[0]) + os.sep if locations else None


TORCH_DIR = _torch_dir()
# torch installed elsewhere (a trace recorded on another machine): found by its place among the packages
_TORCH_INSTALLED = (os.sep + "site-packages" + os.sep + "torch" + os.sep, os.sep + "dist-packages" + os.sep + "torch" + os.sep)
# The standard library (decorators, contextlib, functools, threading, runpy) and typing_extensions' @deprecated
# wrapper, which torch puts around some collectives: never the user's line, nor torch's. Stacks recorded on
# another machine name another standard library: its thread and module runners are known by their names.
_STDLIB = tuple({sysconfig.get_paths()["stdlib"] + os.sep, sysconfig.get_paths()["platstdlib"] + os.sep})
_SYSTEM_FILES = tuple(os.sep + name for name in ("typing_extensions.py", "threading.py", "runpy.py"))
# Code that torch.compile generates: FX graph modules' forward ("<eval_with_key>.N") and Inductor's output code,
# written below its cache dir (torchinductor_USER, in the temp dir unless TORCHINDUCTOR_CACHE_DIR moves it)
_GENERATED = ("<eval_with_key>",
              os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "torchinductor_"))


def frame_kind(path: str) -> str:
    """Whose code a frame's file holds: USER, OWN (disttrace), TORCH, GENERATED (torch.compile's) or SYSTEM
    (the standard library). Code run from a string or a notebook cell ("<string>", "<ipython-input-1>") is the
    user's."""
    if path.startswith(OWN_DIR) or _OWN_INSTALLED in path:
        return OWN
    if path.startswith(_GENERATED):
        return GENERATED
    if (TORCH_DIR is not None and path.startswith(TORCH_DIR)) or any(p in path for p in _TORCH_INSTALLED):
        return TORCH
    if path.startswith("<frozen") or path.endswith(_SYSTEM_FILES) or (
            path.startswith(_STDLIB) and "site-packages" not in path and "dist-packages" not in path):
        return SYSTEM
    return USER


def is_user_file(path: str) -> bool:
    return frame_kind(path) == USER
