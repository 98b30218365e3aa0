"""The analysis of black-box windows (issue 50): rings cut at another op on each rank after they wrapped. What
one rank's window holds and another's had overwritten is outside the window: no hang, death, mismatch, desync or
unmatched message is made of it; a fault after the wrap is still named, with its ops and ranks. Collectives are
matched by each group's sequence numbers, P2P by each pair's numbers where the records carry them, else by the
pair's order (analysis/core/window.py).

Synthetic jobs (tests/synthetic.py) written as rank files, then cut into rings as the recorder writes them
(tests/ringfiles.py), of sizes that start each rank's window at another op."""

from __future__ import annotations

import orjson
import pytest

from ringfiles import rank_files_of, to_black_box
from synthetic import MS, Trace
from disttrace.tracer.analysis import analyze
from disttrace.tracer.analysis.text.json_report import to_json
from disttrace.tracer.data.load import load_trace

STEPS = 60
RINGS = {0: 4000, 1: 7000, 2: 5500}  # bytes: each rank's window starts at another op, all wrapped


def _job(world: int = 3, steps: int = STEPS, fault=None) -> Trace:
    """Each step: rank 0 sends 256 B to rank 1, then every rank all_reduces; `fault(tr, step, t)` may replace a
    step's ops (returns True where it did)."""
    tr = Trace(world)
    for k in range(steps):
        t = k * 10 * MS
        if fault is not None and fault(tr, k, t):
            continue
        tr.send(0, 1, t, t + MS, 256, site="train.py:20 in step")
        tr.recv(1, 0, t, t + MS, 256, site="train.py:22 in step")
        tr.coll("all_reduce", dict.fromkeys(range(world), t + 2 * MS), t + 3 * MS, nbytes=1024,
                site="train.py:30 in step")
    return tr


def _window(tr: Trace, tmp_path, rings=None, step_ends=()):
    box = tmp_path / "box"
    wraps = to_black_box(rank_files_of(tr, tmp_path / "plain", step_ends), box, rings or RINGS)
    assert all(wraps.values())
    t = load_trace(str(box), cache=False)
    starts = sorted(info.ring["start_ns"] for info in t.ranks.values())
    assert starts[0] < starts[-1] - 10 * MS  # the windows start at different ops, steps apart
    return t, analyze(t)


def test_clean_job_windows_make_no_problem(tmp_path):
    t, a = _window(_job(), tmp_path)
    assert a.problems == []
    assert not t.warnings


def test_report_says_what_the_window_holds(tmp_path):
    """The job marks its steps: the window's ops are numbered by the job's steps (a ring's first marker is not
    the job's first), and the report says the trace is a window, of which steps, and how much of it is outside."""
    t, a = _window(_job(), tmp_path, step_ends=[k * 10 * MS + 5 * MS for k in range(STEPS)])
    w = to_json(a)["summary"]["window"]
    assert w["ranks"] == [0, 1, 2] and w["wrapped"] == [0, 1, 2]
    # the job's step numbers: the first every rank holds whole is the one after the latest ring's first (cut)
    latest = max(info.ring["start_ns"] for info in t.ranks.values()) // (10 * MS)
    assert w["steps"] == [latest + 1, STEPS - 1] and latest > 40
    held = {t.user_step[i] for i in range(len(t)) if t.rank[i] == 2}  # by the job's numbers, not the ring's
    first = t.ranks[2].ring["first_step"]
    assert first > 20 and held >= set(range(first, STEPS)) and min(held) >= first - 1
    assert w["min_ops"] == t.ranks[0].ring["ops"] and w["outside"] > 0
    assert a.notes[0].startswith("black-box trace: a window") and f"steps {w['steps'][0]}–{STEPS - 1}" in a.notes[0]
    assert a.problems == []


def test_hang_after_the_wrap_names_the_rank_that_did_not_arrive(tmp_path):
    """Rank 2 never reaches the last step's all_reduce (it is stuck elsewhere); ranks 0 and 1 wait in it."""
    def fault(tr, k, t):
        if k < STEPS - 1:
            return False
        tr.send(0, 1, t, t + MS, 256)
        tr.recv(1, 0, t, t + MS, 256)
        tr.coll("all_reduce", {0: t + 2 * MS, 1: t + 2 * MS}, None, nbytes=1024, site="train.py:30 in step")
        return True

    t, a = _window(_job(fault=fault), tmp_path)
    (hang,) = [p for p in a.problems if p.kind == "hang"]
    assert hang.ranks == [2] and hang.group_seq == STEPS - 1
    assert "train.py:30" in hang.message
    assert {p.kind for p in a.problems} == {"hang"}


