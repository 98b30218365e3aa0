"""The black box over a long run (issue 50's long versions): bounded, and its whole-run straggler found.

    python benchmarks/bench_black_box_long.py [--ops 100000] [--straggler-steps 1000] [--parts bounded,straggler]

`bounded`: tests/jobs/bb_train.py (7 all-reduces a step, 2 ranks on gloo) for --ops ops a rank, run untraced and
under `disttrace run --black-box` (its defaults: a ring of 4,000 ops, a window every 10 steps), side by side.
Printed: the wall time of each and their ratio; each rank's resident memory from step 50 to the end (the job reads
/proc/self/statm itself), traced beside untraced, against the ring's size; the trace dir's files at the end (the
ring: its fixed size; the rank file; the .agg file: its windows, widened where steps are short), and the .agg file
extrapolated to a day, at the run's pace and for a job of 500 ops a second over 10 keys (the issue's budget: <= 50 MB
a rank a day); the report's window.
`straggler`: tests/jobs/bb_straggler.py for --straggler-steps steps, rank 1 40 ms slower from 60% of them on,
under `--black-box` (its ring far smaller than the run): what `report --json`'s whole run names (rank, onset step,
the extra time a step) beside what the job injected.
Nothing is asserted: the figures go in docs/PERFORMANCE.md and the closing note of the issue.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "tests" / "jobs"
OPS_PER_STEP = 7  # bb_train.py: 6 gradients and the loss
DAY_S, OPS_A_SECOND, KEYS = 86_400, 500, 10
ROW = 48  # bytes of an .agg row (docs/FORMAT.md, "The black box")


def _torchrun(script: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", str(script),
            *args]


def _disttrace(*args: str) -> list[str]:
    return [sys.executable, "-m", "disttrace", *args]


def _run(cmd: list[str], what: str) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{what} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def bounded(ops: int, tmp: Path) -> None:
    steps = max(60, ops // OPS_PER_STEP)
    args = ("--steps", str(steps))
    wall = {}
    rss = {}
    for mode in ("untraced", "black box"):
        truth = tmp / f"truth-{mode.replace(' ', '_')}"
        job = _torchrun(JOBS / "bb_train.py", *args, "--truth", str(truth))
        out = tmp / "bb"
        cmd = job if mode == "untraced" else _disttrace("run", "--black-box", "--out", str(out), "--no-store", *job)
        wall[mode] = _run(cmd, mode)
        rss[mode] = [json.loads(Path(f"{truth}.{r}").read_text())["rss"] for r in (0, 1)]
    print(f"bb_train.py, {steps:,} steps, {steps * OPS_PER_STEP:,} all-reduces a rank, 2 ranks on gloo")
    print(f"  wall time: untraced {wall['untraced']:.1f} s, black box {wall['black box']:.1f} s "
          f"({wall['black box'] / wall['untraced']:.2f}x)")
    files = sorted(p for p in out.iterdir() if p.is_file())
    ring = next(p.stat().st_size for p in files if p.suffix == ".ring")
    for r in (0, 1):
        grew = {m: rss[m][r]["at_end"] - rss[m][r]["at_50"] for m in rss}
        print(f"  rank {r}: resident memory from step 50 to the end: untraced {_mib(grew['untraced'])}, black box "
              f"{_mib(grew['black box'])} (its ring {_mib(ring)})")
    for p in files:
        print(f"  {p.name}: {p.stat().st_size:,} bytes")
    aggs = [p for p in files if p.suffix == ".agg"]
    if aggs:
        _agg_pace(aggs[0])
    report = subprocess.run(_disttrace("report", "--json", str(out)), capture_output=True, text=True)
    if report.stdout:
        w = json.loads(report.stdout)["summary"].get("window") or {}
        print(f"  report (exit {report.returncode}): the window holds steps {w.get('steps')} of {steps}")


def _agg_pace(path: Path) -> None:
    """The .agg file's windows (the recorder widens windows of 10 steps where the job's steps are short) and what it
    writes in a day: at this run's last whole window's pace, and by the recorder's rule for the issue's job of 500
    ops a second over 10 keys."""
    from disttrace.tracer.format import AGG_DATA_AT, AGG_DAY_BUDGET, AGG_HEADROOM, AGG_ROW, AGG_WINDOW_KEY

    data = path.read_bytes()
    rows = [struct.unpack_from(AGG_ROW, data, at) for at in range(AGG_DATA_AT, len(data), ROW)]
    wins = [r for r in rows if r[1] == AGG_WINDOW_KEY]
    widths = [r[6] - r[7] + 1 for r in wins]
    print(f"  .agg: {len(wins):,} windows of {widths[0]} to {max(widths)} steps ({len(rows) / len(wins):.1f} rows a "
          f"window); the first ones' widths {widths[:8]}")
    if len(wins) > 2:
        steady = wins[-2]
        per_window = sum(r[0] == steady[0] for r in rows) * ROW
        day = per_window * DAY_S * 1e9 / (steady[8] - steady[5])
        print(f"    a day at this run's pace (its last whole window, {widths[-2]} steps): {day / 1e6:.1f} MB a rank "
              f"(budget {AGG_DAY_BUDGET / 1e6:.0f} MB)")
    window_s = (KEYS + 1) * ROW * DAY_S / (AGG_HEADROOM * AGG_DAY_BUDGET)  # the least window the rule keeps
    for what, step_s in ((f"{OPS_A_SECOND} ops a step, a step a second", 1.0),
                         (f"{OPS_A_SECOND} ops a second in steps of {OPS_PER_STEP} ops", OPS_PER_STEP / OPS_A_SECOND)):
        width = 10
        while width * step_s < window_s:
            width *= 2
        day = (KEYS + 1) * ROW * DAY_S / (width * step_s)
        print(f"    {what}, {KEYS} keys: windows of {width} steps, {day / 1e6:.1f} MB a rank a day")


def straggler(steps: int, tmp: Path) -> None:
    at = int(steps * 0.6)
    out = tmp / "straggler"
    job = _torchrun(JOBS / "bb_straggler.py", "--steps", str(steps), "--at", str(at), "--slow-ms", "40",
                    "--compute-ms", "5")
    took = _run(_disttrace("run", "--black-box", "--ring", "200", "--out", str(out), "--no-store", *job),
                "the straggler job")
    report = subprocess.run(_disttrace("report", "--json", str(out)), capture_output=True, text=True)
    run = json.loads(report.stdout).get("run") or {}
    s = run.get("straggler") or {}
    print(f"bb_straggler.py, {steps:,} steps ({took:.0f} s), rank 1 40 ms slower from step {at} on, ring of 200 ops")
    print(f"  the whole run names: rank {s.get('rank')} from step {s.get('onset_step')} on, "
          f"{(s.get('extra_ns') or 0) / 1e6:+.1f} ms a step ({len(run.get('windows', {}).get('1', {}).get('start_ns', []))} "
          f"windows a rank)" if s else f"  the whole run names no straggler: {json.dumps(run)[:300]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--straggler-steps", type=int, default=1000)
    ap.add_argument("--parts", default="bounded,straggler")
    ns = ap.parse_args()
    parts = ns.parts.split(",")
    if not set(parts) <= {"bounded", "straggler"}:
        ap.error("--parts: bounded, straggler")
    with tempfile.TemporaryDirectory(prefix="disttrace-bb-long-") as d:
        if "bounded" in parts:
            bounded(ns.ops, Path(d))
        if "straggler" in parts:
            straggler(ns.straggler_steps, Path(d))


if __name__ == "__main__":
    main()
