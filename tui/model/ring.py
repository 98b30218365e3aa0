"""Ring algorithms step by step, for the ring view.

For a collective of K bytes (each rank's input) over N ranks in a ring r -> r+1:
- all_reduce = reduce-scatter then all-gather: 2(N-1) steps, chunks of K/N, each rank sends 2(N-1)K/N in total;
- reduce_scatter: N-1 steps of K/N (rank r ends owning the reduced chunk r): (N-1)K/N per rank;
- all_gather: N-1 steps, each rank's K-byte input is one chunk: (N-1)K per rank.
`contrib[r][c]` is the set of ranks whose data is already summed into rank r's copy of chunk c.
For a ring written by hand with send/recv, `p2p_steps` builds the same picture from the recorded messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RING_OPS = ("all_reduce", "all_gather", "reduce_scatter")


@dataclass
class Transfer:
    src: int  # position in the ring (0..N-1)
    dst: int
    chunk: int | None
    bytes: int
    reduce: bool  # the receiver adds it to its copy (reduce-scatter) rather than overwriting (all-gather)


@dataclass
class RingStep:
    index: int  # 0-based
    phase: str  # "reduce-scatter", "all-gather" or "p2p"
    transfers: list[Transfer]
    contrib: list[list[frozenset]] = field(default_factory=list)  # state after this step


@dataclass
class RingPlan:
    op: str
    n: int
    total_bytes: int  # K: each rank's input
    chunk_bytes: int
    steps: list[RingStep]
    initial: list[list[frozenset]]

    @property
    def per_rank_bytes(self) -> int:
        """Bytes each rank sends over the whole algorithm."""
        return sum(t.bytes for s in self.steps for t in s.transfers if t.src == 0)


def ring_plan(op: str, total_bytes: int, n: int) -> RingPlan:
    """The textbook ring schedule of op for n ranks and K=total_bytes per rank."""
    if op not in RING_OPS:
        raise ValueError(f"{op} is not a ring collective")
    if n < 1:
        raise ValueError("a ring needs at least one rank")
    if op == "all_gather":
        chunk = total_bytes
        state = [[frozenset({r}) if c == r else frozenset() for c in range(n)] for r in range(n)]
    else:
        chunk = total_bytes // n
        state = [[frozenset({r}) for _ in range(n)] for r in range(n)]
    initial = [row[:] for row in state]
    steps: list[RingStep] = []

    def run(phase: str, count: int, chunk_of, reduce: bool):
        nonlocal state
        for s in range(count):
            transfers = [Transfer(r, (r + 1) % n, chunk_of(r, s), chunk, reduce) for r in range(n)]
            new = [row[:] for row in state]
            for t in transfers:
                got = state[t.src][t.chunk]
                new[t.dst][t.chunk] = (new[t.dst][t.chunk] | got) if reduce else got
            state = new
            steps.append(RingStep(len(steps), phase, transfers, [row[:] for row in state]))

    if op == "all_reduce":
        run("reduce-scatter", n - 1, lambda r, s: (r - s) % n, True)
        run("all-gather", n - 1, lambda r, s: (r + 1 - s) % n, False)
    elif op == "reduce_scatter":
        run("reduce-scatter", n - 1, lambda r, s: (r - s - 1) % n, True)
    else:
        run("all-gather", n - 1, lambda r, s: (r - s) % n, False)
    return RingPlan(op, n, total_bytes, chunk, steps, initial)


def p2p_steps(matches, ranks: list[int]) -> list[RingStep]:
    """Steps of a hand-written ring from matched messages (analysis P2PMatch objects): step k holds the k-th
    message of every src->dst link, positions being indices into `ranks`."""
    pos = {r: k for k, r in enumerate(ranks)}
    by_order: dict[int, list[Transfer]] = {}
    for m in matches:
        if m.src in pos and m.dst in pos:
            by_order.setdefault(m.order, []).append(Transfer(pos[m.src], pos[m.dst], None, m.bytes, False))
    return [RingStep(k, "p2p", sorted(by_order[o], key=lambda t: t.src)) for k, o in enumerate(sorted(by_order))]