def test_order_desync_after_the_wrap(tmp_path):
    """At step 50 rank 2 broadcasts where the others all_reduce (and goes on as they do)."""
    def fault(tr, k, t):
        if k != 50:
            return False
        tr.send(0, 1, t, t + MS, 256)
        tr.recv(1, 0, t, t + MS, 256)
        tr.coll("all_reduce", {0: t + 2 * MS, 1: t + 2 * MS}, t + 3 * MS, nbytes=1024, seq=50)
        tr.coll("broadcast", {2: t + 2 * MS}, t + 3 * MS, nbytes=1024, root=0, seq=50, site="train.py:44 in step")
        return True

    t, a = _window(_job(fault=fault), tmp_path)
    (p,) = a.problems
    assert p.kind == "mismatch" and p.group_seq == 50
    assert "broadcast" in p.message and "all_reduce" in p.message


def test_p2p_size_mismatch_after_the_wrap(tmp_path):
    """At step 52 rank 1 expects 512 B where rank 0 sends 256."""
    def fault(tr, k, t):
        if k != 52:
            return False
        tr.send(0, 1, t, t + MS, 256, site="train.py:20 in step")
        tr.recv(1, 0, t, t + MS, 512, site="train.py:22 in step")
        tr.coll("all_reduce", dict.fromkeys(range(3), t + 2 * MS), t + 3 * MS, nbytes=1024)
        return True

    t, a = _window(_job(fault=fault), tmp_path)
    (p,) = a.problems
    assert p.kind == "mismatch" and p.ranks == [0, 1]
    assert "256 B" in p.message and "512 B" in p.message
    assert {t.start_ns[i] for i in p.events} == {52 * 10 * MS}


