"""Benchmark: analysis of a large synthetic trace, as a ratio to merely parsing its JSON with orjson.

    python benchmarks/bench_analysis.py [--events 1000000] [--ranks 64] [--file PATH] [--rank-files | --no-rank-files]
                                        [--against COMMIT|none] [--jit-events 70000 ...] [--jit-rounds 1]
                                        [--jit-only]

First (issue 43: numba stays only if it pays), the analysis in a new process three ways, side by side, for this
trace and for each --jit-events size (default 70,000): its loops (core/jit.py) compiled by numba from a cold cache (an
empty NUMBA_CACHE_DIR, DISTTRACE_JIT=1: the first compile, paid where it is made), compiled from the warm cache,
and as Python (DISTTRACE_JIT=0: the loops on lists; the critical path's walk is a memoised walk along data-dependent
moves, which no numpy operation expresses), in wall and CPU time, and the ratios: Python / warm (numba's gain;
the rule is >= 2x at 1M events) and cold - warm (its first compile). The rest of the run uses that warm cache.

Prints parse (orjson.loads of every line), load (JSON -> EventTable, the reader's cost), analyze, to_json,
each measured in this run, and the ratio analyze / yardstick (goal: <= 2), measured as the median of --rounds
analyses, each in a new process as the viewer's is, between two yardsticks (synth.paired_rounds: this machine's
speed drifts), in wall and in CPU time, alternating with the same analysis by another commit's code (--against,
by default 6af5261, before the attribution: issue 37's budget is 1.5x it);
for the first analysis with and without the critical paths
(causal/critical_path.py and causal/what_if.py: a walk back from every wait, the dearest part of the analysis); and how long a
thread beside the analysis, as the viewer's UI thread is, waited for the GIL at worst (goal: under 20 ms).

Then (by default up to 2M events) the same job as the trace dir that `disttrace run` writes, a rank file per rank
(synth.write_trace_dir, kept beside the events file): its reader against its own yardstick, orjson over every
line of the rank files. That is the read users meet: the end of `disttrace run`, or a first `view`."""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).parent))
from synth import (ensure_synthetic, fresh_store, paired_rounds, time_parse, time_yardstick,  # noqa: E402
                   write_trace_dir)

