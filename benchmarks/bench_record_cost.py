"""Instructions that recording adds to each op, counted with callgrind: issue 50's yardstick.

    python benchmarks/bench_record_cost.py [--ops 100,600] [--reps 1]
                                           [--modes untraced,fr,off,off-pure,stats,full,bb,bb-pure]
                                           [--fr-entries 2000] [--instrument-all] [--keep DIR]

Needs valgrind (callgrind) on PATH. A world of one on gloo (init_process_group with a HashStore, no torchrun), a
loop of 4 KiB all_reduces (1024 float32), under `valgrind --tool=callgrind --separate-threads=yes`, for each mode:
- untraced: TORCH_FR_BUFFER_SIZE=0. torch 2.13's Flight Recorder keeps 2000 entries when the variable is unset
  (FlightRecorder.hpp), gloo's ops included: the untraced op here is the op without it;
- fr: PyTorch's Flight Recorder on, TORCH_FR_BUFFER_SIZE=--fr-entries (the variable torch 2.13's C++
  FlightRecorder reads, TORCH_NCCL_TRACE_BUFFER_SIZE its fallback, for gloo as for NCCL);
- off, stats, full: disttrace's full trace as `disttrace run` installs it in a rank, with its defaults (the hang
  watchdog included) and each --summaries mode (off is the default); Flight Recorder off;
- bb: `disttrace run --black-box` with its defaults (a ring of 4,000 ops; the aggregates kept at each op's end, the
  watchdog thread writing their closed windows); Flight Recorder off;
- off-pure, bb-pure: off and bb on the recorder's pure-Python code (DISTTRACE_PURE=1: its compiled part,
  tracer/record/_hotpath.c, unused), beside the compiled part in the same run; the other modes use the compiled part
  where it is built (the table's note says whether it was).

The yardstick, per mode: (I[600 ops] - I[100 ops]) / 500, the instructions (callgrind's Ir) of two processes that
differ only in the loop's length, on the job's main thread and on all of the process's threads together (gloo's
worker threads, disttrace's clock and watchdog threads, ...). The difference cancels start-up, import, teardown and
whatever a trace costs once. Printed: per op, each mode's instructions on the main thread and on all threads, and
what it adds beside the untraced op and beside Flight Recorder's; the wall time the processes took.

Each process imports torch at valgrind's uninstrumented speed (--instr-atstart=no), runs an unmeasured warm-up
(50 ops, traced in disttrace's modes: its modules imported, Python's bytecode specialised), then turns
instrumentation on (callgrind's START_INSTRUMENTATION client request, issued through a few bytes of x86-64 code
the worker maps: no compiler or valgrind headers needed) and runs the measured loop. Callgrind's dump and zero
requests would count the calling thread only, which is why a measurement is whole processes, not windows within
one. In disttrace's modes the measured part holds the whole trace, from install to the closed rank file, so that
work the recorder defers to a flush or to another thread is counted. --instrument-all instruments from the
process's start instead (no client request, any architecture; several times slower): the same differences.

Caveat: threads that wake on a timer (disttrace's hang watchdog, twice a second; the clock's re-measurement) are
counted by wall time, which callgrind stretches some 50x: the all-threads figures of disttrace's modes hold those
wake-ups at callgrind's pace, not the job's. The main thread's figures do not depend on time.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import mmap
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NUMEL = 1024  # float32 elements: a 4 KiB all_reduce
WARM_OPS = 50  # ops of the unmeasured warm-up window
MODES = {  # name -> (label, TORCH_FR_BUFFER_SIZE, disttrace's --summaries or None for untraced)
    "untraced": ("untraced", "0", None),
    "fr": ("Flight Recorder", None, None),  # None: --fr-entries
    "off": ("disttrace (default: summaries off)", "0", "off"),
    "stats": ("disttrace --summaries stats", "0", "stats"),
    "full": ("disttrace --summaries full", "0", "full"),
    "bb": ("disttrace --black-box", "0", "off"),  # the black box (its defaults: a ring of 4,000 ops)
}
PURE = "-pure"  # a mode's suffix: the same mode on the recorder's pure-Python code (DISTTRACE_PURE=1)
for _m in ("off", "bb"):
    MODES[_m + PURE] = (MODES[_m][0] + ", pure Python", *MODES[_m][1:])


# -- callgrind's client requests, without a compiler ---------------------------------------------------------
# valgrind.h's request on amd64: the argument block's address in rax, the default result in rdx, the magic preamble
# (rdi rotated by 3, 13, 61 and 51 bits: 128, a no-op natively) and `xchg rbx, rbx`; the result comes back in rdx.
# Natively the function returns the default, 0.
_REQUEST_CODE = bytes.fromhex(
    "4889f8"    # mov rax, rdi        (the argument block)
    "31d2"      # xor edx, edx        (the default result: 0)
    "48c1c703"  # rol rdi, 3
    "48c1c70d"  # rol rdi, 13
    "48c1c73d"  # rol rdi, 61
    "48c1c733"  # rol rdi, 51
    "4887db"    # xchg rbx, rbx       (rdx = request(rax))
    "4889d0"    # mov rax, rdx
    "c3")       # ret
_RUNNING_ON_VALGRIND = 0x1001
_START_INSTRUMENTATION = ((ord("C") << 24) | (ord("T") << 16)) + 4  # callgrind.h: VG_USERREQ_TOOL_BASE('C','T') + 4


class ClientRequests:
    """valgrind.h's RUNNING_ON_VALGRIND and callgrind.h's CALLGRIND_START_INSTRUMENTATION. (Callgrind's dump and
    zero requests act on the calling thread only, so that the windows of all threads are whole processes here.)"""

    def __init__(self) -> None:
        if platform.machine().lower() not in ("x86_64", "amd64"):
            raise RuntimeError(f"client requests are written for x86-64, not {platform.machine()}: use "
                               f"--instrument-all")
        self._page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        self._page.write(_REQUEST_CODE)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(self._page))
        self._call = ctypes.CFUNCTYPE(ctypes.c_ulong, ctypes.c_void_p)(addr)
        if not self._request(_RUNNING_ON_VALGRIND):
            raise RuntimeError("not running under valgrind")

    def _request(self, code: int) -> int:
        block = (ctypes.c_ulong * 6)(code, 0, 0, 0, 0, 0)
        return self._call(ctypes.addressof(block))

    def start_instrumentation(self) -> None:
        self._request(_START_INSTRUMENTATION)


# -- the worker: one mode, one op count, under callgrind --------------------------------------------------------
def _worker(mode: str, n: int, out: str, requests: bool) -> None:
    cg = ClientRequests() if requests else None
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    t = torch.ones(NUMEL)
    summaries = MODES[mode][2]
    hang_timeout = None if summaries is None else _run_default("hang_timeout")
    black_box = None
    if mode.removesuffix(PURE) == "bb":
        from disttrace.tracer.blackbox_files import Config

        black_box = Config.make()

    def window(ops: int, name: str) -> None:
        if summaries is None:
            for _ in range(ops):
                dist.all_reduce(t)
            return
        from disttrace.tracer.record import hooks

        # what `disttrace run` installs in a rank
        hooks.install(os.path.join(out, name), summaries, hang_timeout, black_box=black_box)
        try:
            for _ in range(ops):
                dist.all_reduce(t)
        finally:
            hooks.uninstall()  # the rank file flushed and closed

    window(WARM_OPS, "warm")  # disttrace's modules imported, Python's bytecode specialised
    gc.collect()  # the measured window starts from the same heap in every process
    if cg is not None:
        cg.start_instrumentation()
    window(n, "measured")
    dist.destroy_process_group()


def _run_default(name: str):
    """`disttrace run`'s default for one of its options (its parser is their home)."""
    from disttrace.tracer.commands.run import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    return getattr(p.parse_args(["job"]), name)


