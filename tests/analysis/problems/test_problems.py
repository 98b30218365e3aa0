"""Problems are complete and never invented: errors, deaths, non-finite values, hangs with where each rank was,
and damage that never turns into a finding. Synthetic traces with known answers (no torch), plus the reader's
part: stacks records, what a file lost, a rank that left the job."""

from __future__ import annotations

import orjson

from disttrace.tracer.analysis import analyze, to_json
from disttrace.tracer.analysis.problems.checks import short_error
from disttrace.tracer.data.table import stacks_site
from disttrace.tracer.data.load import load_trace
from synthetic import MS, Trace

GLOO_RESET = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
              "[127.0.0.1]:47245: Connection reset by peer. This is typically caused by a remote worker hanging or "
              "bugs in the application. Check the logs of the remote worker before reporting an error.\nmore")


def kinds(a) -> list[tuple[str, list[int]]]:
    return [(p.kind, p.ranks) for p in a.problems]


def steps(tr: Trace, n: int, t0: int = 0, ranks=(0, 1)) -> int:
    """n complete all_reduces of the world on `ranks`, 10 ms apart; returns the time after them."""
    for k in range(n):
        tr.coll("all_reduce", dict.fromkeys(ranks, t0 + 10 * k * MS), t0 + (10 * k + 1) * MS, nbytes=64,
                site="train.py:20 in main")
    return t0 + 10 * n * MS


def frames(*where: tuple[str, int, str]) -> dict:
    return {"threads": [{"id": 1, "name": "MainThread", "frames": [list(f) for f in where]}]}


# -- error -----------------------------------------------------------------------------------------------
def test_an_error_is_one_problem_per_rank_with_the_op_site_and_a_short_text():
    tr = Trace(2)
    t = steps(tr, 2)
    for k in range(2):  # rank 0's next two ops raise; rank 1's finish
        tr.coll("all_reduce", {0: t + k * MS, 1: t + k * MS}, t + (k + 1) * MS, nbytes=64, site="train.py:20 in main",
                status={0: "error", 1: "ok"}, error={0: GLOO_RESET})
    a = tr.analyze()
    (p,) = a.problems
    assert (p.kind, p.ranks, p.op, p.group_seq) == ("error", [0], "all_reduce", 2)
    assert p.message == ("rank 0's all_reduce #2 of group world at train.py:20 in main ended in an error: "
                         "RuntimeError: Read error [127.0.0.1]:47245: Connection reset by peer. 1 later op(s) on "
                         "rank 0 failed too.")
    assert p.events == [a.collectives[2].events[0]]


def test_short_error_drops_source_locations_and_keeps_short_texts_whole():
    assert short_error("ValueError: bad\nTraceback ...") == "ValueError: bad"
    long = "x" * 300
    assert short_error(long) == "x" * 159 + "…"


# -- died --------------------------------------------------------------------------------------------------
def test_a_killed_rank_died_and_its_peer_s_error_is_a_problem_but_no_hang():
    # rank 1 was killed after all_reduce #2; rank 0 entered #3 and gloo raised (the peer's sockets closed)
    tr = Trace(2)
    t = steps(tr, 3)
    tr.coll("all_reduce", {0: t}, {0: t + MS}, nbytes=64, site="train.py:20 in main", status="error",
            error=GLOO_RESET)
    a = tr.analyze()
    assert kinds(a) == [("died", [1]), ("error", [0])]
    died = a.problems[0]
    assert died.message == ("rank 1's trace ends here, after all_reduce #2 of group world at train.py:20 in "
                                   "main: the rank died or its file was cut. 1 later collective(s) of its groups "
                                   "went on without it (not reported as hangs).")
    assert died.events == [a.collectives[2].events[1]]


def test_a_mismatch_then_an_abort_gives_the_mismatch_the_error_and_the_death():
    # rank 0 aborts inside the mismatched all_reduce (SIGABRT: it never finishes it); rank 1 raises
    tr = Trace(2)
    t = steps(tr, 1)
    tr.coll("all_reduce", {0: t, 1: t + 10}, {0: None, 1: t + MS}, nbytes={0: 4096, 1: 8192},
            status={0: "unfinished", 1: "error"}, error={1: GLOO_RESET}, site="train.py:20 in main")
    a = tr.analyze()
    assert kinds(a) == [("mismatch", [0, 1]), ("died", [0]), ("error", [1])]
    died = a.problems[1].message
    assert "inside all_reduce #1 of group world at train.py:20 in main, which it never finished" in died