from disttrace.tracer.analysis import analyze, to_json  # noqa: E402
from disttrace.tracer.analysis.core import saved_analysis as saved  # noqa: E402
from disttrace.tracer.data.load import load_trace  # noqa: E402


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--file", help="use (or create) this .jsonl instead of a temporary one")
    ap.add_argument("--rank-files", action=argparse.BooleanOptionalAction, default=None,
                    help="also time the trace dir of rank files (default: up to 2M events)")
    ap.add_argument("--rounds", type=int, help="analyses timed each between two yardsticks (default: 3, 1 past 2M "
                    "events)")
    ap.add_argument("--against", metavar="COMMIT", default="6af5261",
                    help="also time the analysis of this commit's code, round by round beside this one's (default: "
                         "6af5261, before issue 37's attribution; 'none': skip)")
    ap.add_argument("--jit-events", type=int, nargs="*", default=[70_000],
                    help="also compare numba and Python on synthetic traces of these sizes (default: 70000)")
    ap.add_argument("--jit-rounds", type=int, default=1, help="rounds of the numba/Python comparison (default: 1; "
                    "0: none, the first analysis below then compiles)")
    ap.add_argument("--jit-only", action="store_true", help="only the numba/Python comparison")
    ns = ap.parse_args()
    path = ns.file or os.path.join(tempfile.gettempdir(), f"disttrace_synth_v3_{ns.events}_{ns.ranks}.jsonl")
    ensure_synthetic(path, ns.events, ns.ranks)
    # numba's cache for this run: empty at first (the first compile measured), then warm for the rest
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="disttrace-bench-numba-")
    smaller = []
    for k in ns.jit_events if ns.jit_rounds else ():
        p = os.path.join(tempfile.gettempdir(), f"disttrace_synth_v3_{k}_{ns.ranks}.jsonl")
        ensure_synthetic(p, k, ns.ranks)
        smaller.append(p)
    if ns.jit_rounds:
        _numba_or_python([path] + smaller, ns.jit_rounds)
    if ns.jit_only:
        return
    parse, n = time_parse(path)
    yards = [time_yardstick(path)]  # measured three times, between the runs: this machine's speed drifts
    store = fresh_store(path)

    t0 = time.perf_counter()
    table = load_trace([path], cache=False)
    load = time.perf_counter() - t0
    del table
    gc.collect()
    yards.append(time_yardstick(path))
    t0 = time.perf_counter()
    load_trace([path])  # parses and writes the store (split across processes: data/parallel.py)
    first = time.perf_counter() - t0
    gc.collect()
    t0 = time.perf_counter()
    table = load_trace([path])  # the store, memory-mapped
    reopen = time.perf_counter() - t0
    store_mb = os.path.getsize(store) / 1e6 if os.path.exists(store) else 0.0

    gc.collect()
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    stages: dict[str, float] = {}
    a = analyze(table, timings=stages)
    analysis = time.perf_counter() - t0
    rss1 = _rss_mb()
    explain = stages["critical_paths"] + stages["overlaps"] + stages["what_ifs"]

    t0 = time.perf_counter()
    out = to_json(a)
    js = time.perf_counter() - t0

    waits = _beside_a_ui(table)
    n_rounds = ns.rounds or (3 if len(table) <= 2_000_000 else 1)
    base_py = _baseline_python(ns.against) if ns.against != "none" else None
    if base_py:  # (once, unmeasured: its loops compiled into its cache, as this code's are by now)
        _fresh_analysis(path, base_py, {"NUMBA_CACHE_DIR": None})
    rounds, base_rounds = [], []
    for _ in range(n_rounds):  # (alternating: the two codes meet the machine in the same state)
        rounds += paired_rounds(lambda: _fresh_analysis(path), path, 1)
        if base_py:
            # (its numba cache beside its source, as it kept it)
            base_rounds += paired_rounds(lambda: _fresh_analysis(path, base_py, {"NUMBA_CACHE_DIR": None}), path, 1)
    ratio = statistics.median(r[1] for r in rounds)

    yards.append(time_yardstick(path))
    yard = statistics.median(yards)
    saved.save(a)  # what the first analyze() of a stored table does (timings: it did not)
    t0 = time.perf_counter()
    again = analyze(load_trace([path]))
    reread = time.perf_counter() - t0
    assert again.steps == a.steps

    print(f"{n:,} events, {len(table.ranks)} ranks, {len(a.collectives):,} collective instances, "
          f"{len(a.p2p):,} messages, {len(out['problems'])} problems")
    print(f"yardstick        {yard:7.2f} s   (orjson.loads of every line, nothing kept; the median of "
          f"{', '.join(f'{y:.2f}' for y in yards)} s, measured between the runs)")
    if parse is not None:
        print(f"parse (orjson)   {parse:7.2f} s   (every line parsed and kept)")
    print(f"load (load_trace){load:7.2f} s   ({load / yard:.2f}x the yardstick; the reader's cost in one process, "
          "no store)")
    print(f"first open       {first:7.2f} s   ({first / yard:.2f}x the yardstick; parse + write the store, "
          f"{store_mb:.0f} MB)")
    print(f"re-open (store)  {reopen:7.2f} s   ({reopen / yard:.2f}x the yardstick; goal <= 0.5 s)")
    print(f"analyze          {analysis:7.2f} s   of which the critical paths (causes, overlap, what-ifs) "
          f"{explain:.2f} s")
    print(f"to_json          {js:7.2f} s")
    print(f"analysis memory  {rss1 - rss0:7.0f} MB   ({(rss1 - rss0) * 2**20 / n:.0f} B an event held once computed, "
          f"over the re-opened table's {rss0:.0f} MB RSS)")
    print(f"saved analysis   {reread:7.2f} s   ({reread / yard:.2f}x the yardstick; the trace re-opened: store and "
          f"analysis read back)")
    print(f"beside a UI      {max(waits) * 1e3:7.1f} ms  the longest a thread waking every ms waited, the analysis running "
          f"in another (as in the viewer: switch interval 0.5 ms); {sum(w > 0.02 for w in waits)} waits over 20 ms, "
          f"{sum(w > 0.05 for w in waits)} over 50 ms (goal: none; a key's budget)")
    print(f"side by side     {len(rounds)} analyses, each in a new process between two yardsticks: "
          + ", ".join(f"{w:.2f} s = {r:.2f}x" for w, r, _, _ in rounds)
          + f"; CPU time {', '.join(f'{c:.2f} s = {cr:.2f}x' for _, _, c, cr in rounds)} (both threads')")
    print(f"ratio analyze / yardstick = {ratio:.2f}  (goal <= 2; the median of the side-by-side rounds; in CPU time "
          f"{statistics.median(r[3] for r in rounds):.2f}); the first analysis "
          f"{analysis / yard:.2f}, without its critical paths {(analysis - explain) / yard:.2f}")
    if base_rounds:
        b = statistics.median(r[1] for r in base_rounds)
        bc = statistics.median(r[3] for r in base_rounds)
        print(f"against {ns.against}: its analysis {', '.join(f'{w:.2f} s = {r:.2f}x' for w, r, _, _ in base_rounds)}"
              f" the yardstick; this code / {ns.against} = {ratio / b:.2f} in wall time, "
              f"{statistics.median(r[3] for r in rounds) / bc:.2f} in CPU time (goal <= 1.5: issue 37's budget)")
    if ns.rank_files or (ns.rank_files is None and n <= 2_000_000):
        del table, a, again
        gc.collect()
        _rank_files(path)


