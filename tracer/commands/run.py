"""`disttrace run [options] COMMAND...`: run a job with every rank traced, changing nothing in it.

The pattern of ddtrace-run and opentelemetry-instrument: put a bootstrap folder holding sitecustomize.py first on
PYTHONPATH, set DISTTRACE_* variables, and start COMMAND as a child. torchrun and multiprocessing's spawn copy the
environment into every worker, so each Python process of the job loads the bootstrap, which stays inert until the
program initializes a process group. Processes started with `python -I`, `-E` or `-S` skip sitecustomize and are
not traced. The exit code is the job's, always; SIGINT and SIGTERM are passed on to it.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime

from ..errors import TraceError
from ..format import is_rank_file

BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_bootstrap")
SUMMARY_MODES = ("off", "stats", "full")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = "disttrace run [options] [--] COMMAND [ARGS...]"
    p.description = ("Run COMMAND (torchrun ..., python -m torch.distributed.run ..., or python script.py ... for "
                     "jobs that start their own processes) with every rank traced. The script is not changed.")
    p.add_argument("--out", metavar="DIR", help="trace directory (default: ./disttrace-DATE-TIME/)")
    p.add_argument("--summaries", choices=SUMMARY_MODES, default="off",
                   help="tensor summaries: off (default, cheapest), stats (min/max/mean/norm/NaN/Inf/checksum), "
                        "full (stats, and the values of tensors of at most 64 elements)")
    p.add_argument("--hang-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="diagnose an op in flight longer than this (default 60; 0 turns it off)")
    p.add_argument("--kill-on-hang", action="store_true", help="stop the job once a hang has been diagnosed")
    store = p.add_mutually_exclusive_group()
    store.add_argument("--store", dest="store", action="store_true", default=None,
                       help="write the trace store (the columnar copy that view, report and export open) and "
                            "the saved analysis when the job ends, whatever the trace's size (default: only from "
                            "16 MB of JSON, where reading it takes longer than opening the store; the first reader "
                            "writes a smaller one)")
    store.add_argument("--no-store", dest="store", action="store_false",
                       help="do not write the trace store nor the analysis when the job ends; the first reader "
                            "writes them")
    mem = p.add_argument_group("memory (docs/ANALYSIS.md, \"Memory\")")
    mem.add_argument("--memory", action="store_true",
                     help="record each rank's memory by kind (parameters, gradients, optimizer state, activations, "
                          "temporaries, communication buffers) at every collective and the peaks between: a "
                          "diagnosis mode, several times slower on CPU (docs/PERFORMANCE.md)")
    mem.add_argument("--memory-step", type=int, metavar="K",
                     help="the step whose breakdown by kind the report shows, as the report numbers steps "
                          "(default: the first steady one)")
    bb = p.add_argument_group("the black box (docs/FORMAT.md): the mode a production job leaves on")
    bb.add_argument("--black-box", action="store_true",
                    help="keep each rank's last ops in a ring of fixed size and the whole run's aggregates, not "
                         "every op; snapshots on a hang, an exception, SIGUSR1, `disttrace snapshot DIR`")
    bb.add_argument("--ring", metavar="N", help="the ring holds at least the last N ops of each rank (default "
                                                "4000: 2 MB a rank)")
    bb.add_argument("--keep-snapshots", metavar="K", help="snapshots kept, the last K (default 8)")
    bb.add_argument("--window", metavar="W", help="the aggregates' window: W steps where the job marks steps, "
                                                  "else W seconds; Ws: W seconds always (default 10; windows of steps "
                                                  "widen where the job's steps are too short for 50 MB a day)")
    p.add_argument("job", nargs=argparse.REMAINDER, metavar="COMMAND", help="the job's command line")


def _default_out() -> str:
    return os.path.abspath(datetime.now().strftime("disttrace-%Y%m%d-%H%M%S"))


def prepare_out(path: str) -> str:
    """Create the trace directory, or raise TraceError before the job starts."""
    out = os.path.abspath(path)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise TraceError(f"cannot create trace directory {out}: {e.strerror or e}") from None
    if any(is_rank_file(n) for n in os.listdir(out)):
        raise TraceError(f"{out} already holds a trace; choose another --out or remove it")
    probe = os.path.join(out, ".disttrace-write-test")
    try:
        with open(probe, "wb") as f:
            f.write(b"x")
        os.unlink(probe)
    except OSError as e:
        raise TraceError(f"trace directory {out} is not writable: {e.strerror or e}") from None
    return out


def child_env(out: str, summaries: str, hang_timeout: float, black_box=None, memory: int | None = None) -> dict:
    """memory: None (not recorded), else the step of its breakdown (-1: the first steady one)."""
    env = dict(os.environ)
    env.pop("DISTTRACE_MEMORY", None)
    if memory is not None:
        env["DISTTRACE_MEMORY"] = str(memory)
    env["DISTTRACE_OUT"] = out
    env["DISTTRACE_SUMMARIES"] = summaries
    env["DISTTRACE_HANG_TIMEOUT"] = str(hang_timeout)
    env["DISTTRACE_BLACK_BOX"] = "1" if black_box is not None else "0"
    if black_box is not None:
        env.update(black_box.env())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (BOOTSTRAP_DIR, env.get("PYTHONPATH", "")) if p)
    return env


def main(args) -> int:
    command = list(args.job)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise TraceError("no command to run: disttrace run [options] torchrun ... (see --help)")
    if args.hang_timeout < 0:
        raise TraceError("--hang-timeout must be 0 (off) or a number of seconds")
    black_box = _black_box(args)
    memory = _memory(args)
    out = prepare_out(args.out or _default_out())
    env = child_env(out, args.summaries, args.hang_timeout, black_box, memory)
    started = time.time()
    try:
        proc = subprocess.Popen(command, env=env)
    except OSError as e:
        sys.stderr.write(f"disttrace run: cannot start {command[0]}: {e.strerror or e}\n")
        return 127
    _compile_ahead()

    def forward(signum, _frame):
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    monitor = None
    if args.hang_timeout > 0:
        from .hangwatch import HangMonitor  # (after the job has started: its ranks start meanwhile)

        monitor = HangMonitor(out, args.hang_timeout, proc if args.kill_on_hang else None)
        monitor.start()
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if monitor is not None:
            monitor.stop()
    if rc < 0:
        rc = 128 - rc  # killed by a signal: the shell's convention
    _write_run_info(out, command, started, rc)
    if black_box is not None and rc != 0:
        from ..blackbox_files import add_dead_ranks

        add_dead_ranks(out, started, black_box.keep)
    files = [os.path.join(out, f) for f in os.listdir(out) if is_rank_file(f)]
    if files and args.store is not False:
        _write_store(out, files, always=bool(args.store))
    where = os.path.relpath(out) if not os.path.relpath(out).startswith("..") else out
    runs = _runs(files)
    if len(runs) > 1:
        sys.stderr.write(f"disttrace: trace of {len(runs)} runs ({len(files)} rank files) in {where}/ — list them "
                         f"with: disttrace runs {where}; open the last with: disttrace view {where}\n")
    elif files:
        n = len(files)
        sys.stderr.write(f"disttrace: trace of {n} rank{'s' if n != 1 else ''} in {where}/ "
                         f"— open it with: disttrace view {where}\n")
    else:
        sys.stderr.write(f"disttrace: no rank was traced (no process group was initialized under {command[0]})"
                         f"; {where}/ is empty\n")
    return rc


def _memory(args) -> int | None:
    """--memory's step (-1: the first steady one), None without --memory; TraceError: one line."""
    step = getattr(args, "memory_step", None)
    if step is not None and not args.memory:
        raise TraceError("--memory-step is an option of --memory: add --memory")
    if step is not None and step < 0:
        raise TraceError("--memory-step must be a step number (0 or more)")
    return (step if step is not None else -1) if getattr(args, "memory", False) else None


