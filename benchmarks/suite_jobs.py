"""Where the test suite's time goes: the jobs a pytest run traced, read back from their traces.

    python benchmarks/suite_jobs.py /tmp/pytest-of-$USER/pytest-N [--since EPOCH] [--each]

Every trace dir under the run's base temp (one per `disttrace run`: its run.json, its rank files) is one run; copies
of a trace (a test's damaged copy, a committed trace copied in) share its start and are counted once, and a trace
that began before the run did (a committed trace's copy) is left out: before `--since`, else more than
EARLIER_S before the newest run began. Per run: start-up (the command's start to the
first rank's init_process_group: torchrun's import of torch, then the ranks'), body (to the last rank's
destroy_process_group: what the tests measure) and teardown (to the command's end: the interpreters' exit).
Printed: per job script, its runs, ranks and wall time, then the three phases summed (`--each`: every run)."""

from __future__ import annotations

import argparse
import glob
import json
import os
from collections import defaultdict

EARLIER_S = 3 * 3600  # a suite's part takes well under this; a committed trace was recorded days before


def _rank_times(trace: str) -> tuple[list[float], list[float]]:
    """(each rank's init, each rank's end) as wall-clock seconds, from its meta record and its "left" record."""
    inits, ends = [], []
    for path in glob.glob(os.path.join(trace, "rank-*.jsonl")):
        with open(path, "rb") as f:
            try:
                meta = json.loads(f.readline())
            except ValueError:
                continue
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            tail = f.read().splitlines()
        if meta.get("k") != "meta":
            continue
        offset = meta["wall_ns"] - meta["mono_ns"]
        inits.append(meta["wall_ns"] / 1e9)
        for line in tail:
            if b'"k":"left"' in line:
                try:
                    ends.append((json.loads(line)["t"] + offset) / 1e9)
                except (ValueError, KeyError):
                    pass
    return inits, ends


def runs(base: str, since: float = 0.0) -> list[dict]:
    found = {}
    for info_path in glob.glob(os.path.join(base, "**", "run.json"), recursive=True):
        try:
            with open(info_path) as f:
                info = json.load(f)
            start, end, command = info["start_wall"], info["end_wall"], info["command"]
        except (OSError, ValueError, KeyError):
            continue
        if start < since or start in found:
            continue
        script = next((i for i, a in enumerate(command) if a.endswith(".py")), None)
        nproc = next((a.split("=", 1)[1] for a in command if a.startswith("--nproc_per_node=")), "")
        inits, ends = _rank_times(os.path.dirname(info_path))
        run = {"script": os.path.basename(command[script]) if script is not None else command[0],
               "args": " ".join(a for a in command[script + 1:] if not a.startswith("/")) if script is not None else "",
               "ranks": int(nproc) if nproc.isdigit() else len(inits), "wall": end - start, "start": start}
        if inits:
            run["start-up"] = min(inits) - start
            if len(ends) == len(inits):  # (a rank that died or hung has no end: its run's phases are unknown)
                run["body"], run["teardown"] = max(ends) - min(inits), end - max(ends)
        found[start] = run
    return sorted(found.values(), key=lambda r: r["start"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", help="the pytest run's base temp dir")
    p.add_argument("--since", type=float, help="leave out traces that began before this epoch time (default: "
                   "EARLIER_S before the newest trace began)")
    p.add_argument("--each", action="store_true", help="print every run")
    args = p.parse_args()
    made = runs(args.base, args.since or 0.0)
    if args.since is None and made:
        made = [r for r in made if r["start"] >= made[-1]["start"] - EARLIER_S]
    if args.each:
        for r in made:
            phases = " ".join(f"{k} {r[k]:5.1f}" for k in ("start-up", "body", "teardown") if k in r)
            print(f"{r['script']:28s} {r['args'][:40]:40s} {r['ranks']} ranks  wall {r['wall']:5.1f}  {phases}")
    by = defaultdict(lambda: [0, 0, 0.0])
    for r in made:
        by[r["script"]][0] += 1
        by[r["script"]][1] += r["ranks"]
        by[r["script"]][2] += r["wall"]
    print(f"{'script':28s} runs ranks  wall s")
    for script, (n, ranks, wall) in sorted(by.items(), key=lambda kv: -kv[1][2]):
        print(f"{script:28s} {n:4d} {ranks:5d} {wall:7.1f}")
    timed = [r for r in made if "body" in r]
    print(f"{len(made)} runs, {sum(r['ranks'] for r in made)} ranks, {sum(r['wall'] for r in made):.0f} s of wall "
          f"time; of the {len(timed)} whose ranks all ended: " +
          ", ".join(f"{k} {sum(r[k] for r in timed):.0f} s" for k in ("start-up", "body", "teardown")))


if __name__ == "__main__":
    main()
