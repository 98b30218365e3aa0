"""Two runs' ops set side by side (diff/compare.py uses it): which op of B is which op of A, and what differs in
their structure.

Row numbers and group ids are dense per trace, so nothing is matched by them: an op's *identity* across runs is made
of strings and rank numbers, its op name, its call site ("file.py:line"), its group's ranks and the other end's rank
(send/recv), and it is *aligned* with the op of the other run that has the same rank, step, identity and occurrence
(the n-th op of that identity in the rank's step). What is left is aligned again where it can be: by op and site
alone (the same call in another group: the group changed), then by op, group and peer alone (the same op issued
from another line: it moved). What is still left was added (B) or removed (A).

The structure's differences, each said once for every step and every rank it holds in (`Change`): ops added or
removed a step (with their sites and bytes), sizes and dtypes that changed, groups that changed, ops that moved to
another line, and the first divergence of each rank's op order (the sequence of op and site in a step).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from ...data.table.columns import dense_ids
from ...data.table import NONE
from ..waits.peers import occurrences
from ...units import fmt_bytes, fmt_list, fmt_ordinal

KINDS = ("added", "removed", "size", "dtype", "order", "group")  # a Change's kind (the diff's JSON contract)


@dataclass
class Change:
    """One difference in structure: `kind` one of KINDS; `rank` None where every rank has it alike; `site` the
    call site ("file.py:line"; of B for an op B has, else A's); `detail` the sentence."""

    kind: str
    rank: int | None
    op: str
    site: str
    detail: str
    steps: int = 0  # the matched steps it holds in


class Identities:
    """Op identities shared by both runs: (op, site, group's ranks, peer) -> a small int."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}
        self.keys: list[tuple] = []

    def of(self, key: tuple) -> int:
        got = self.ids.get(key)
        if got is None:
            got = self.ids[key] = len(self.keys)
            self.keys.append(key)
        return got


@dataclass
class Ops:
    """One run's ops in the matched steps: their rows (in table order) and, per row, its rank, step, identity
    (Identities') and occurrence; and per row of the whole table, its identity (-1: none)."""

    rows: np.ndarray
    rank: np.ndarray
    step: np.ndarray
    ident: np.ndarray
    occ: np.ndarray
    ident_of_row: np.ndarray
    bytes: np.ndarray = field(repr=False, default=None)


def ops_of(t, step_of, ks: list[int], site_of, names: Identities) -> Ops:
    """The ops of table t in steps ks (step_of: each row's step, a numpy column), keyed across runs through `names`;
    site_of turns a site's text into "file.py:line"."""
    n = len(t)
    step = np.asarray(step_of, np.int64) if len(step_of) == n else np.full(n, -1, np.int64)
    op, site = np.asarray(t.op.codes, np.int64), np.asarray(t.site.codes, np.int64)
    gid, peer = np.frombuffer(t.gid, np.int32).astype(np.int64), np.frombuffer(t.peer, np.int32).astype(np.int64)
    local = dense_ids(op, site, gid, peer) if n else np.zeros(0, np.int64)
    ident_of_row = np.full(n, -1, np.int64)
    if n:
        uniq, first = np.unique(local, return_index=True)
        glob = np.empty(len(uniq), np.int64)
        for j, r in enumerate(first.tolist()):
            p = int(peer[r])
            glob[j] = names.of((t.op.values[op[r]], site_of(t.site.values[site[r]] or ""),
                                tuple(t.groups[gid[r]].ranks), None if p == NONE or p < 0 else p))
        ident_of_row = glob[np.searchsorted(uniq, local)]
    rows = np.flatnonzero(np.isin(step, np.array(ks, np.int64))) if ks else np.zeros(0, np.int64)
    rank = np.frombuffer(t.rank, np.int32).astype(np.int64)[rows]
    ident = ident_of_row[rows]
    occ = occurrences(rank, step[rows], ident) if len(rows) else np.zeros(0, np.int64)
    return Ops(rows, rank, step[rows], ident, occ, ident_of_row, np.asarray(t.bytes, np.int64)[rows])


def join_keys(a_keys: list[np.ndarray], b_keys: list[np.ndarray]) -> np.ndarray:
    """Per B key (rows of the columns b_keys), the index of the A key equal to it (-1: none); keys unique per side."""
    na = len(a_keys[0])
    if not na or not len(b_keys[0]):
        return np.full(len(b_keys[0]), -1, np.int64)
    ids = dense_ids(*(np.concatenate((x, y)) for x, y in zip(a_keys, b_keys)))
    a_of = np.full(int(ids.max()) + 1, -1, np.int64)
    a_of[ids[:na]] = np.arange(na)
    return a_of[ids[na:]]


@dataclass
class Alignment:
    """Which op of B is which of A: per index of B's Ops, the index into A's Ops (-1: added), and how it was
    aligned (0: same identity, 1: same op and site in another group, 2: same op and group from another line)."""

    b_to_a: np.ndarray
    how: np.ndarray
    a_aligned: np.ndarray  # per index of A's Ops: aligned with an op of B


def align(a: Ops, b: Ops, names: Identities) -> Alignment:
    b_to_a = join_keys([a.rank, a.step, a.ident, a.occ], [b.rank, b.step, b.ident, b.occ])
    how = np.where(b_to_a >= 0, 0, -1)
    keys = names.keys
    for k, part in ((1, lambda key: (key[0], key[1])), (2, lambda key: (key[0], key[2], key[3]))):
        left_b = np.flatnonzero(b_to_a < 0)
        taken = np.zeros(len(a.rows), bool)
        taken[b_to_a[b_to_a >= 0]] = True
        left_a = np.flatnonzero(~taken)
        if not len(left_b) or not len(left_a):
            break
        loose = Identities()
        ia = np.array([loose.of(part(keys[i])) for i in a.ident[left_a].tolist()], np.int64)
        ib = np.array([loose.of(part(keys[i])) for i in b.ident[left_b].tolist()], np.int64)
        oa = occurrences(a.rank[left_a], a.step[left_a], ia)
        ob = occurrences(b.rank[left_b], b.step[left_b], ib)
        j = join_keys([a.rank[left_a], a.step[left_a], ia, oa], [b.rank[left_b], b.step[left_b], ib, ob])
        hit = j >= 0
        b_to_a[left_b[hit]] = left_a[j[hit]]
        how[left_b[hit]] = k
    a_aligned = np.zeros(len(a.rows), bool)
    a_aligned[b_to_a[b_to_a >= 0]] = True
    return Alignment(b_to_a, how, a_aligned)


def _plural(op: str, n: int) -> str:
    return op if n == 1 else f"{op}s"


def _ranks_text(ranks) -> str:
    rs = sorted(ranks)
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {fmt_list(rs)}"


def structure(ta, tb, a: Ops, b: Ops, al: Alignment, names: Identities, ks: list[int]) -> list[Change]:
    """The differences in structure between A's and B's matched steps ks, each said once (merged over the ranks
    where it is the same on every rank of B's and A's)."""
    keys = names.keys
    found: list[tuple] = []  # (kind, rank, op, site, what it says without the rank, steps it holds in)
    n_steps = max(1, len(ks))

    def per_step(kind: str, side: Ops, idx: np.ndarray, sign: str) -> None:
        by: dict[tuple, list[int]] = defaultdict(list)
        for i in idx.tolist():
            op, site, _, _ = keys[side.ident[i]]
            by[(int(side.rank[i]), op, site)].append(i)
        for (rank, op, site), idxs in by.items():
            steps = Counter(side.step[idxs].tolist())
            counts = Counter(steps.values())
            n = counts.most_common(1)[0][0] if len(counts) == 1 else len(idxs) / len(steps)
            nbytes = int(side.bytes[idxs].sum()) / len(steps)
            more = "more" if kind == "added" else "fewer"
            count = f"{n:g}" if isinstance(n, int) else f"{n:.1f}"
            text = (f"B's step has {count} {more} {_plural(op, 2 if count != '1' else 1)} at {site} "
                    f"({sign}{fmt_bytes(nbytes)} a step)")
            if len(steps) < n_steps:
                text += f", in {len(steps)} of the {n_steps} steps compared"
            found.append((kind, rank, op, site, text, len(steps)))

    # added (B's ops aligned with none of A's) and removed (A's with none of B's)
    per_step("added", b, np.flatnonzero(al.b_to_a < 0), "+")
    per_step("removed", a, np.flatnonzero(~al.a_aligned), "−")
    # the aligned pairs: size, dtype, group, moved
    pairs: dict[tuple, set[int]] = defaultdict(set)
    dtype_a, dtype_b = ta.dtype, tb.dtype
    for i in np.flatnonzero(al.b_to_a >= 0).tolist():
        j = int(al.b_to_a[i])
        ra, rb = int(a.rows[j]), int(b.rows[i])
        op, site_b, group_b, peer_b = keys[b.ident[i]]
        _, site_a, group_a, peer_a = keys[a.ident[j]]
        rank, k = int(b.rank[i]), int(b.step[i])
        if a.bytes[j] != b.bytes[i]:
            pairs[("size", rank, op, site_b, int(a.bytes[j]), int(b.bytes[i]))].add(k)
        if (dtype_a[ra] or "") != (dtype_b[rb] or "") and dtype_a[ra] and dtype_b[rb]:
            pairs[("dtype", rank, op, site_b, dtype_a[ra], dtype_b[rb])].add(k)
        if al.how[i] == 1:
            pairs[("group", rank, op, site_b, (group_a, peer_a), (group_b, peer_b))].add(k)
        elif al.how[i] == 2:
            pairs[("order", rank, op, site_b, site_a, group_b)].add(k)
    # a group change said as the layout: every group the op ran in, in A and in B (the same words on every rank)
    layouts: dict[tuple, tuple[set, set]] = defaultdict(lambda: (set(), set()))
    for (kind, _, op, site, x, y) in pairs:
        if kind == "group":
            layouts[(op, site)][0].add(x)
            layouts[(op, site)][1].add(y)
    for (kind, rank, op, site, x, y), steps in pairs.items():
        if kind == "group":
            x, y = layouts[(op, site)]
            text = f"{op} at {site}: {_groups_text(x)} in A, {_groups_text(y)} in B"
        elif kind == "size":
            text = f"{op} at {site}: {fmt_bytes(x)} in A, {fmt_bytes(y)} in B ({'+' if y > x else '−'}" \
                   f"{fmt_bytes(abs(y - x))} a call)"
        elif kind == "dtype":
            text = f"{op} at {site}: {x} in A, {y} in B"
        else:
            text = f"{op} in group {list(y)} moved: at {x} in A, at {site} in B"
        if len(steps) < n_steps:
            text += f", in {len(steps)} of the {n_steps} steps compared"
        found.append((kind, rank, op, site, text, len(steps)))
    found.extend(_first_divergences(a, b, keys, ks))
    return _merged(found, set(ta.world_ranks()) | set(tb.world_ranks()))


def _groups_text(groups: set[tuple]) -> str:
    """(group's ranks, peer) pairs as "in groups [0, 1] [2, 3]" or "with ranks 1, 3"."""
    peers = sorted({p for _, p in groups if p is not None})
    if peers:
        return f"with {_ranks_text(peers)}"
    gs = sorted({g for g, _ in groups})
    return f"in group{'s' if len(gs) > 1 else ''} " + " ".join(str(list(g)) for g in gs)


def _first_divergences(a: Ops, b: Ops, keys: list[tuple], ks: list[int]) -> list[tuple]:
    """Per rank, the first place its op order (op and site, step by step) differs between the runs."""
    out = []

    def sequences(side: Ops) -> dict[tuple[int, int], list[tuple[str, str]]]:
        seq: dict[tuple[int, int], list] = defaultdict(list)
        for r, k, i in zip(side.rank.tolist(), side.step.tolist(), side.ident.tolist()):
            seq[(r, k)].append(keys[i][:2])
        return seq

    sa, sb = sequences(a), sequences(b)
    for rank in sorted({r for r, _ in sa} | {r for r, _ in sb}):
        for k in ks:
            x, y = sa.get((rank, k), []), sb.get((rank, k), [])
            if x == y:
                continue
            n = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            first = lambda s: f"{s[n][0]} at {s[n][1]}" if n < len(s) else "the step's end"  # noqa: E731
            op, site = (y[n] if n < len(y) else x[n])
            text = (f"op order first differs in step {k}, at the step's {fmt_ordinal(n + 1)} op: "
                    f"{first(x)} in A, {first(y)} in B")
            out.append(("order", rank, op, site, text, 1))
            break
    return out


def _merged(found: list[tuple], ranks: set[int]) -> list[Change]:
    """One Change per difference: where every rank has the same, one with rank None."""
    by: dict[tuple, list[tuple]] = defaultdict(list)
    for kind, rank, op, site, text, steps in found:
        by[(kind, op, site, text)].append((rank, steps))
    out = []
    for (kind, op, site, text), holders in by.items():
        have = {r for r, _ in holders}
        steps = max(s for _, s in holders)
        if have >= ranks and len(ranks) > 1:
            out.append(Change(kind, None, op, site, f"{text}, on every rank", steps))
        else:
            for r in sorted(have):
                out.append(Change(kind, r, op, site, f"{text}, on rank {r}", steps))
    order = {k: i for i, k in enumerate(KINDS)}
    out.sort(key=lambda c: (order[c.kind], c.site, c.op, -1 if c.rank is None else c.rank))
    return out


__all__ = ["KINDS", "Change", "Identities", "Ops", "Alignment", "ops_of", "align", "structure", "join_keys"]
