"""Synthetic traces with exact, hand-set times, for the analysis' tests (pure logic, no torch)."""

from __future__ import annotations

from disttrace.tracer.analysis import analyze
from disttrace.tracer.data.table import EventTable

MS = 1_000_000


class Trace:
    """Builds a normalized trace: coll()/send()/recv() append events with explicit times (ns)."""

    def __init__(self, world: int):
        self.world = list(range(world))
        self.events: list[dict] = []
        self.ids = dict.fromkeys(self.world, 0)
        self.seqs: dict[tuple, int] = {}

    def _ev(self, rank, op, start, end, **kw):
        self.ids[rank] += 1
        ev = {"rank": rank, "op": op, "start_ns": start, "end_ns": end, "id": self.ids[rank], "bytes": 0,
              "dtype": "float32", "group": "world", "group_ranks": self.world, **kw}
        self.events.append(ev)
        return ev

    def coll(self, op, starts: dict, ends, nbytes=0, group=None, root=None, seq=None, **kw):
        ranks = group or self.world
        gname = "world" if group is None else "g" + "_".join(map(str, ranks))
        key = (gname,)
        s = self.seqs.get(key, 0) if seq is None else seq
        self.seqs[key] = s + 1
        ends = ends if isinstance(ends, dict) else dict.fromkeys(starts, ends)
        for r, t0 in starts.items():
            b = nbytes[r] if isinstance(nbytes, dict) else nbytes
            extra = {k: (v[r] if isinstance(v, dict) and r in v else v) for k, v in kw.items()}
            self._ev(r, op, t0, ends.get(r), bytes=b, group=gname, group_ranks=list(ranks), group_seq=s,
                     root=root, shape=[b // 4], **extra)

    def send(self, src, dst, start, end, nbytes, **kw):
        return self._ev(src, "send", start, end, peer=dst, bytes=nbytes, **kw)

    def recv(self, dst, src, start, end, nbytes, **kw):
        return self._ev(dst, "recv", start, end, peer=src, bytes=nbytes, **kw)

    def table(self) -> EventTable:
        t = EventTable()
        for ev in sorted(self.events, key=lambda e: (e["start_ns"], e["rank"])):
            t.append(ev)
        return t

    def analyze(self):
        return analyze(self.table())


def pipeline_3d(dp: int, pp: int, tp: int, micro: int, iterations: int, forward_ms: float, slow: dict | None = None,
                slow_stage: dict | None = None) -> Trace:
    """A data x pipeline x tensor parallel job with exact times, as Megatron lays it out: rank = (d * pp + s) * tp
    + t for replica d, stage s, tensor position t. Each iteration runs GPipe: every micro-batch's forward through
    the stages (recv the activation from the same tensor position of the stage before, compute, all-reduce over
    the stage's tensor-parallel group, send on), then the backwards (twice the forward's compute) back, then each
    (stage, tensor position)'s gradients all-reduced over the replicas. A recv ends when its send has come, a send
    when its recv is posted, a collective 0.5 ms after its last arrival. slow: rank -> its compute's factor (one
    slow worker); slow_stage: stage -> factor (every rank of it)."""
    slow, slow_stage = slow or {}, slow_stage or {}
    world = dp * pp * tp
    tr = Trace(world)
    clock = [0] * world

    def rank(d, s, t):
        return (d * pp + s) * tp + t

    def compute(r, s, ms):
        clock[r] += int(ms * slow.get(r, 1.0) * slow_stage.get(s, 1.0) * MS)

    def exchange(src, dst, nbytes, site):
        posted, sent = clock[dst], clock[src]
        end = max(posted, sent) + MS // 10
        tr.send(src, dst, sent, end, nbytes, site=site)
        tr.recv(dst, src, posted, end, nbytes, site=site)
        clock[src] = clock[dst] = end

    def all_reduce(ranks, nbytes, site):
        end = max(clock[r] for r in ranks) + MS // 2
        tr.coll("all_reduce", {r: clock[r] for r in ranks}, end, nbytes=nbytes, group=list(ranks), site=site)
        for r in ranks:
            clock[r] = end

    for _ in range(iterations):
        for d in range(dp):
            for phase, stages, step in (("forward", range(pp), 1), ("backward", range(pp - 1, -1, -1), -1)):
                for _m in range(micro):
                    for s in stages:
                        for t in range(tp):
                            compute(rank(d, s, t), s, forward_ms * (1 if phase == "forward" else 2))
                        all_reduce([rank(d, s, t) for t in range(tp)], 1 << 16, f"model.py:{10 if step > 0 else 20}")
                        if 0 <= s + step < pp:
                            for t in range(tp):
                                exchange(rank(d, s, t), rank(d, s + step, t), 1 << 14, f"schedule.py:{30 + step}")
        for s in range(pp):
            for t in range(tp):
                all_reduce([rank(d, s, t) for d in range(dp)], 1 << 20, "train.py:50")
        for r in range(world):
            compute(r, 0, forward_ms)  # the optimizer
    return tr


def back_to_back(steps: int, compute_ms: dict, overlapping=None, world: int = 4, jitter_ms: float = 10.0,
                 seed: int = 0) -> Trace:
    """Pure data parallelism, two synchronous all-reduces a step, one right after the other: each rank computes
    compute_ms[r] ms (1000 where not given; plus up to jitter_ms, seeded), then all-reduce A (ending 0.5 ms after
    its last arrival: the others wait in it for the slowest), then all-reduce B, started 50 µs after A's end; on the
    ranks that overlapping(step, rng) names, B's recorded start comes 20 µs *before* A's recorded end (each is its
    own clock read: a reduce-scatter's end and the next all-reduce's start, in a 16-rank job)."""
    import random

    rng = random.Random(seed)
    tr = Trace(world)
    clock = [0] * world
    for k in range(steps):
        arrive = {r: clock[r] + int((compute_ms.get(r, 1000) + rng.uniform(0, jitter_ms)) * MS) for r in range(world)}
        end_a = max(arrive.values()) + MS // 2
        tr.coll("all_reduce", arrive, end_a, nbytes=1 << 20, site="train.py:20 in main")
        early = overlapping(k, rng) if overlapping else set()
        b_start = {r: end_a + (-20_000 if r in early else 50_000) for r in range(world)}
        end_b = max(b_start.values()) + MS // 2
        tr.coll("all_reduce", b_start, end_b, nbytes=1 << 10, site="train.py:21 in main")
        clock = [end_b] * world
    return tr