# -- callgrind's output ----------------------------------------------------------------------------------------
def parse_profile(text: str) -> tuple[int, int]:
    """(thread, Ir) of one callgrind output file: its thread (1, the main thread, where the file has no `thread:`
    line, as without --separate-threads) and its instruction total (`totals:`, the sum of the cost lines, else
    `summary:`; Ir is the first event, callgrind's only one by default)."""
    thread, summary, totals = 1, None, None
    for line in text.splitlines():
        if line.startswith("thread:"):
            thread = int(line.split()[1])
        elif line.startswith("summary:"):
            summary = int(line.split()[1])
        elif line.startswith("totals:"):
            totals = int(line.split()[1])
    ir = totals if totals is not None else summary
    if ir is None:
        raise ValueError("no totals: or summary: line: not a callgrind output file")
    return thread, ir


def thread_totals(files) -> dict[int, int]:
    """{thread: Ir} over one process's callgrind output files (one a thread with --separate-threads; the empty file
    that callgrind opens under the bare name then is skipped)."""
    out: dict[int, int] = {}
    for f in files:
        text = Path(f).read_text(errors="replace")
        if text.strip():
            thread, ir = parse_profile(text)
            out[thread] = out.get(thread, 0) + ir
    return out


def per_op(small: dict[int, int], large: dict[int, int], n_small: int, n_large: int) -> tuple[float, float]:
    """(main thread, all threads) instructions per op: (I[large] - I[small]) / (n_large - n_small)."""
    d = n_large - n_small
    return (large.get(1, 0) - small.get(1, 0)) / d, (sum(large.values()) - sum(small.values())) / d