def test_a_file_cut_short_is_one_died_problem_not_a_hang_per_collective():
    # rank 1's file stops inside all_reduce #2 (its end record was past the cut); rank 0 went on for 6 more, and
    # sent 2 messages that rank 1's recv records would have matched
    tr = Trace(2)
    t = steps(tr, 2)
    tr.coll("all_reduce", {0: t, 1: t}, {0: t + MS, 1: None}, nbytes=64, status={0: "ok", 1: "unfinished"})
    steps(tr, 6, t + 10 * MS, ranks=(0,))
    tr.send(0, 1, t + 100 * MS, t + 101 * MS, 8)
    tr.send(0, 1, t + 110 * MS, t + 111 * MS, 8)
    table = tr.table()
    table.ranks[1].damage = "torn last record"
    a = analyze(table)
    (p,) = a.problems
    assert (p.kind, p.ranks, p.group_seq) == ("died", [1], 2)
    assert ("rank 1's trace ends here (its file ends with a torn record), inside all_reduce #2 of group world, which "
            "it never finished: the rank died or its file was cut. 6 later collective(s) of its groups went on without "
            "it and 2 P2P message(s) with it have no side on rank 1 (not reported as hangs).") == p.message


def test_a_rank_that_left_the_job_did_not_die():
    # rank 1 called destroy_process_group (its end clock record) without the last all_reduce rank 0 made
    tr = Trace(2)
    t = steps(tr, 2)
    tr.coll("all_reduce", {0: t}, {0: t + MS}, nbytes=64, status="error", error="RuntimeError: Connection closed")
    table = tr.table()
    table.ranks[1].left = True
    a = analyze(table)
    assert kinds(a) == [("hang", [1]), ("error", [0])]
    assert "rank 1's last event is all_reduce #1 of group world" in a.problems[0].message
    assert "then it left the job" in a.problems[0].message


# -- damage ------------------------------------------------------------------------------------------------
def test_a_lost_begin_record_is_a_warning_not_a_hang():
    tr = Trace(2)
    steps(tr, 5)
    tr.events = [e for e in tr.events if not (e["rank"] == 1 and e["group_seq"] == 2)]
    a = tr.analyze()
    assert a.problems == [] and not a.collectives[2].complete
    assert a.table.warnings == ["rank 1: 1 collective(s) lack its begin record although it entered later ones of "
                                "the same group (first: all_reduce #2 of group world): the record was lost; not "
                                "reported as a hang"]
    analyze(a.table)
    assert len(a.table.warnings) == 1  # said once, however often the table is analysed


def test_a_lost_end_record_is_a_warning_not_a_hang():
    tr = Trace(2)
    steps(tr, 5)
    (e,) = [e for e in tr.events if e["rank"] == 0 and e["group_seq"] == 1]
    e["end_ns"], e["status"] = None, "unfinished"
    a = tr.analyze()
    assert a.problems == []
    assert "rank 0: 1 collective(s) lack its end record although it finished later ones" in a.table.warnings[0]


def test_what_a_damaged_rank_never_reached_is_withheld_not_claimed_as_a_hang():
    # rank 1's file lost records; it never entered the last all_reduce, which rank 0 is still in: perhaps a hang,
    # perhaps its lost record
    tr = Trace(2)
    t = steps(tr, 3)
    tr.coll("all_reduce", {0: t}, {0: None}, nbytes=64, status="unfinished")
    table = tr.table()
    table.ranks[1].damage = "1 malformed record(s) skipped"
    a = analyze(table)
    assert a.problems == []
    assert a.table.warnings == ["rank 1: 1 collective(s) it never entered or finished (first: all_reduce #3 of group "
                                "world) are not reported as hangs: its file is damaged (1 malformed record(s) "
                                "skipped)"]


def test_messages_of_a_damaged_rank_are_not_claimed_unmatched():
    tr = Trace(2)
    for k in range(3):
        tr.send(0, 1, k * MS, k * MS + 10, 8)
        if k != 1:  # rank 1's second recv record was lost: pairs shift, the last send looks unmatched
            tr.recv(1, 0, k * MS, k * MS + 10, 8)
    table = tr.table()
    assert [p.kind for p in analyze(table).problems] == ["unmatched"]  # undamaged: a real finding
    table = tr.table()
    table.ranks[1].damage = "1 malformed record(s) skipped"
    a = analyze(table)
    assert a.problems == [] and "rank 1: 1 P2P message(s) with it are unpaired" in a.table.warnings[0]


