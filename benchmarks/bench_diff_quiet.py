"""Benchmark: how often `disttrace diff` of two runs of the same job, nothing changed, says nothing changed.

    python benchmarks/bench_diff_quiet.py [--pairs 10] [--job diff_job.py] [--nproc 4]

Each pair is the job of tests/jobs/diff_job.py run twice without a change, one run right after the other and never
chosen for their pace (tests/analysis/diff/test_diff.py's pairs are made at the same pace; this measures what a user meets), then
`disttrace diff A B --json`. A pair is *quiet* when the diff exits 0, says `changed: false` and lists no
explanation of its own (only "everything else"). The goal (issue 42): at least 9 of 10 quiet. One pair takes
~30 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_verdict_rates import trace  # noqa: E402 (the one way the benchmarks trace a job)


def step_moved_by_one_step_rule(d: dict) -> list:
    """The step's statistics (timing.Shift) that moved under the p90 rule before 2026-11-30 (its noise's last term
    the most that leaving out one step moves it, not a tenth of them: timing's rule with `left_out_count` 1), from
    the same diff's step lengths (`--json`'s steps): the two rules side by side on one pair. The step's verdict only:
    the explanations are the ones the diff listed."""
    from disttrace.tracer.analysis.diff import timing

    both = [s for s in d["steps"] if s["a_ns"] is not None and s["b_ns"] is not None]
    now = timing.left_out_count
    timing.left_out_count = lambda n, stat: 1
    try:
        return timing.moved([s["a_ns"] for s in both], [s["b_ns"] for s in both])
    finally:
        timing.left_out_count = now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--job", default="diff_job.py")
    ap.add_argument("--nproc", type=int, default=4)
    ns = ap.parse_args()
    quiet, lines, quiet_before = 0, [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(ns.pairs):
            a = trace(ns.job, ns.nproc, (), Path(tmp) / f"a{k}")
            b = trace(ns.job, ns.nproc, (), Path(tmp) / f"b{k}")
            p = subprocess.run([sys.executable, "-m", "disttrace", "diff", str(a), str(b), "--json"],
                               capture_output=True, text=True, timeout=600)
            if p.returncode not in (0, 1):
                raise RuntimeError(f"diff exited {p.returncode}: {p.stderr}")
            d = json.loads(p.stdout)
            own = [e["what"] for e in d["explanations"] if not e["what"].startswith("everything else")]
            ok = p.returncode == 0 and not d["changed"] and not own
            quiet += ok
            before = step_moved_by_one_step_rule(d)
            quiet_before += not d["structure"] and not before and not own
            line = (f"pair {k + 1}/{ns.pairs}: {'quiet' if ok else 'NOT QUIET'}: median {d['a']['median_ns'] / 1e6:.1f}"
                    f" -> {d['b']['median_ns'] / 1e6:.1f} ms ({d['delta_ns'] / 1e6:+.1f} ms, noise "
                    f"±{d['noise_ns'] / 1e6:.1f} ms), exit {p.returncode}, changed {d['changed']}, "
                    f"{len(d['structure'])} structure differences, explanations {own or 'none of their own'}; "
                    f"p90 {d['shifts']['p90']['a_ns'] / 1e6:.1f} -> {d['shifts']['p90']['b_ns'] / 1e6:.1f} ms "
                    f"(±{d['shifts']['p90']['noise_ns'] / 1e6:.1f}); moved under the one-step rule: "
                    f"{[x.stat for x in before] or 'none'}")
            lines.append(line)
            print(line, flush=True)
            for x in (a, b):
                subprocess.run(["rm", "-rf", str(x)], check=False)
    print(f"\nquiet: {quiet} of {ns.pairs} (goal: at least {-(-9 * ns.pairs // 10)}); with the p90's noise leaving "
          f"out one step (the rule before 2026-11-30), on the same pairs: {quiet_before} of {ns.pairs}")


if __name__ == "__main__":
    main()