# -- the driver ------------------------------------------------------------------------------------------------
def _callgrind(mode: str, n: int, args, work: Path) -> tuple[dict[int, int], float]:
    """Run the worker for `mode` and `n` ops under callgrind: {thread: Ir}, and the wall time it took."""
    work.mkdir(parents=True, exist_ok=True)
    fr = MODES[mode][1] or str(args.fr_entries)
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": fr, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    env.pop("TORCH_NCCL_TRACE_BUFFER_SIZE", None)  # (its fallback: TORCH_FR_BUFFER_SIZE alone decides)
    env["DISTTRACE_PURE"] = "1" if mode.endswith(PURE) else "0"
    cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={work}/cg.%p",
           *([] if args.instrument_all else ["--instr-atstart=no"]),
           sys.executable, os.path.abspath(__file__), "--worker", mode, "--ops", str(n), "--out",
           str(work / "traces"), *(["--instrument-all"] if args.instrument_all else [])]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"the worker for {mode}, {n} ops, exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return thread_totals(sorted(work.glob("cg.*"))), took


def _measure(mode: str, args, work: Path) -> tuple[list[tuple[float, float]], float]:
    """[(main, all) per op, one per rep] for one mode, and the wall time its processes took."""
    small, large = args.ops
    res, took = [], 0.0
    for r in range(args.reps):
        (ts, t1), (tl, t2) = (_callgrind(mode, n, args, work / f"{n}-{r}") for n in (small, large))
        res.append(per_op(ts, tl, small, large))
        took += t1 + t2
    return res, took


def _compiled_built() -> bool:
    import importlib.util

    return importlib.util.find_spec("disttrace.tracer.record._hotpath") is not None


def _k(x: float, sign: bool = False) -> str:
    return f"{x / 1000:{'+' if sign else ''}.1f}k"


def _report(results: dict, args) -> None:
    """The table: per mode, instructions per op (the median of the reps), and what it adds beside each reference
    (the untraced op, Flight Recorder) measured in this run."""
    med = {m: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v))
           for m, (v, _t) in results.items()}
    refs = [r for r in ("untraced", "fr") if r in med]
    print(f"{'mode':50} {'main /op':>9} {'all /op':>9}" + "".join(
        f"   {'beside ' + MODES[r][0] + ': main':>30} {'all':>8}" for r in refs))
    for m, (main, every) in med.items():
        added = [("-", "-") if m == r else (_k(main - med[r][0], True), _k(every - med[r][1], True)) for r in refs]
        cells = [f"{a:>30} {b:>8}" for a, b in added]
        print(f"{MODES[m][0]:50} {_k(main):>9} {_k(every):>9}" + "".join(f"   {c}" for c in cells))
    small, large = args.ops
    print(f"(callgrind's Ir, (I[{large} ops] - I[{small} ops]) / {large - small}; a 4 KiB all_reduce, gloo, a world of "
          f"one; the median of {args.reps} rep(s)" + (", instrumented from the start" if args.instrument_all else "")
          + f"; Flight Recorder: {args.fr_entries} entries; the recorder's compiled part "
          + ("built" if _compiled_built() else "NOT built: every mode ran on pure Python") + ")")
    if args.reps > 1:
        print("each rep, main thread per op: " + "; ".join(
            f"{m} " + ", ".join(_k(a) for a, _ in v) for m, (v, _t) in results.items()))
    print("wall time under callgrind: " + ", ".join(f"{m} {t:.0f} s" for m, (_v, t) in results.items()))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="100,600", help="the two loop lengths whose difference is measured")
    p.add_argument("--reps", type=int, default=1, help="measurements per mode (their median is printed)")
    p.add_argument("--modes", default=",".join(MODES), help=f"a comma-separated subset of {', '.join(MODES)}")
    p.add_argument("--fr-entries", type=int, default=2000, help="TORCH_FR_BUFFER_SIZE of the fr mode")
    p.add_argument("--instrument-all", action="store_true",
                   help="instrument from the process's start (slower; no client request: any architecture)")
    p.add_argument("--keep", metavar="DIR", help="keep callgrind's files (for callgrind_annotate) in DIR")
    p.add_argument("--worker", choices=tuple(MODES), help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    try:
        a.ops = [int(x) for x in str(a.ops).split(",")]
        modes = [m.strip() for m in a.modes.split(",") if m.strip()]
        if not a.worker and (len(a.ops) != 2 or not 0 < a.ops[0] < a.ops[1] or a.reps < 1):
            raise ValueError("--ops takes two increasing op counts (e.g. 100,600); --reps at least 1")
        if unknown := [m for m in modes if m not in MODES]:
            raise ValueError(f"unknown mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}")
    except ValueError as e:
        print(f"bench_record_cost: {e}", file=sys.stderr)
        return 2
    if a.worker:
        _worker(a.worker, a.ops[0], a.out, not a.instrument_all)
        return 0
    if shutil.which("valgrind") is None:
        print("bench_record_cost: needs valgrind (callgrind) on PATH", file=sys.stderr)
        return 2
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="disttrace-cost-"))
    results: dict = {}
    t0 = time.perf_counter()
    try:
        for m in modes:
            results[m] = _measure(m, a, work / m)
            print(f"  {m}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    except RuntimeError as e:
        print(f"bench_record_cost: {e}", file=sys.stderr)
        return 1
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    _report(results, a)
    print(f"the whole benchmark: {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