# -- hangs and where the ranks were ------------------------------------------------------------------------
def test_a_hang_carries_where_each_rank_was_from_its_stacks():
    tr = Trace(2)
    t = steps(tr, 2)
    tr.coll("all_reduce", {0: t}, {0: None}, nbytes=64, status="unfinished", site="train.py:20 in main")
    table = tr.table()
    torch_frame = ("/x/site-packages/torch/distributed/distributed_c10d.py", 3250, "all_reduce")
    table.stacks = {
        0: [dict(frames(("train.py", 20, "main"), torch_frame, ("/x/site-packages/torch/x.py", 1, "wait")),
                 t=t + 2000 * MS)],
        1: [dict(frames(("train.py", 9, "main"), ("data.py", 4, "load_next_batch"), ("/usr/lib/time.py", 1, "s")),
                 t=t - 50 * MS),  # before the hang: not where it is stuck
            dict(frames(("train.py", 12, "main"), ("data.py", 4, "load_next_batch")), t=t + 2100 * MS)],
    }
    a = analyze(table)
    (p,) = a.problems
    assert (p.kind, p.ranks) == ("hang", [1])
    assert p.where == {0: "train.py:20 in main → wait", 1: "data.py:4 in load_next_batch"}
    assert "and its stack shows it at data.py:4 in load_next_batch" in p.message
    assert p.message.endswith("Recorded stacks: rank 0 at train.py:20 in main → wait.")
    assert to_json(a)["problems"][0]["where"] == {"0": "train.py:20 in main → wait",
                                                  "1": "data.py:4 in load_next_batch"}


def test_a_rank_seen_alive_by_its_stacks_is_hung_not_dead():
    # rank 0's op raised (the job was being stopped) while rank 1, alive (its stacks), was elsewhere
    tr = Trace(2)
    t = steps(tr, 2)
    tr.coll("all_reduce", {0: t}, {0: t + 3000 * MS}, nbytes=64, status="error", error=GLOO_RESET)
    table = tr.table()
    table.stacks = {1: [dict(frames(("data.py", 4, "load_next_batch")), t=t + 2000 * MS)]}
    a = analyze(table)
    assert kinds(a) == [("hang", [1]), ("error", [0])]
    assert a.problems[0].where == {1: "data.py:4 in load_next_batch"}


def test_the_timeouts_of_the_ranks_that_waited_are_the_hang_s_not_a_death():
    # rank 2 skipped the all_reduce (alive, elsewhere); ranks 0 and 1 gave up after their timeout
    tr = Trace(3)
    t = steps(tr, 2, ranks=(0, 1, 2))
    timeout = "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 3000ms for recv operation"
    tr.coll("all_reduce", {0: t, 1: t}, t + 3000 * MS, nbytes=64, status="error", error=timeout)
    a = tr.analyze()
    (p,) = a.problems
    assert (p.kind, p.ranks) == ("hang", [2])
    assert p.message.endswith("Look at why rank 2 did not reach this call. Ranks 0, 1 gave up waiting: "
                              "RuntimeError: Timed out waiting 3000ms for recv operation.")


def test_stacks_site_is_the_main_thread_s_innermost_user_frame_and_survives_odd_records():
    rec = {"threads": [{"name": "watchdog", "frames": [["w.py", 1, "run"]]},
                       {"name": "MainThread", "frames": [["train.py", 30, "<module>"], ["train.py", 20, "main"],
                                                         ["/py/threading.py", 320, "wait"]]}]}
    assert stacks_site(rec) == "train.py:20 in main → wait"
    for odd in ({}, {"threads": 5}, {"threads": [None, {"name": "MainThread", "frames": [7, [None]]}]}, [], None):
        assert stacks_site(odd) == "(no Python stack)"


# -- non-finite values ---------------------------------------------------------------------------------------
def test_the_first_non_finite_input_is_named_and_its_spread_counted():
    tr = Trace(2)
    nan = {"nan": 3, "inf": 0, "checksum": 1}
    fine = {"nan": 0, "inf": 0, "checksum": 2}
    tr.coll("all_reduce", {0: 0, 1: 0}, MS, nbytes=64, **{"in": fine}, out=fine)
    # rank 0 arrives first at #1; rank 1's input holds the NaN; both outputs are NaN, and so is #2
    tr.coll("all_reduce", {0: 10 * MS, 1: 12 * MS}, 13 * MS, nbytes=64, site="train.py:30 in main",
            **{"in": {0: fine, 1: nan}}, out=nan)
    tr.coll("all_reduce", {0: 20 * MS, 1: 20 * MS}, 21 * MS, nbytes=64, **{"in": nan}, out=nan)
    a = tr.analyze()
    (p,) = a.problems
    assert (p.kind, p.ranks, p.group_seq) == ("nonfinite", [1], 1)
    assert p.message == ("rank 1's input to all_reduce #1 of group world at train.py:30 in main held non-finite "
                         "values first (3 NaN): they came from its own computation before this call. After it, 3 "
                         "op(s) carried non-finite values in their input or output, on ranks 0, 1.")


