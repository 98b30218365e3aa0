"""`disttrace demo` without running a job: the guide, the list, bad input, and the ring's bookkeeping."""

from __future__ import annotations

import ast

import pytest

from harness import run_disttrace

from disttrace.demos.narrate_algorithms import ring_chunks
from disttrace.demos.registry import DEMOS, START_HERE

ISSUE_DEMOS = {"broadcast", "reduce", "all-reduce", "gather", "all-gather", "scatter", "reduce-scatter", "all-to-all",
               "barrier", "send-recv", "ring-allreduce", "allreduce-three-ways", "data-parallel", "tensor-parallel",
               "pipeline-parallel", "zero1", "fsdp2", "p2p-bandwidth", "straggler", "hang"}


def test_registry_has_every_demo_of_the_issue_with_a_program_and_a_narration():
    assert set(DEMOS) == ISSUE_DEMOS
    for demo in DEMOS.values():
        assert demo.path.is_file(), demo.path
        ast.parse(demo.path.read_text())        # the program is valid Python
        assert callable(demo.narrator())
        assert demo.nproc_ok(demo.nproc), demo.name


@pytest.mark.slow
def test_no_argument_prints_a_guide_for_a_newcomer():
    proc = run_disttrace("demo")
    assert proc.returncode == 0, proc.stderr
    assert f"Start with:  disttrace demo {START_HERE}" in proc.stdout
    assert START_HERE == "all-reduce"
    for name in DEMOS:
        assert f"  {name} " in proc.stdout


def test_the_list_speaks_to_a_newcomer():
    """A line of the list says what the program shows, not where it comes from ('(the guide's example)', 'the
    lecture's DDP')."""
    import re

    for demo in DEMOS.values():
        assert not re.search(r"\bseeds?\b|lecture|homework", demo.summary, re.I), (demo.name, demo.summary)


@pytest.mark.slow
def test_list_shows_one_line_per_demo():
    proc = run_disttrace("demo", "--list")
    assert proc.returncode == 0
    lines = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert lines == list(DEMOS)


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_code_2():
    for args, words in [
        (("demo", "all-reduse"), "no demo named 'all-reduse'"),
        (("demo", "tensor-parallel", "--nproc", "3"), "runs on 2 or 4"),
        (("demo", "broadcast", "--size", "4"), "--size does not apply"),
        (("demo", "ring-allreduce", "--size", "0"), "positive"),
        (("demo", "ring-allreduce", "--size", "7"), "multiple of"),
    ]:
        proc = run_disttrace(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert words in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr


def _simulate_ring(data: list[list[int]]) -> list[list[int]]:
    """The ring of demos/programs/ring_allreduce.py, played with plain lists and ring_chunks' bookkeeping."""
    n = len(data)
    size = len(data[0]) // n
    chunks = [[row[i * size:(i + 1) * size] for i in range(n)] for row in data]
    for k in range(2 * (n - 1)):
        messages = {}
        for r in range(n):
            phase, _, sent, _ = ring_chunks(r, n, k)
            messages[(r + 1) % n] = list(chunks[r][sent])
        for r in range(n):
            phase, _, _, got = ring_chunks(r, n, k)
            incoming = messages[r]
            chunks[r][got] = ([a + b for a, b in zip(chunks[r][got], incoming)] if phase == "reduce-scatter"
                              else incoming)
    return [[x for c in row for x in c] for row in chunks]


def test_ring_bookkeeping_sums_for_any_world_size():
    for n in (2, 3, 4, 5):
        data = [[100 * r + i for i in range(2 * n)] for r in range(n)]
        total = [sum(col) for col in zip(*data)]
        assert _simulate_ring(data) == [total] * n


def test_the_ranks_output_is_printed_whole_lines_with_the_rank_in_front(tmp_path):
    """Two ranks writing into their files a piece at a time: each line is printed once whole, prefixed with its
    rank, whatever the other rank wrote meanwhile; an unterminated last line when the job has ended."""
    from disttrace.demos.progress import RankOutput

    out = tmp_path / "trace"
    logs = out / "job-output" / "run_x" / "attempt_0"
    for r in (0, 1):
        (logs / str(r)).mkdir(parents=True)
    lines: list[str] = []
    follow = RankOutput(out / "job-output", out, 2, lines.append)

    def write(rank, text, name="stdout.log"):
        with open(logs / str(rank) / name, "a") as f:
            f.write(text)

    write(0, "rank 0 bef")
    write(1, "rank 1 before: [4, 5")
    follow.poll()
    assert lines == []  # no line is whole yet
    write(0, "ore: [1, 2, 3]\nrank 0 after")
    write(1, ", 6]\n")
    write(1, "Traceback (most recent call last):\n", "stderr.log")
    follow.poll()
    assert sorted(lines) == ["  rank 0 │ rank 0 before: [1, 2, 3]", "  rank 1 │ Traceback (most recent call last):",
                             "  rank 1 │ rank 1 before: [4, 5, 6]"]
    lines.clear()
    for r in (0, 1):  # the ranks joined the process group: their trace files
        (out / f"rank-0000{r}-h-{r}.jsonl").write_text("")
    write(0, ": [12, 15, 18]")  # the job ends without the last newline
    follow.poll(final=True)
    assert lines[0].startswith("  all 2 ranks have joined the process group")
    assert lines[1:] == ["  rank 0 │ rank 0 after: [12, 15, 18]"]