def _black_box(args):
    """The black box's config (None: a whole trace), or TraceError: one line."""
    given = [o for o, v in (("--ring", args.ring), ("--keep-snapshots", args.keep_snapshots),
                            ("--window", args.window)) if v is not None]
    if not args.black_box:
        if given:
            raise TraceError(f"{given[0]} is an option of the black box: add --black-box")
        return None
    from ..blackbox_files import Config

    try:
        return Config.make(args.ring, args.keep_snapshots, args.window)
    except ValueError as e:
        raise TraceError(str(e)) from None


_COMPILE_AHEAD = "import os; os.nice(19); from disttrace.tracer.analysis.core import jit; jit.compile_ahead()"


def _compile_ahead() -> None:
    """Start the compile of the analysis' loops beside the job (numba, into the user's cache; at the lowest
    priority, and only those not compiled yet: analysis/core/jit.py's compile_ahead), so that neither the analysis at
    the run's end nor the first report compiles them. Once they all are (jit_cache.all_ready: a few stats), no
    process is started."""
    if os.environ.get("DISTTRACE_JIT") == "0":
        return
    from ..analysis.core.jit_cache import all_ready

    if all_ready():
        return
    try:
        subprocess.Popen([sys.executable, "-c", _COMPILE_AHEAD], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        pass


# Below this much JSON the run's end leaves the store to the first reader: a small trace is read about as quickly
# as a store is opened, while the imports and the writing cost the run as much however small the trace (a short
# job's whole-process overhead: benchmarks/bench_wholejob.py; docs/PERFORMANCE.md, "Storing the trace")
STORE_AT_END_BYTES = 16 << 20


def _write_store(out: str, files: list[str], always: bool = False) -> None:
    """Read the trace once, now that the job is over, write its store (data/store/) and analyse it (the analysis
    is saved beside the store: analysis/core/saved_analysis.py), so that the first view or report opens both rather
    than parsing the JSON and analysing (benchmarks/bench_tui.py: "analysis views ready", first open and re-open);
    only from STORE_AT_END_BYTES unless `always`. Never fails the run: a damaged trace is the reader's to report when
    it is opened."""
    size = sum(os.path.getsize(f) for f in files)
    if size < STORE_AT_END_BYTES and not always:
        return  # (before any import: a short job's end pays nothing)
    from ..data.load import PARALLEL_BYTES, StoreOrigin, load_trace, store_enabled

    if not store_enabled():
        return
    if size >= PARALLEL_BYTES:
        sys.stderr.write(f"disttrace: storing and analysing the trace ({size >> 20} MB of JSON) for the viewer…\n")
    try:
        table = load_trace([out], settled=True)
        if isinstance(table.origin, StoreOrigin):  # (else nothing would keep the analysis)
            from ..analysis.engine.run import analyze

            analyze(table)
    except KeyboardInterrupt:  # (the user would rather not wait: the first view does it; the exit code stays the job's)
        sys.stderr.write("disttrace: storing skipped; the first view or report will do it\n")
    except Exception:  # noqa: BLE001 - the store is an optimisation: the run's exit code stays the job's
        pass


def _write_run_info(out: str, command: list, started: float, rc: int) -> None:
    import orjson  # (not before the job starts: the launcher imports as little as it can until then)

    info = {"command": command, "host": socket.gethostname(), "start_wall": started, "end_wall": time.time(),
            "exit_code": rc}
    try:
        with open(os.path.join(out, "run.json"), "wb") as f:
            f.write(orjson.dumps(info, option=orjson.OPT_INDENT_2))
    except OSError:
        pass


def _runs(files: list[str]) -> list:
    from ..data.load import find_runs  # (after the job: the launcher imports as little as it can before)

    try:
        return find_runs(files)[0]
    except Exception:  # noqa: BLE001 - a damaged file: the reader will say what; this line just counts
        return []
