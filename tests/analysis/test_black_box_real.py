"""Black-box windows of real jobs (issue 50): a fault long after the rings wrapped is named in the window as in
the whole trace: a hang (the rank that did not arrive and where it was), a rank that raised, an order desync, a
P2P size mismatch; and nothing else is made of the ops one rank's ring holds and the other's had overwritten.

Each job (tests/jobs/bb_faults.py MODE, 2 ranks on gloo, 150 marked steps, the fault at step 130) is traced
whole, then cut into rings of 16 KiB and 24 KiB (tests/ringfiles.py, as the recorder writes them: the ranks'
windows start at different ops, some 25 and 40 steps before the end); and recorded by `disttrace run --black-box`
itself, whose windows must give the same verdict."""

from __future__ import annotations

import json

import pytest

from harness import job, run_disttrace
from ringfiles import to_black_box

JOB = job("bb_faults")
RINGS = {0: 16 << 10, 1: 24 << 10}
RC = {"hang": 137, "desync": 137, "raise": 1, "p2p": 0}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def windows(traced, tmp_path_factory):
    """mode -> (the whole trace's report --json, the window's)."""
    out = {}

    def get(mode: str):
        if mode not in out:
            whole = traced("bb_faults.py", 2, [mode], "off", JOB.RUN_ARGS.get(mode, ()), RC[mode])
            box = tmp_path_factory.mktemp(f"bb-{mode}") / "box"
            assert all(to_black_box(whole, box, RINGS).values())  # every ring wrapped
            out[mode] = _report(whole), _report(box)
        return out[mode]

    return get


def _report(trace) -> dict:
    proc = run_disttrace("report", "--json", trace)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _verdict(report: dict) -> list[tuple]:
    """The problems as the window must repeat them: kind, op, ranks, group_seq, step, where (the P2P message's
    number is its order in the window, not in the job, and the events' rows differ)."""
    return sorted((p["kind"], p["op"], tuple(p["ranks"]), p["group_seq"], p["step"],
                   json.dumps(p.get("where", {}), sort_keys=True)) for p in report["problems"])


def _window_holds(window: dict, last_step: int) -> None:
    w = window["summary"]["window"]
    assert w["wrapped"] == [0, 1] and w["outside"] > 0
    assert 60 < w["steps"][0] < JOB.FAULT_STEP and w["steps"][1] == last_step  # long after the job's start
    assert window["summary"]["notes"][0].startswith("black-box trace: a window")
    assert not window["summary"]["warnings"]


@pytest.mark.parametrize("mode", ["hang", "raise", "desync", "p2p"])
def test_window_verdict_is_the_whole_trace_verdict(windows, mode):
    whole, window = windows(mode)
    assert _verdict(window) == _verdict(whole) and whole["problems"]
    _window_holds(window, JOB.STEPS - 1 if mode == "p2p" else JOB.FAULT_STEP)


def test_hang_after_the_wrap_names_the_rank_and_where(windows):
    _, window = windows("hang")
    (hang,) = window["problems"]
    assert hang["kind"] == "hang" and hang["ranks"] == [1] and hang["op"] == "all_reduce"
    assert hang["where"]["1"].endswith(f"bb_faults.py:{JOB.SLEEP_LINE} in load_next_batch")
    assert f"bb_faults.py:{JOB.ALL_REDUCE_LINE}" in hang["where"]["0"]
    assert hang["step"] == JOB.FAULT_STEP


def test_raise_after_the_wrap(windows):
    _, window = windows("raise")
    kinds = {p["kind"]: p for p in window["problems"]}
    assert set(kinds) == {"died", "error"}
    assert kinds["died"]["ranks"] == [1] and kinds["error"]["ranks"] == [0]
    assert kinds["error"]["step"] == JOB.FAULT_STEP


def test_desync_and_p2p_mismatch_after_the_wrap(windows):
    (desync,) = windows("desync")[1]["problems"]
    assert desync["kind"] == "mismatch" and desync["ranks"] == [0, 1] and desync["step"] == JOB.FAULT_STEP
    assert "rank 0 op all_reduce; rank 1 op broadcast" in desync["message"]
    (p2p,) = windows("p2p")[1]["problems"]
    assert p2p["kind"] == "mismatch" and p2p["op"] == "send" and p2p["ranks"] == [0, 1]
    assert p2p["step"] == JOB.FAULT_STEP and "8.0 KiB" in p2p["message"] and "16.0 KiB" in p2p["message"]
    assert f"bb_faults.py:{JOB.SEND_LINE}" in p2p["message"]


# -- the same jobs recorded by `disttrace run --black-box` itself ------------------------------------------------
@pytest.mark.parametrize("mode", ["hang", "raise", "desync", "p2p"])
def test_recorded_black_box_gives_the_whole_trace_verdict(windows, traced, mode):
    """The recorder's own rings (`--black-box --ring 100`: 64 KiB, some 230 ops of the job's 300 a rank, so each
    wraps) give the verdict of the whole trace of the same job, named with the same ops, ranks, steps and where."""
    whole, _ = windows(mode)
    box = traced("bb_faults.py", 2, [mode], "off", ("--black-box", "--ring", "100", *JOB.RUN_ARGS.get(mode, ())),
                 RC[mode])
    assert sorted(p.name for p in box.glob("rank-*.ring")) and sorted(box.glob("rank-*.agg"))
    window = _report(box)
    assert _verdict(window) == _verdict(whole) and whole["problems"]
    # (each rank's ring holds about the same ops here: their windows may start at the same op, nothing outside)
    assert window["summary"]["window"]["wrapped"] == [0, 1]
    assert not window["summary"]["warnings"]
    if mode == "p2p":  # one message a step from step 0: each send and its recv carry the step's number
        _messages_are_numbered(box)


def _messages_are_numbered(box) -> None:
    """Every P2P op the rings hold carries its pair's number ("ps"), and every message the window matches pairs a
    send and a recv of one number: the step's (the job sends one message a step, step 0 first)."""
    from disttrace.tracer.analysis import analyze
    from disttrace.tracer.data.load import load_trace
    from disttrace.tracer.data.table import NONE

    t = load_trace([str(box)], cache=False)
    p2p_rows = [i for i in range(len(t)) if t.op[i] in ("send", "recv")]
    assert p2p_rows and all(t.pair_seq[i] != NONE for i in p2p_rows)
    matched = [m for m in analyze(t).p2p if m.send is not None and m.recv is not None]
    assert len(matched) > 50
    numbers = [t.pair_seq[m.send] for m in matched]
    assert numbers == [t.pair_seq[m.recv] for m in matched]
    assert numbers == list(range(JOB.STEPS - len(matched), JOB.STEPS))