def _baseline_python(commit: str) -> str:
    """An interpreter that imports `commit`'s disttrace: a worktree of it in a temporary dir, and a virtualenv over
    this one's packages with it installed editable (made once per commit, kept under the temp dir)."""
    import subprocess
    import tempfile

    repo = Path(__file__).resolve().parent.parent
    home = Path(tempfile.gettempdir()) / f"disttrace-baseline-{commit}"
    py = home / "venv" / "bin" / "python"
    if not py.exists():
        if not (home / "src").exists():
            subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(home / "src"), commit],
                           check=True, capture_output=True)
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(home / "venv")], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "-e", str(home / "src")], check=True,
                       capture_output=True)
    return str(py)


def _numba_or_python(paths: list[str], rounds: int) -> None:
    """The analysis of each trace in a new process: compiled from a cold cache, from the warm one, and as Python,
    round by round side by side (their ratios within a round), in wall and CPU time."""
    cold_dir = os.environ["NUMBA_CACHE_DIR"]
    for path in paths:
        load_trace([path])  # (the store written, as every analysis here opens it)
        rows = []
        for k in range(rounds):
            cold = tempfile.mkdtemp(prefix="disttrace-bench-numba-cold-") if k or path != paths[0] else cold_dir
            first = _fresh_analysis(path, env={"NUMBA_CACHE_DIR": cold, "DISTTRACE_JIT": "1"})
            warm = _fresh_analysis(path, env={"NUMBA_CACHE_DIR": cold})
            py = _fresh_analysis(path, env={"DISTTRACE_JIT": "0"})
            rows.append((first, warm, py))
        n = len(load_trace([path]))
        print(f"numba or Python, {n:,} events (a new process each; wall s / CPU s):")
        for first, warm, py in rows:
            print(f"  numba, cold cache {first[0]:7.2f} / {first[1]:6.2f}   numba, warm {warm[0]:7.2f} / {warm[1]:6.2f}"
                  f"   Python {py[0]:7.2f} / {py[1]:6.2f}   Python / warm numba {py[0] / warm[0]:.2f}x wall, "
                  f"{py[1] / warm[1]:.2f}x CPU; the first compile {first[0] - warm[0]:.1f} s wall, "
                  f"{first[1] - warm[1]:.1f} s CPU")
        if len(rows) > 1:
            med = statistics.median
            print(f"  median: Python / warm numba {med(p[0] / w[0] for _, w, p in rows):.2f}x wall, "
                  f"{med(p[1] / w[1] for _, w, p in rows):.2f}x CPU; the first compile "
                  f"{med(f[1] - w[1] for f, w, _ in rows):.1f} s CPU")
    sys.stdout.flush()


