"""A synthetic large trace: normalized events (.jsonl) of a 3-D parallel training job, for benchmarks.

`write_synthetic(path, n_events=1_000_000, n_ranks=64, seed=0)` simulates ranks as 8-rank tensor-parallel
groups, 4-stage pipelines and data-parallel replicas (64 ranks: TP 8 x PP 4 x DP 2), step by step: TP
all_reduces and all_gathers, async DP gradient all_reduces waited on later, pipeline send/recv pairs forward
and backward, a broadcast from rank 0, and a world barrier every few steps. Each rank has its own clock; one
rank is a steady straggler and arrival jitter makes the others wait, so waits, stragglers, links and the
pipeline all have something to find. Run as a script to write one: `python benchmarks/synth.py OUT [N [RANKS]]`.
"""

from __future__ import annotations

import bisect
import os
import random
import sys

import orjson

FLOAT = "float32"


def write_synthetic(path, n_events: int = 1_000_000, n_ranks: int = 64, seed: int = 0, late_ns: int = 400_000) -> int:
    """Write about n_events events (whole steps; never fewer than n_events) to path; return the count. The
    straggler (the last rank) arrives `late_ns` late at every op (0: the job is balanced). Nine ops in ten that
    carry a tensor have the summary of their input that `--summaries stats` records (issue 19's benchmark trace:
    "input summaries on most ops"); drawn apart, so that the times are those of the same seed without them."""
    rng = random.Random(seed)
    srng = random.Random(seed + 1)

    def summary(nbytes: int) -> dict | None:
        if srng.random() >= 0.9:
            return None
        lo, hi = -srng.random(), srng.random()
        numel = max(nbytes // 4, 1)
        return {"numel": numel, "min": lo, "max": hi, "mean": (lo + hi) / 2 * srng.random(),
                "norm": srng.random() * numel ** 0.5, "nan": 0, "inf": 0, "checksum": srng.getrandbits(48)}

    # rank = d * (pp * tp) + s * tp + j: tensor-parallel groups are consecutive ranks, pipelines run across
    # stages s, data-parallel groups across replicas d (Megatron's layout)
    tp = 8 if n_ranks % 8 == 0 and n_ranks >= 32 else 1
    pp = 4 if (n_ranks // tp) % 4 == 0 else (2 if (n_ranks // tp) % 2 == 0 else 1)
    dp = n_ranks // (tp * pp)
    world = list(range(n_ranks))
    tp_groups = [list(range(g * tp, (g + 1) * tp)) for g in range(dp * pp)]
    dp_groups = [[d * pp * tp + k for d in range(dp)] for k in range(pp * tp)]
    pipelines = [[d * pp * tp + s * tp + j for s in range(pp)] for d in range(dp) for j in range(tp)]
    straggler = n_ranks - 1
    clk = [1_000_000_000 + rng.randrange(1_000_000) for _ in world]
    seq = dict.fromkeys(world, 0)
    ident = dict.fromkeys(world, 0)
    gseq: dict[str, int] = {}
    events: list[tuple[int, int, dict]] = []

    def base(r: int, op: str, api: str, start: int, end: int, nbytes: int, site: str) -> dict:
        ident[r] += 1
        seq[r] += 1
        return {"v": 1, "rank": r, "host": f"node{r // 8}", "op": op, "api": api, "bytes": nbytes, "dtype": FLOAT,
                "shape": [nbytes // 4], "start_ns": start, "end_ns": end, "status": "ok", "seq": seq[r],
                "id": ident[r], "site": site}

    def arrival(r: int) -> int:
        late = late_ns if r == straggler else 0
        return clk[r] + rng.randrange(5_000, 60_000) + late

    def collective(op: str, gname: str, ranks: list[int], nbytes: int, site: str, root=None, async_op=False,
                   api=None):
        k = gseq.get(gname, 0)
        gseq[gname] = k + 1
        starts = {r: arrival(r) for r in ranks}
        latest = max(starts.values())
        n = len(ranks)
        vol = {"all_reduce": 2 * (n - 1) / n, "barrier": 0}.get(op, 1) * nbytes
        end = latest + 20_000 + int(vol * rng.uniform(0.09, 0.12))  # ~10 GB/s
        for r in ranks:
            e = end + rng.randrange(0, 3_000)
            ev = base(r, op, api or op, starts[r], e, nbytes if op != "barrier" else 0, site)
            ev.update(group=gname, group_ranks=ranks, group_seq=k)
            if op != "barrier" and (summ := summary(nbytes)):
                ev["in"] = summ
            if root is not None:
                ev["root"] = root
            if async_op:
                ws = starts[r] + rng.randrange(50_000, 2_000_000)
                ev.update(async_op=True, wait_start_ns=ws, wait_end_ns=max(ws, e) + 1_000)
                clk[r] = ev["wait_end_ns"]
            else:
                clk[r] = e
            events.append((starts[r], r, ev))

    def p2p(src: int, dst: int, nbytes: int, site: str):
        s, rcv = arrival(src), arrival(dst)
        end = max(s, rcv) + 15_000 + nbytes // 8
        es = base(src, "send", "send", s, end, nbytes, site)
        es["peer"] = dst
        if summ := summary(nbytes):
            es["in"] = summ
        er = base(dst, "recv", "recv", rcv, end + 2_000, nbytes, site)
        er["peer"] = src
        clk[src], clk[dst] = end, end + 2_000
        events.append((s, src, es))
        events.append((rcv, dst, er))

    # written in order of start, as `disttrace events` writes (the viewer shows a file's head while it reads
    # the rest only when it is: data/store/head.py), and step by step: at 10M events a list of every event's dict would
    # take ~10 GB. An event starts at or after its rank's clock when it is made, and the clocks only move on, so
    # once a step is made, the events that start before the earliest clock are final: written, the rest kept
    dumps = orjson.dumps
    written = 0
    step = 0
    pending: list = []
    f = open(path, "wb")
    while written + len(pending) < n_events:
        if step % 10 == 0:
            collective("barrier", "world", world, 0, "train.py:40 in train")
        if step % 50 == 0:
            collective("broadcast", "world", world, 4 << 20, "train.py:31 in load", root=0)
        act = (256 << 10) * (1 + step % 4)
        for s in range(pp - 1):  # forward through the pipelines
            for chain in pipelines:
                p2p(chain[s], chain[s + 1], act, "pipe.py:88 in forward_step")
        for g, ranks in enumerate(tp_groups):
            collective("all_reduce", f"tp{g}", ranks, 1 << 20, "layers.py:120 in RowParallelLinear.forward")
            collective("all_gather", f"tp{g}", ranks, 64 << 10, "layers.py:77 in ColumnParallelLinear.forward",
                       api="all_gather_into_tensor")
        for s in range(pp - 1, 0, -1):  # backward
            for chain in pipelines:
                p2p(chain[s], chain[s - 1], act, "pipe.py:102 in backward_step")
        if dp > 1:
            for i, ranks in enumerate(dp_groups):
                for b in range(2):
                    collective("all_reduce", f"dp{i}", ranks, (8 << 20) >> b, "ddp.py:300 in _sync_grads",
                               async_op=True, api="ddp.bucket_all_reduce")
        for r in world:
            clk[r] += rng.randrange(500_000, 800_000)  # compute
        step += 1
        pending += events
        events.clear()
        pending.sort(key=lambda e: (e[0], e[1]))
        final = bisect.bisect_left(pending, min(clk), key=lambda e: e[0])
        f.write(b"".join(dumps(ev) + b"\n" for _, _, ev in pending[:final]))
        written += final
        del pending[:final]
    f.write(b"".join(dumps(ev) + b"\n" for _, _, ev in pending))
    f.close()
    return written + len(pending)


def ensure_synthetic(path, n_events: int, n_ranks: int) -> None:
    """Write the synthetic trace to `path` unless it is already there."""
    import os
    import time

    if not os.path.exists(path):
        t = time.perf_counter()
        n = write_synthetic(path, n_events, n_ranks)
        print(f"wrote {n:,} events to {path} in {time.perf_counter() - t:.1f} s")


def time_parse(path, keep_limit: int = 2_000_000) -> tuple[float | None, int]:
    """Seconds to orjson.loads every line, keeping every parsed dict (as a reader that kept them would), and the
    number of lines. Past `keep_limit` lines nothing is parsed and the seconds are None: 10M parsed events would
    take ~40 GB. (The benchmarks' ratios are to the honest yardstick, `time_yardstick`.)"""
    import gc
    import time

    with open(path, "rb") as f:
        n = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b""))
    if n > keep_limit:
        return None, n
    gc.collect()
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        parsed = [orjson.loads(line) for line in f]
    seconds = time.perf_counter() - t0
    del parsed
    gc.collect()
    return seconds, n


def time_yardstick(path, cpu: bool = False):
    """The honest yardstick (issue 19): seconds to orjson.loads every line, keeping nothing, in a new process, as
    the jobs it is set beside run (not in the benchmark's own, which may hold a table, an analysis and their
    garbage by then). `path`: a file, or a list of them (a trace dir's rank files). With `cpu`, (wall seconds, CPU
    seconds of that process)."""
    import subprocess
    import sys

    paths = [os.fspath(path)] if isinstance(path, (str, bytes)) or hasattr(path, "__fspath__") else list(path)
    out = subprocess.run([sys.executable, __file__, "--yardstick", *paths], check=True, capture_output=True,
                         text=True).stdout.split()
    wall, cpu_s = float(out[0]), float(out[1])
    return (wall, cpu_s) if cpu else wall


def _yardstick(paths: list[str]) -> tuple[float, float]:
    """time_yardstick's measure, in the process it runs in."""
    import time

    loads = orjson.loads
    c0, t0 = time.process_time(), time.perf_counter()
    for p in paths:
        with open(p, "rb") as f:
            for line in f:
                loads(line)
    return time.perf_counter() - t0, time.process_time() - c0


def paired_rounds(job, path, rounds: int) -> list[tuple[float, float, float, float]]:
    """`job()` timed `rounds` times (or, where it returns them, its own (wall s, CPU s)), each between two yardsticks
    (the one after a round is the next one's before): per round (job's wall s, its wall / the mean of the two
    yardsticks around it, job's CPU s, its CPU / theirs).
    This machine's speed drifts by 2x within minutes (a yardstick of 2.3 s and 3.7 s in one run), so a ratio is
    only honest between measurements made side by side; the CPU-time ratio leaves out the time the VM was not
    running this process at all (it counts every thread of the job: a job that uses two cores reads dearer)."""
    import gc
    import time

    out = []
    before = time_yardstick(path, cpu=True)
    for _ in range(rounds):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        timed = job()  # (or the job's own (wall s, CPU s): one made in a child process)
        wall, cpu_s = timed or (time.perf_counter() - t0, time.process_time() - c0)
        after = time_yardstick(path, cpu=True)
        out.append((wall, wall / ((before[0] + after[0]) / 2), cpu_s, cpu_s / ((before[1] + after[1]) / 2)))
        before = after
    return out


def fresh_store(path) -> str:
    """Remove the trace store (events, analysis, lanes) of the events file or trace dir `path` (first open: it is
    parsed and the store written) and date its files back an hour if they were just written (the store skips
    sources written less than 2 s ago). Its path."""
    import os

    from disttrace.tracer.data.store import StoreOrigin, cache_path

    is_dir = os.path.isdir(path)
    date_back(path)
    store = cache_path([path], None, is_dir)
    # the events, and the analysis and the viewer's lanes kept beside them
    for f in (store, StoreOrigin(store, {}).beside("analysis"), StoreOrigin(store, {}).beside("lanes")):
        if os.path.exists(f):
            os.unlink(f)
    return store


def date_back(path) -> None:
    """Date the events file (or a trace dir's files) back an hour if they were just written: the store skips
    sources written less than 2 s ago (a trace still being written), and a benchmark's first open must write it."""
    import os

    is_dir = os.path.isdir(path)
    for p in [os.path.join(path, f) for f in os.listdir(path) if f.endswith(".jsonl")] if is_dir else [path]:
        st = os.stat(p)
        os.utime(p, ns=(st.st_atime_ns, min(st.st_mtime_ns, time_ns() - 3600 * 10**9)))


def time_ns() -> int:
    import time
    return time.time_ns()


def write_trace_dir(events_path, out_dir) -> int:
    """The synthetic events file as the trace dir a `disttrace run` of that job writes: one rank file per rank
    (meta, clock, groups, then a begin and an end record per op, as the recorder writes them: docs/FORMAT.md), for
    timing the rank files' reader. Each rank's records are kept until a MB has piled up, then appended to its file
    (1,024 open files would pass the usual limit). Returns the number of ops written."""
    import os

    os.makedirs(out_dir, exist_ok=True)
    pending: dict[int, list[bytes]] = {}
    sizes: dict[int, int] = {}
    groups: dict[int, dict] = {}   # rank -> {(name, ranks): its g}
    ids: dict[int, int] = {}
    n = 0

    def path(r: int) -> str:
        return os.path.join(out_dir, f"rank-{r:05d}-synth-{1000 + r}.jsonl")

    def flush(r: int) -> None:
        with open(path(r), "ab") as fh:
            fh.write(b"".join(pending[r]))
        pending[r], sizes[r] = [], 0

    def add(r: int, rec: dict) -> None:
        line = orjson.dumps(rec) + b"\n"
        pending[r].append(line)
        sizes[r] += len(line)
        if sizes[r] > 1 << 20:
            flush(r)

    with open(events_path, "rb") as f:
        for line in f:
            ev = orjson.loads(line)
            r = ev["rank"]
            if r not in pending:
                pending[r], sizes[r], groups[r], ids[r] = [], 0, {}, 0
                add(r, {"k": "meta", "v": 2, "rank": r, "world_size": 0, "local_rank": r % 8, "host": ev["host"],
                        "pid": 1000 + r, "backend": "gloo", "summaries": "stats", "mono_ns": 0, "restart": 0})
                add(r, {"k": "clock", "phase": "start", "offset_ns": 0, "uncertainty_ns": 0, "mono_ns": 0,
                        "window": 0})
            i = ids[r]
            ids[r] += 1
            begin = {"k": "b", "op": ev["op"], "api": ev["api"], "bytes": ev["bytes"], "dtype": ev["dtype"],
                     "shape": ev["shape"], "site": ev["site"], "i": i, "t": ev["start_ns"]}
            if "group" in ev:  # (a send or recv has none here)
                key = (ev["group"], tuple(ev["group_ranks"]))
                g = groups[r].get(key)
                if g is None:
                    g = groups[r][key] = len(groups[r])
                    add(r, {"k": "group", "g": g, "name": ev["group"], "ranks": ev["group_ranks"], "backend": "gloo"})
                begin["g"] = g
            for k, rk in (("group_seq", "gs"), ("peer", "peer"), ("root", "root"), ("tag", "tag"), ("in", "in")):
                if ev.get(k) is not None:
                    begin[rk] = ev[k]
            if ev.get("async_op"):
                begin["async"] = True
            add(r, begin)
            if ev.get("end_ns") is not None:
                end = {"k": "e", "i": i, "t": ev["end_ns"], "seq": ev.get("seq")}
                if ev.get("out") is not None:
                    end["out"] = ev["out"]
                add(r, end)
            n += 1
    for r in pending:
        flush(r)
    return n


if __name__ == "__main__" and sys.argv[1:2] == ["--yardstick"]:  # (time_yardstick's child)
    print(*_yardstick(sys.argv[2:]))
elif __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "synthetic.jsonl"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    ranks = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    print(write_synthetic(out, n, ranks), "events written to", out)
