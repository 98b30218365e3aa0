"""Benchmark: how often `disttrace diff` gets a periodic slowdown right, and its noise pair (issue 53).

    python benchmarks/bench_diff_truth.py [--reps 10] [--keep DIR]

Each repetition runs tests/jobs/diff_periodic.py three times, fresh: A as it is, B with `--slow` (rank 1 sleeps
50 ms before its forward in every 5th step of 20) and A again (A2), one right after the other and never chosen for
their pace (tests/analysis/diff/test_diff.py's pairs are made at one pace; this measures what a user meets). Then
`disttrace diff A B --json` and `disttrace diff A A2 --json`:
- the faulty pair is *right* when the diff exits 1 (B slower) and its first explanation is rank 1's compute span
  ending at the job's backward() line, explaining the injected mean within 30% (50 ms in each late step of those
  compared, over their count: ~10 ms a step, 7-13 ms); whether the mean moved beyond its
  noise is counted apart (the p90 may be what moved on a busy machine);
- the noise pair is *right* when the diff exits 0 and says `changed: false`.
The goal: at least 9 of 10 right each. One repetition takes ~40 s on 2 quiet cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_diff_quiet import step_moved_by_one_step_rule  # noqa: E402
from bench_verdict_rates import JOBS, trace  # noqa: E402 (the one way the benchmarks trace a job)

sys.path.insert(0, str(JOBS))
from tagged import line  # noqa: E402

JOB = "diff_periodic.py"
from diff_periodic import PERIOD, SLOW_RANK, SLOW_S, STEPS  # noqa: E402 (the job's own truth: it imports torch in main)

SLOW_NS = SLOW_S * 1e9
LATE = {k for k in range(STEPS) if k % PERIOD == PERIOD - 1}
SITE = f"{JOB}:{line(str(JOBS / JOB), 'backward')}"


def diff(a: Path, b: Path) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "disttrace", "diff", str(a), str(b), "--json"], capture_output=True,
                       text=True, timeout=600)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"diff exited {p.returncode}: {p.stderr}")
    return p.returncode, json.loads(p.stdout)


def injected_ns(d: dict) -> float:
    """What the fault adds to the mean step compared: 50 ms in each late step both runs have, over their count
    (tests/analysis/diff/test_diff.py's injected_ns)."""
    both = [s["index"] for s in d["steps"] if s["a_ns"] is not None and s["b_ns"] is not None]
    return SLOW_NS * sum(k in LATE for k in both) / len(both)


def faulty_right(rc: int, d: dict) -> tuple[bool, str]:
    top = d["explanations"][0] if d["explanations"] else {}
    named = (top.get("rank"), top.get("span")) == (SLOW_RANK, f"{SITE} → {SITE}")
    want = injected_ns(d)
    near = 0.7 * want <= top.get("delta_ns", 0) <= 1.3 * want
    ok = rc == 1 and d["slower"] and named and near
    what = f"{top.get('what', 'no explanation')} {top.get('delta_ns', 0) / 1e6:+.1f} ms (injected {want / 1e6:.1f})"
    return ok, f"exit {rc}, moved {d['moved'] or 'nothing'}, first: {what}"


def line_of(d: dict) -> str:
    s = d["shifts"]
    return ", ".join(f"{k} {s[k]['a_ns'] / 1e6:.1f} -> {s[k]['b_ns'] / 1e6:.1f} ms (±{s[k]['noise_ns'] / 1e6:.1f})"
                     for k in ("mean", "median", "p90") if k in s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--keep", type=Path, help="move the traces of a repetition that missed here, to study")
    ns = ap.parse_args()
    right_slow = right_quiet = mean_moved = 0
    before_slow = before_quiet = 0  # (the same pairs, the p90's noise leaving out one step: the rule before 2026-11-30)
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(ns.reps):
            a, b, a2 = (trace(JOB, 2, args, Path(tmp) / f"{name}{k}")
                        for name, args in (("a", ()), ("b", ("--slow",)), ("a2", ())))
            rc, d = diff(a, b)
            ok, how = faulty_right(rc, d)
            right_slow += ok
            mean_moved += "mean" in d["moved"]
            before = step_moved_by_one_step_rule(d)
            before_slow += faulty_right(1, {**d, "slower": any(x.delta_ns > 0 for x in before)
                                            and d["b"]["mean_ns"] > d["a"]["mean_ns"]})[0]
            print(f"rep {k + 1}/{ns.reps} A vs B: {'right' if ok else 'WRONG'}: {how}; {line_of(d)}", flush=True)
            rc2, d2 = diff(a, a2)
            quiet = rc2 == 0 and not d2["changed"]
            right_quiet += quiet
            before_quiet += not d2["structure"] and not step_moved_by_one_step_rule(d2)
            print(f"rep {k + 1}/{ns.reps} A vs A2: {'right' if quiet else 'WRONG'}: exit {rc2}, moved "
                  f"{d2['moved'] or 'nothing'}; {line_of(d2)}", flush=True)
            if ns.keep and not (ok and quiet):
                ns.keep.mkdir(parents=True, exist_ok=True)
                for p in (a, b, a2):
                    subprocess.run(["mv", str(p), str(ns.keep / p.name)], check=False)
            for p in (a, b, a2):
                subprocess.run(["rm", "-rf", str(p)], check=False)
    goal = -(-9 * ns.reps // 10)
    print(f"\nperiodic slowdown right (exit 1, rank 1's span first, the injected mean ±30%): {right_slow} of {ns.reps}; the mean "
          f"moved in {mean_moved}")
    print(f"noise pair right (exit 0, unchanged): {right_quiet} of {ns.reps} (goal: at least {goal} each)")
    print(f"the same pairs with the p90's noise leaving out one step (the rule before 2026-11-30): periodic slowdown "
          f"right {before_slow} of {ns.reps}, noise pair right {before_quiet} of {ns.reps}")


if __name__ == "__main__":
    main()
