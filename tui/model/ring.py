"""Ring algorithms step by step, for the ring view.

For a collective of K bytes (each rank's input) over N ranks in a ring r -> r+1:
- all_reduce = reduce-scatter then all-gather: 2(N-1) steps, chunks of K/N, each rank sends 2(N-1)K/N in total;
- reduce_scatter: N-1 steps of K/N (rank r ends owning the reduced chunk r): (N-1)K/N per rank;
- all_gather: N-1 steps, each rank's K-byte input is one chunk: (N-1)K per rank.
`state(k)[r][c]` is a bitmask of the ranks whose data is already summed into rank r's copy of chunk c after step k
(computed on demand: a 64-rank all_reduce has 126 steps of 64x64 chunk copies). For a ring written by hand with
send/recv, `p2p_steps` builds the same picture from the recorded messages.
"""

from __future__ import annotations

from dataclasses import dataclass

RING_OPS = ("all_reduce", "all_gather", "reduce_scatter")


@dataclass
class Transfer:
    src: int  # position in the ring (0..N-1)
    dst: int
    chunk: int | None
    bytes: int
    reduce: bool  # the receiver adds it to its copy (reduce-scatter) rather than overwriting (all-gather)
    send_row: int | None = None  # a recorded message: the send's event row (its values, when recorded)


@dataclass
class RingStep:
    index: int  # 0-based
    phase: str  # "reduce-scatter", "all-gather" or "p2p"
    transfers: list[Transfer]

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.transfers)


class RingPlan:
    """The textbook ring schedule of op for n ranks and K=total_bytes per rank."""

    def __init__(self, op: str, total_bytes: int, n: int):
        if op not in RING_OPS:
            raise ValueError(f"{op} is not a ring collective")
        if n < 1:
            raise ValueError("a ring needs at least one rank")
        self.op, self.n, self.total_bytes = op, n, total_bytes
        self.chunk_bytes = total_bytes if op == "all_gather" else total_bytes // n
        self.n_steps = (2 if op == "all_reduce" else 1) * (n - 1)

    def step(self, k: int) -> RingStep:
        n = self.n
        if not 0 <= k < self.n_steps:
            raise IndexError(k)
        if self.op == "all_reduce":
            if k < n - 1:
                phase, reduce, chunk_of = "reduce-scatter", True, (lambda r: (r - k) % n)
            else:
                s = k - (n - 1)
                phase, reduce, chunk_of = "all-gather", False, (lambda r: (r + 1 - s) % n)
        elif self.op == "reduce_scatter":
            phase, reduce, chunk_of = "reduce-scatter", True, (lambda r: (r - k - 1) % n)
        else:
            phase, reduce, chunk_of = "all-gather", False, (lambda r: (r - k) % n)
        return RingStep(k, phase, [Transfer(r, (r + 1) % n, chunk_of(r), self.chunk_bytes, reduce) for r in range(n)])

    def initial(self) -> list[list[int]]:
        n = self.n
        if self.op == "all_gather":
            return [[(1 << r) if c == r else 0 for c in range(n)] for r in range(n)]
        return [[1 << r] * n for r in range(n)]

    def state(self, k: int) -> list[list[int]]:
        """Bitmasks of contributions after step k (k = -1: before the first step)."""
        state = self.initial()
        for s in range(k + 1):
            new = [row[:] for row in state]
            for t in self.step(s).transfers:
                got = state[t.src][t.chunk]
                new[t.dst][t.chunk] = (new[t.dst][t.chunk] | got) if t.reduce else got
            state = new
        return state

    @property
    def per_rank_bytes(self) -> int:
        """Bytes each rank sends over the whole algorithm."""
        return self.n_steps * self.chunk_bytes


def ring_plan(op: str, total_bytes: int, n: int) -> RingPlan:
    return RingPlan(op, total_bytes, n)


def ranks_in(mask: int) -> list[int]:
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


def p2p_steps(matches, ranks: list[int]) -> list[RingStep]:
    """Steps of a hand-written ring from matched messages (analysis P2PMatch objects): step k holds the k-th
    message of every src->dst link, positions being indices into `ranks`."""
    return p2p_exchange(matches, ranks)[0]


def p2p_exchange(matches, ranks: list[int]) -> tuple[list[RingStep], dict[int, int]]:
    """p2p_steps' steps, and the step of each message order (P2PMatch.order) among `ranks`."""
    pos = {r: k for k, r in enumerate(ranks)}
    by_order: dict[int, list[Transfer]] = {}
    for m in matches:
        if m.src in pos and m.dst in pos:
            by_order.setdefault(m.order, []).append(Transfer(pos[m.src], pos[m.dst], None, m.bytes, False, m.send))
    orders = sorted(by_order)
    return ([RingStep(k, "p2p", sorted(by_order[o], key=lambda t: t.src)) for k, o in enumerate(orders)],
            {o: k for k, o in enumerate(orders)})
