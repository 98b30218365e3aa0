"""Synthetic traces with exact, hand-set times, for the analysis' tests (pure logic, no torch)."""

from __future__ import annotations

from disttrace.tracer.analysis import analyze
from disttrace.tracer.data.events import EventTable

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
