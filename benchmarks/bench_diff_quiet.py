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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--job", default="diff_job.py")
    ap.add_argument("--nproc", type=int, default=4)
    ns = ap.parse_args()
    quiet, lines = 0, []
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
            line = (f"pair {k + 1}/{ns.pairs}: {'quiet' if ok else 'NOT QUIET'}: median {d['a']['median_ns'] / 1e6:.1f}"
                    f" -> {d['b']['median_ns'] / 1e6:.1f} ms ({d['delta_ns'] / 1e6:+.1f} ms, noise "
                    f"±{d['noise_ns'] / 1e6:.1f} ms), exit {p.returncode}, changed {d['changed']}, "
                    f"{len(d['structure'])} structure differences, explanations {own or 'none of their own'}")
            lines.append(line)
            print(line, flush=True)
            for x in (a, b):
                subprocess.run(["rm", "-rf", str(x)], check=False)
    print(f"\nquiet: {quiet} of {ns.pairs} (goal: at least {-(-9 * ns.pairs // 10)})")


if __name__ == "__main__":
    main()
