"""The whole run's straggler on a real torchrun job (tests/jobs/bb_straggler.py: a training loop whose rank 1 loads
its data 40 ms slower from step 30 of 60), recorded with `disttrace run --black-box`: the aggregates name rank 1,
the step it began at and about 40 ms a step, in `report --json`'s "run"."""

from __future__ import annotations

import argparse

import orjson
import pytest

from harness import run_traced

pytestmark = pytest.mark.slow


def _has_black_box() -> bool:
    """Whether this tree's `disttrace run` has the recorder's --black-box (issue 50's recorder, merged apart)."""
    from disttrace.tracer.commands import run

    p = argparse.ArgumentParser()
    run.add_arguments(p)
    return "--black-box" in p._option_string_actions


def test_a_straggler_from_step_30_named_by_the_aggregates(tmp_path):
    if not _has_black_box():
        pytest.skip("`disttrace run --black-box` is not in this tree (the recorder's part of issue 50)")
    out = tmp_path / "trace"
    proc = run_traced("bb_straggler.py", out, 2, ["--steps", 60, "--at", 30, "--slow-ms", 40], summaries="off",
                      run_args=["--black-box", "--window", "10"], timeout=300, again=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from disttrace.tracer.analysis import whole_run
    from disttrace.tracer.data.load import read_aggregates

    agg = read_aggregates(str(out))
    assert agg is not None and agg.ranks == [0, 1] and not agg.damage, agg and agg.damage
    s = whole_run(agg).straggler
    assert s is not None and s.rank == 1 and s.unit == "step", s
    assert abs(s.onset_step - 30) <= 2, s
    assert 25e6 <= s.extra_ns <= 55e6, s  # 40 ms a step injected; the machine's jitter around it
    from harness import run_disttrace

    report = run_disttrace("report", "--json", str(out), timeout=300)
    run = orjson.loads(report.stdout)["run"]
    assert run["straggler"]["rank"] == 1 and run["straggler"]["onset_step"] == s.onset_step
