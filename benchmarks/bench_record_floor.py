"""How little a pure-Python recorder can add to an op: prototypes of the hot path beside disttrace's, in callgrind.

    python benchmarks/bench_record_floor.py [--modes untraced,floor,lean,lean_seq,lean_fmt,disttrace] [--ops 100,300]

Issue 50 asks the job's thread to pay Flight Recorder's price (black box <= 10k instructions an op, the full trace
<= 20k). Before a compiled part is considered (docs/ARCHITECTURE.md, the recorder), this measures what Python
itself allows: each mode wraps ProcessGroup.allreduce and Work.wait as disttrace's fast path does (the backend's
method called directly, past the dispatcher) and does a little more than the one before it:
- floor: the caller's code object in place of a stack walk, the tensor's dtype and shape, the async flag and a
  clock read into a deque (in memory, not on disk), the end's clock read at wait();
- lean: floor with disttrace's own stack walk (callsite.walk: the user's line, the api, the origin);
- lean_seq: lean with the backend's sequence number read after issue (one pybind call);
- lean_fmt: lean_seq with both records formatted as disttrace's JSON lines and written into a shared map, as the
  recorder does (the whole record, crash-safe);
- disttrace: disttrace's recorder as `disttrace run` installs it (summaries off).
Same yardstick as bench_record_cost.py (whose callgrind helpers it uses): a world of one on gloo, a 4 KiB
all_reduce, (I[large] - I[small]) / (large - small) on the main thread and on all threads, instrumentation
started after a warm-up of 50 ops. Each mode's figure beside the untraced op's is what that much recording costs.
"""

from __future__ import annotations

import argparse
import gc
import glob
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_record_cost import NUMEL, WARM_OPS, ClientRequests, per_op, thread_totals  # noqa: E402

MODES = ("untraced", "floor", "lean", "lean_seq", "lean_fmt", "disttrace")
# the prototypes' records: disttrace's begin and end lines for a 4 KiB all_reduce from one line
_HEAD = (b'{"k":"b","op":"all_reduce","api":"all_reduce","g":0,"bytes":4096,"dtype":"float32","shape":[1024],'
         b'"async":false,"site":"x.py:10 in f","i":')
_BEGIN, _END = b'%b%d,"gs":%d,"t":%d}\n', b'{"k":"e","i":%d,"t":%d,"seq":%d}\n'


def install(mode: str, torch, dist) -> None:
    """Wrap ProcessGroup.allreduce and Work.wait with mode's prototype (or disttrace's recorder)."""
    if mode == "untraced":
        return
    if mode == "disttrace":
        from disttrace.tracer.record import hooks

        hooks.install(tempfile.mkdtemp(), "off", 60.0)
        return
    import mmap
    from collections import deque
    from itertools import count

    from disttrace.tracer.record.callsite import walk

    if mode == "floor":
        def walk(depth):  # noqa: F811 - no walk: the code object a fixed number of frames up
            return sys._getframe(depth + 1).f_code, None, None
    world = dist.group.WORLD
    gloo = world._get_backend(torch.device("cpu"))
    put, ids, ends = deque(maxlen=100_000).append, count(), {}
    write = mmap.mmap(-1, 1 << 28).write
    mono, gs = time.monotonic_ns, [0]
    fmt, seq = mode == "lean_fmt", mode in ("lean_seq", "lean_fmt")

    def allreduce(self, tensors, opts):
        site, api, origin = walk(2)
        first = tensors[0]
        i = next(ids)
        key = (api, origin, site, first.dtype, first.shape, opts.asyncOp)
        if fmt:
            write(_BEGIN % (_HEAD, i, gs[0], mono()))
        else:
            put((i, key, gs[0], mono()))
        gs[0] += 1
        work = gloo.allreduce(tensors, opts)
        ends[id(work)] = (i, world._get_sequence_number_for_group() if seq else 0)
        return work

    Work = dist.distributed_c10d.Work
    orig_wait = Work.wait

    def wait(self, *args):
        result = orig_wait(self, *args)
        end = ends.pop(id(self), None)
        if end is not None:
            if fmt:
                write(_END % (end[0], mono(), end[1]))
            else:
                put((end, mono()))
        return result

    dist.ProcessGroup.allreduce = allreduce
    Work.wait = wait


def _worker(mode: str, n: int) -> None:
    cg = ClientRequests()
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    install(mode, torch, dist)
    t = torch.ones(NUMEL)
    for _ in range(WARM_OPS):
        dist.all_reduce(t)
    gc.collect()
    cg.start_instrumentation()
    for _ in range(n):
        dist.all_reduce(t)


def _measure(mode: str, n: int, work: str) -> dict[int, int]:
    os.makedirs(work, exist_ok=True)
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "0", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={work}/cg.%p",
           "--instr-atstart=no", sys.executable, os.path.abspath(__file__), "--worker", mode, str(n)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_record_floor: the worker for {mode}, {n} ops, exited {proc.returncode}: "
                         f"{proc.stderr.strip().splitlines()[-1:]}")
    return thread_totals(sorted(glob.glob(f"{work}/cg.*")))


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], int(sys.argv[3]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--ops", default="100,300", help="the two loop lengths whose difference is measured")
    args = p.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in MODES for m in modes) or "untraced" not in modes:
        p.error(f"--modes: a comma-separated subset of {', '.join(MODES)}, untraced among them")
    small, large = (int(x) for x in args.ops.split(","))
    out: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            a = _measure(mode, small, f"{tmp}/{mode}-{small}")
            b = _measure(mode, large, f"{tmp}/{mode}-{large}")
            out[mode] = per_op(a, b, small, large)
            print(f"  {mode}: {out[mode][0] / 1e3:.1f}k", file=sys.stderr, flush=True)
    base = out["untraced"]
    print(f"{'mode':12s} {'main /op':>9s} {'all /op':>9s}   beside untraced: main, all")
    for mode, (main_t, all_t) in out.items():
        extra = "" if mode == "untraced" else f"   {(main_t - base[0]) / 1e3:+.1f}k, {(all_t - base[1]) / 1e3:+.1f}k"
        print(f"{mode:12s} {main_t / 1e3:8.1f}k {all_t / 1e3:8.1f}k{extra}")
    print(f"(callgrind's Ir, (I[{large}] - I[{small}]) / {large - small}; a 4 KiB all_reduce, gloo, a world of one)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
