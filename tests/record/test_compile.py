"""torch.compile'd jobs compile the same traced as untraced, and their collectives are still recorded.

tests/jobs/compile_modes.py runs compiled DDP (with a compiled optimizer step), FSDP2 under compile, a fullgraph=True
step that calls dist.all_reduce and a compiled functional collective, and writes what Dynamo counted: its graph
breaks with their reasons, frames, graphs, recompiles and AOT compilations. The job runs once untraced and once
under `disttrace run`; the counts must be equal (before disttrace's code was hidden from Dynamo, the traced run had
17 graph breaks against 3 and 6 AOT compilations against 1), and so must the numbers the job computed."""

from __future__ import annotations

import pytest

from harness import assert_compiled_collectives_recorded, assert_compiled_the_same, compile_modes_runs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return compile_modes_runs(tmp_path_factory.mktemp("compile"), nproc=2)


def test_the_compiler_does_the_same_traced_and_untraced(runs):
    counts, _ = runs
    assert_compiled_the_same(counts)


def test_collectives_inside_compiled_code_are_recorded_at_the_users_line(runs):
    _, trace = runs
    assert_compiled_collectives_recorded(trace)