def test_a_peer_output_that_the_clocks_put_before_the_nan_input_is_not_the_first():
    """Rank 0's output of all_reduce #1 came from rank 1's NaN input, however the clocks' alignment error orders
    them (here it ends 1 ms before rank 1 arrived: a loaded CI machine's trace of the NaN job read "the output of
    all_reduce #6 on rank 0 ... from finite inputs: the op itself overflowed")."""
    tr = Trace(2)
    nan = {"nan": 3, "inf": 0, "checksum": 1}
    fine = {"nan": 0, "inf": 0, "checksum": 2}
    tr.coll("all_reduce", {0: 10 * MS, 1: 12 * MS}, {0: 11 * MS, 1: 13 * MS}, nbytes=64, site="train.py:30 in main",
            **{"in": {0: fine, 1: nan}}, out=nan)
    tr.coll("all_reduce", {0: 20 * MS, 1: 20 * MS}, 21 * MS, nbytes=64, **{"in": nan}, out=nan)
    (p,) = [p for p in tr.analyze().problems if p.kind == "nonfinite"]
    assert (p.ranks, p.group_seq) == ([1], 0)
    assert p.message.startswith("rank 1's input to all_reduce #0 of group world at train.py:30 in main held "
                                "non-finite values first (3 NaN)"), p.message


def test_an_overflow_in_the_op_itself_is_named_by_its_output():
    tr = Trace(2)
    big = {"nan": 0, "inf": 0, "checksum": 1}
    tr.coll("all_reduce", {0: 0, 1: 0}, MS, nbytes=64, **{"in": big}, out={"nan": 0, "inf": 2, "checksum": 3})
    (p,) = tr.analyze().problems
    assert p.kind == "nonfinite" and "held non-finite values first (2 Inf) from finite inputs" in p.message


# -- the reader's part ---------------------------------------------------------------------------------------
def _write_rank(path, rank: int, records: list[dict], tail: bytes = b"") -> None:
    head = [{"k": "meta", "v": 2, "rank": rank, "world_size": 2, "host": "h", "pid": 10 + rank},
            {"k": "clock", "phase": "start", "offset_ns": 1000 * rank, "uncertainty_ns": 5, "mono_ns": 0},
            {"k": "group", "g": 0, "name": "0", "desc": "default_pg", "ranks": [0, 1], "backend": "gloo"}]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in head + records) + tail)


def _ar(i: int, t: int, end: bool = True) -> list[dict]:
    b = {"k": "b", "i": i, "op": "all_reduce", "api": "all_reduce", "g": 0, "gs": i, "bytes": 16, "t": t,
         "site": "train.py:20 in main"}
    return [b, {"k": "e", "i": i, "t": t + 5000}] if end else [b]


def test_the_reader_keeps_stacks_aligned_and_says_what_each_file_lost(tmp_path):
    stacks = {"k": "stacks", "t": 15 * MS, "reason": "peer", "flag": 0,
              **frames(("train.py", 12, "main"), ("data.py", 4, "load_next_batch"))}
    _write_rank(tmp_path / "rank-00000-h-10.jsonl", 0, _ar(0, 10 * MS) + _ar(1, 20 * MS) + _ar(2, 30 * MS, end=False)
                + [{"k": "clock", "phase": "end", "offset_ns": 0, "uncertainty_ns": 5, "mono_ns": 40 * MS}])
    _write_rank(tmp_path / "rank-00001-h-11.jsonl", 1, _ar(0, 10 * MS) + [stacks] + _ar(1, 20 * MS)[:1],
                tail=b'{"k":"e","i":1,"t"' + b"\0" * 64)  # killed while writing its last end
    t = load_trace(str(tmp_path))
    assert t.stacks[1][0]["t"] == 15 * MS + 1000 and 0 not in t.stacks  # its clock's offset applied
    assert (t.ranks[0].left, t.ranks[1].left) == (True, False)
    assert (t.ranks[0].damage, t.ranks[1].damage) == ("", "torn last record")
    assert t.damage_summary() == "rank 1: torn last record"
    a = analyze(t)
    # rank 1 stops inside all_reduce #1, which rank 0 finished; rank 0 then waits alone in #2: one death, no hang
    assert kinds(a) == [("died", [1])]
    assert "(its file ends with a torn record), inside all_reduce #1" in a.problems[0].message


def test_a_desync_of_two_ranks_is_named_by_the_lowest_rank_s_op_whoever_arrives_first():
    """Rank 0 all-reduces where rank 1 broadcasts: the mismatch's op is rank 0's whichever rank came first (a tie of
    the majority rule; the first arrival made two runs of one desync name different ops)."""
    named = set()
    for first in (0, 1):
        tr = Trace(2)
        t = steps(tr, 1)
        starts = {first: t, 1 - first: t + 10}
        for r, op in ((0, "all_reduce"), (1, "broadcast")):
            tr._ev(r, op, starts[r], t + MS, bytes=64, group="world", group_ranks=[0, 1], group_seq=1,
                   site="train.py:20 in main")
        a = tr.analyze()
        (p,) = [q for q in a.problems if q.kind == "mismatch"]
        named.add(p.op)
    assert named == {"all_reduce"}