def _fresh_analysis(path: str, python: str = sys.executable, env: dict | None = None) -> tuple[float, float]:
    """analyze() of the stored trace in a new process, as the viewer's and `report`'s first analysis is (numba
    loaded meanwhile, nothing warm): its (wall s, CPU s), the store's opening left out. `python`: an interpreter
    that imports another commit's code (_baseline_python); env: what to change in its environment (None: unset)."""
    import json
    import subprocess

    code = ("import json, sys, time; from disttrace.tracer.analysis import analyze; "
            "from disttrace.tracer.data.load import load_trace; t = load_trace([sys.argv[1]]); "
            "c, w = time.process_time(), time.perf_counter(); analyze(t, timings={}); "
            "print(json.dumps([time.perf_counter() - w, time.process_time() - c]))")
    out = subprocess.run([python, "-c", code, path], capture_output=True, text=True, check=True,
                         env={k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None})
    wall, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return wall, cpu


def _beside_a_ui(table) -> list[float]:
    """The analysis again, in a worker thread as the viewer runs it, while this thread wakes every millisecond as a
    UI's event loop would: how long each wake-up came late. A C call that holds the GIL (a loop over a whole
    column, a collection of all the analysis made) keeps the UI's keys waiting that long."""
    import threading

    was = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # (tui/loading.background_work's)
    worker = threading.Thread(target=analyze, args=(table,), kwargs={"timings": {}})
    waits = []
    try:
        worker.start()
        last = time.perf_counter()
        while worker.is_alive():
            time.sleep(0.001)
            now = time.perf_counter()
            waits.append(now - last - 0.001)
            last = now
        for _ in range(200):  # and just after: the collector's first pass over what it made
            [[] for _ in range(100)]
            time.sleep(0.001)
            now = time.perf_counter()
            waits.append(now - last - 0.001)
            last = now
    finally:
        worker.join()
        sys.setswitchinterval(was)
    return waits


def _rank_files(path: str) -> None:
    """The first read of the same job as rank files (the trace dir `disttrace run` writes), in process and as the
    first open (split across processes, the store written), against orjson over every line of the rank files."""
    tdir = path + ".rankfiles"
    if not os.path.isdir(tdir):
        t = time.perf_counter()
        write_trace_dir(path, tdir)
        print(f"wrote the rank files to {tdir} in {time.perf_counter() - t:.1f} s")
    files = sorted(os.path.join(tdir, f) for f in os.listdir(tdir) if f.endswith(".jsonl"))
    fresh_store(tdir)
    yards = [time_yardstick(files)]
    t0 = time.perf_counter()
    table = load_trace([tdir], cache=False)
    load = time.perf_counter() - t0
    n = len(table)
    del table
    gc.collect()
    yards.append(time_yardstick(files))
    t0 = time.perf_counter()
    load_trace([tdir])
    first = time.perf_counter() - t0
    yards.append(time_yardstick(files))
    yard = statistics.median(yards)
    print(f"rank files: {n:,} events in {len(files)} files, {sum(map(os.path.getsize, files)) / 1e6:.0f} MB")
    print(f"  yardstick      {yard:7.2f} s   (orjson.loads of every line of the rank files, nothing kept; the median "
          f"of {', '.join(f'{y:.2f}' for y in yards)} s)")
    print(f"  load           {load:7.2f} s   ({load / yard:.2f}x the yardstick; in one process, no store)")
    print(f"  first open     {first:7.2f} s   ({first / yard:.2f}x the yardstick; split across processes, the store "
          "written: the end of `disttrace run`)")


if __name__ == "__main__":
    main()
