"""benchmarks/bench_record_cost.py's reading of callgrind's output (issue 50's yardstick): each thread's instructions
from files of callgrind 3.19's format (--separate-threads=yes), and the per-op difference of two processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_record_cost import parse_profile, per_op, thread_totals  # noqa: E402


def _profile(thread: int | None, summary: int, totals: int | None) -> str:
    """A callgrind output file as 3.19 writes it at a program's end (the cost lines shortened)."""
    return "\n".join([
        "# callgrind format", "version: 1", "creator: callgrind-3.19.0", "pid: 21006",
        "cmd:  python bench_record_cost.py --worker off --ops 30", "part: 1",
        *([f"thread: {thread}"] if thread is not None else []), "", "",
        "desc: I1 cache: ", "desc: Timerange: Basic block 0 - 165684036", "desc: Trigger: Program termination", "",
        "positions: line", "events: Ir", f"summary: {summary}", "", "",
        "ob=(30) /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30", "fl=(1) ???", "fn=(1788) 0x1234",
        "calls=2 3350 ", "0 6", "",
        *([f"totals: {totals}"] if totals is not None else []), ""])


def test_a_file_gives_its_thread_and_its_totals():
    assert parse_profile(_profile(3, 226258, 226260)) == (3, 226260)  # totals: the sum of the cost lines
    assert parse_profile(_profile(None, 500, None)) == (1, 500)  # no thread: line (one file): the main thread
    with pytest.raises(ValueError):
        parse_profile("not callgrind\n")


def test_a_process_sums_its_threads_and_skips_the_empty_file(tmp_path):
    for name, text in (("cg.21006", ""), ("cg.21006-01", _profile(1, 614102486, 614102486)),
                       ("cg.21006-02", _profile(2, 2971, 2971)), ("cg.21006-05", _profile(5, 0, 0))):
        (tmp_path / name).write_text(text)
    assert thread_totals(sorted(tmp_path.glob("cg.*"))) == {1: 614102486, 2: 2971, 5: 0}


def test_per_op_is_the_difference_over_the_extra_ops():
    small = {1: 1_000_000, 2: 50_000, 3: 7}
    large = {1: 1_000_000 + 500 * 42_000, 2: 50_000 + 500 * 8_000, 4: 500}  # a thread only the longer run had
    assert per_op(small, large, 100, 600) == (42_000.0, (21_000_000 + 4_000_000 + 500 - 7) / 500)


def test_the_floor_benchmark_refuses_modes_it_does_not_have(monkeypatch, capsys):
    """benchmarks/bench_record_floor.py (its prototypes measured beside the untraced op): a mode it does not know, or
    none to measure against, is a one-line usage error before any process starts."""
    from bench_record_floor import main

    for modes in ("untraced,nope", "lean"):
        monkeypatch.setattr(sys, "argv", ["bench_record_floor.py", "--modes", modes])
        with pytest.raises(SystemExit) as e:
            main()
        assert e.value.code == 2 and "--modes: a comma-separated subset of" in capsys.readouterr().err