def _ahead(numbered: bool) -> Trace:
    """A sender that runs ahead: rank 0's isends (buffered: done at once) of a size that changes every message,
    rank 1 receiving each 2.5 steps later, so that at the trace's end two sends are done and not yet received and
    every recv ends after a later send began; both all_reduce each step."""
    tr = Trace(2)
    for k in range(STEPS):
        t = k * 10 * MS
        size = 256 * (1 + k % 5)
        ps = {"pair_seq": k} if numbered else {}
        tr.send(0, 1, t, t + MS // 10, size, async_op=True, site="train.py:20 in step", **ps)
        if t + 25 * MS < STEPS * 10 * MS:
            tr.recv(1, 0, t + 25 * MS, t + 26 * MS, size, site="train.py:22 in step", **ps)
        tr.coll("all_reduce", {0: t + 2 * MS, 1: t + 2 * MS}, t + 3 * MS, nbytes=1024)
    return tr


def test_numbered_messages_are_matched_by_their_numbers_when_the_sender_runs_ahead(tmp_path):
    """Matched by order, the recvs would pair with sends two messages later (each recv ends after them): sizes
    that differ, a mismatch that is not there. The pair's numbers in the records match each message with its own."""
    t, a = _window(_ahead(numbered=True), tmp_path, rings={0: 4000, 1: 5500})
    # the only problem: the two messages rank 1 had not received when the windows end (the trace's state then)
    (p,) = a.problems
    assert p.kind == "unmatched" and sorted(t.start_ns[i] // MS for i in p.events) == [580, 590]
    matched = [m for m in a.p2p if m.send is not None and m.recv is not None]
    assert len(matched) > 10
    assert all(t.bytes[m.send] == t.bytes[m.recv] and t.pair_seq[m.send] == t.pair_seq[m.recv] for m in matched)


def test_p2p_hang_after_the_wrap(tmp_path):
    """At the last step rank 1 never posts its recv: rank 0 is stuck in its send."""
    def fault(tr, k, t):
        if k < STEPS - 1:
            return False
        tr.send(0, 1, t, None, 256, site="train.py:20 in step")
        return True

    t, a = _window(_job(fault=fault), tmp_path)
    hangs = [p for p in a.problems if p.kind == "hang" and p.op == "send"]
    assert len(hangs) == 1 and hangs[0].ranks == [0]
    assert "recv rank 1 never posted" in hangs[0].message
    assert not [p for p in a.problems if p.kind in ("unmatched", "mismatch", "died")]


def test_recv_that_never_got_its_message_is_not_outside(tmp_path):
    """The last 30 steps rank 0 only all-reduces (its ring holds no send to rank 1); then rank 1 waits in a recv
    from rank 0 that rank 0 never sends, and rank 0 waits in an all_reduce without rank 1: the stuck recv is a
    hang of the window, not a message whose send the ring had overwritten."""
    def fault(tr, k, t):
        if k < STEPS - 30:
            return False
        if k < STEPS - 1:
            tr.coll("all_reduce", dict.fromkeys(range(3), t + 2 * MS), t + 3 * MS, nbytes=1024)
            return True
        tr.recv(1, 0, t, None, 256, site="train.py:22 in step")
        tr.coll("all_reduce", {0: t + 2 * MS, 2: t + 2 * MS}, None, nbytes=1024)
        return True

    t, a = _window(_job(fault=fault), tmp_path)
    hangs = [p for p in a.problems if p.kind == "hang"]
    assert hangs and all(p.ranks == [1] for p in hangs)
    assert any(p.op == "recv" and "rank 1 is stuck in recv" in p.message for p in hangs)


def test_rings_that_never_wrapped_hold_the_whole_run(tmp_path):
    box = tmp_path / "box"
    to_black_box(rank_files_of(_job(steps=8), tmp_path / "plain"), box, 64 << 10)
    t = load_trace(str(box), cache=False)
    a = analyze(t)
    assert a.problems == [] and len(a.collectives) == 8 and len(a.p2p) == 8
    assert a.notes[0].startswith("black-box trace: no ring has wrapped")


def _two_groups(hang: bool) -> Trace:
    """_job's steps, and every 10th step a broadcast in the group of ranks 1 and 2; with `hang`, at the last step
    rank 2 enters that broadcast and rank 1 never does (it is stuck before it)."""
    def fault(tr, k, t):
        if k % 10 and not (hang and k == STEPS - 1):
            return False
        tr.send(0, 1, t, t + MS, 256)
        tr.recv(1, 0, t, t + MS, 256)
        if hang and k == STEPS - 1:
            tr.coll("broadcast", {2: t + 4 * MS}, None, nbytes=64, group=[1, 2], root=1, site="train.py:50 in sync")
            return True
        tr.coll("all_reduce", dict.fromkeys(range(3), t + 2 * MS), t + 3 * MS, nbytes=1024)
        tr.coll("broadcast", {1: t + 4 * MS, 2: t + 4 * MS}, t + 5 * MS, nbytes=64, group=[1, 2], root=1)
        return True

    return _job(fault=fault)


def test_a_group_none_of_whose_ops_a_ring_holds(tmp_path):
    """Rank 1's small ring holds none of the group [1, 2]'s broadcasts that rank 2's holds: they are before its
    window (by the time of its oldest record), not broadcasts it missed; one begun after it and never joined by
    rank 1 is a hang."""
    rings = {0: 7000, 1: 2500, 2: 8000}
    t, a = _window(_two_groups(hang=False), tmp_path / "clean", rings)
    (g,) = [k for k, grp in enumerate(t.groups) if grp.ranks == (1, 2)]
    held = {t.rank[i] for i in range(len(t)) if t.gid[i] == g}
    assert held == {2}  # (rank 1's ring holds none of the group's ops)
    assert a.problems == []
    t, a = _window(_two_groups(hang=True), tmp_path / "hang", rings)
    (hang,) = [p for p in a.problems if p.kind == "hang"]
    assert hang.op == "broadcast" and hang.ranks == [1]


def _live(tr: Trace, tmp_path, reason: str, copied: dict[int, int]):
    """The job's rings as a snapshot taken for `reason` (snapshot.json beside them), each rank's copy ending with
    its `copied` record at copied[rank], as the recorder writes it."""
    box = tmp_path / reason
    to_black_box(rank_files_of(tr, tmp_path / f"plain-{reason}"), box, {0: 3000, 1: 3500})
    (box / "snapshot.json").write_bytes(orjson.dumps({"seq": 1, "reason": reason, "by_rank": -1, "wall_ns": 0}))
    for r, at in copied.items():
        head = next(box.glob(f"rank-{r:05d}-*.jsonl"))
        head.write_bytes(head.read_bytes() + orjson.dumps({"k": "copied", "t": at}) + b"\n")
    return analyze(load_trace(str(box), cache=False))


@pytest.mark.parametrize("stuck_ms, named", [(2, False), (5000, True)])
def test_a_live_snapshot_ends_at_the_earliest_copy(tmp_path, stuck_ms, named):
    """Asked of a running job (a request), the window ends at the earliest rank's copy. Rank 0's ring was copied
    2 ms into its last all_reduce, rank 1's after it had done that one and two more: what the job was doing, not
    a death (as the same rings taken at a hang would say). Or rank 0 had waited in it 5 s when rank 1's ring, copied
    later, shows it elsewhere: a hang, named in any snapshot."""
    tr = Trace(2)
    for k in range(60):
        t = k * 10 * MS
        tr.coll("all_reduce", {0: t + 2 * MS, 1: t + 2 * MS}, t + 3 * MS, nbytes=1024)
    t = 600 * MS
    if named:
        tr.coll("all_reduce", {0: t}, None, nbytes=1024)
        tr.coll("broadcast", {1: t + stuck_ms * MS}, t + stuck_ms * MS + MS, nbytes=64, group=[1])
    else:
        tr.coll("all_reduce", {0: t, 1: t}, {0: None, 1: t + 3 * MS}, nbytes=1024)
        for j in (1, 2):
            tr.coll("all_reduce", {1: t + j * 10 * MS}, t + j * 10 * MS + MS, nbytes=1024)
    copied = {0: t + (stuck_ms + 2) * MS, 1: t + (stuck_ms + 2) * MS} if named else {0: t + 2 * MS, 1: t + 25 * MS}
    live = _live(tr, tmp_path, "request", copied)
    if named:
        (p,) = live.problems
        assert (p.kind, p.op, p.ranks) == ("hang", "all_reduce", [1]), p
    else:
        assert live.problems == []
        assert [p.kind for p in _live(tr, tmp_path, "hang", copied).problems] == ["died"]
