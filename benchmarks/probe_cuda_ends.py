"""Probe, for issue 41: what each way of learning that a NCCL op ended on the device costs, and how late it knows.

    python benchmarks/probe_cuda_ends.py [--ops 2000]

Needs one CUDA device and a torch built with NCCL (a world of one); elsewhere it says so and exits 2. It measures,
in this process (the Flight Recorder part in a child process started with Flight Recorder's variables):
- a CUDA event of our own after each op: made and recorded per op, recorded from a pool made ahead, and made
  blocking (so that a thread waiting on it sleeps instead of spinning) - the job's thread's CPU per op;
- a waiter thread blocked on each op's end event in turn (GIL released while it waits): how late after the
  device's end it wakes (the device's end in the host's clock through a reference event), and its CPU per op;
- Work.is_completed() per call, as the present watcher polls it;
- Flight Recorder's buffer (TORCH_FR_BUFFER_SIZE=2000, TORCH_NCCL_ENABLE_TIMING=1): which dump functions this
  torch has, what an entry holds (its state, its duration), and what a dump costs with every entry and with the
  active ones only.
Each part runs on its own and prints its failure instead of its figures, so that one run on a GPU machine says
all it can. The figures are for choosing the mechanism (docs/ARCHITECTURE.md, "How a CUDA op ends"); the goals'
yardstick stays bench_recorder.py --device cuda.
"""

from __future__ import annotations

import argparse
import os
import pickle
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter

FR_ENV = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_ENABLE_TIMING": "1"}


def _init():
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    t = torch.ones(1024, device="cuda")  # 4 KiB
    for _ in range(20):  # the communicator, the allocator
        dist.all_reduce(t)
    torch.cuda.synchronize()
    return torch, dist, t


def _part(name: str, fn) -> None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - one part's failure is that part's finding
        print(f"{name}: failed: {type(e).__name__}: {e}")


def _per_op_us(n: int, body) -> float:
    c0 = time.thread_time()
    for _ in range(n):
        body()
    return (time.thread_time() - c0) / n * 1e6


def events_per_op(n: int) -> None:
    torch, dist, t = _init()
    stream = torch.cuda.current_stream()
    pool = [torch.cuda.Event() for _ in range(n)]
    blocking = [torch.cuda.Event(blocking=True) for _ in range(n)]
    it = iter(pool)
    itb = iter(blocking)
    cases = {
        "all_reduce alone": lambda: dist.all_reduce(t),
        "+ torch.cuda.Event() made and recorded": lambda: (dist.all_reduce(t), torch.cuda.Event().record(stream)),
        "+ an event from a pool, recorded": lambda: (dist.all_reduce(t), next(it).record(stream)),
        "+ a blocking event from a pool, recorded": lambda: (dist.all_reduce(t), next(itb).record(stream)),
        "+ Work.is_completed() once (async_op)": lambda: dist.all_reduce(t, async_op=True).is_completed(),
    }
    print(f"the job's thread's CPU per 4 KiB all_reduce, {n} ops issued back to back:")
    for name, body in cases.items():
        us = _per_op_us(n, body)
        torch.cuda.synchronize()
        print(f"  {name:45s} {us:7.1f} µs")


def waiter_latency(n: int) -> None:
    """One thread blocks on each op's end event (made blocking, with timing) in issue order; the job issues an
    op every 200 µs. Late = the waiter's clock when synchronize() returned - the device's end in the host clock
    (a reference event recorded once the device was idle: its time is the host's then, to a few µs)."""
    torch, dist, t = _init()
    stream = torch.cuda.current_stream()
    q: queue.Queue = queue.Queue()
    woke: list = []
    cpu: list = []

    def wait_each() -> None:
        c0 = time.thread_time()
        while True:
            ev = q.get()
            if ev is None:
                break
            ev.synchronize()
            woke.append(time.perf_counter_ns())
        cpu.append(time.thread_time() - c0)

    for flavour in ("blocking", "spinning"):
        woke.clear()
        cpu.clear()
        th = threading.Thread(target=wait_each, daemon=True)
        th.start()
        torch.cuda.synchronize()
        ref = torch.cuda.Event(enable_timing=True)
        ref.record(stream)
        torch.cuda.synchronize()
        t_ref = time.perf_counter_ns()
        ends = []
        c0 = time.thread_time()
        for _ in range(n):
            dist.all_reduce(t)
            ev = torch.cuda.Event(enable_timing=True, blocking=flavour == "blocking")
            ev.record(stream)
            q.put(ev)
            ends.append(ev)
            target = time.perf_counter() + 200e-6
            while time.perf_counter() < target:
                pass
        job_us = (time.thread_time() - c0) / n * 1e6
        q.put(None)
        th.join()
        torch.cuda.synchronize()
        late = sorted(w - (t_ref + ref.elapsed_time(e) * 1e6) for w, e in zip(woke, ends))
        print(f"a waiter thread on {flavour} end events, an op every 200 µs: woke after the device's end by "
              f"median {late[len(late) // 2] / 1e3:.1f} µs, p99 {late[int(len(late) * 0.99)] / 1e3:.1f} µs; its CPU "
              f"{cpu[0] / n * 1e6:.1f} µs/op; the job's thread {job_us:.1f} µs/op (with the 200 µs spin)")


def flight_recorder(n: int) -> None:
    torch, dist, t = _init()
    c10d = torch._C._distributed_c10d
    names = sorted(x for x in dir(c10d) if "trace" in x.lower() or "dump" in x.lower() or "flight" in x.lower())
    print(f"Flight Recorder's functions in torch {torch.__version__}: {', '.join(names) or 'none'}")
    for _ in range(n):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    time.sleep(0.3)  # (its watchdog marks entries completed)
    dump = getattr(c10d, "_dump_nccl_trace", None)
    if dump is None:
        print("  no _dump_nccl_trace")
        return

    def dump_once(only_active: bool) -> bytes:
        try:
            return dump(includeCollectives=True, includeStackTraces=False, onlyActive=only_active)
        except TypeError:  # (another torch's keywords)
            return dump(True, False, only_active)

    for only_active in (False, True):
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            raw = dump_once(only_active)
            d = pickle.loads(raw)
            times.append(time.perf_counter() - t0)
        entries = d.get("entries", [])
        print(f"  a dump (onlyActive={only_active}): {len(entries)} entries, {len(raw)} bytes, "
              f"{statistics.median(times) * 1e3:.2f} ms with unpickling")
        if entries:
            last = entries[-1]
            shown = {k: v for k, v in last.items() if k != "frames"}
            print(f"  its last entry: {shown}")
    # entries in flight: issued back to back, dumped before they complete
    for _ in range(200):
        dist.all_reduce(t)
    d = pickle.loads(dump_once(True))
    states = Counter(e.get("state") for e in d.get("entries", []))
    print(f"  right after 200 ops issued back to back, the active ones: {sum(states.values())}, states "
          f"{dict(states)}")
    torch.cuda.synchronize()


PARTS = {"events": events_per_op, "waiter": waiter_latency, "fr": flight_recorder}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)  # (one part, in a child process)
    a = ap.parse_args()
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available() or not dist.is_nccl_available():
        print("probe_cuda_ends: needs a CUDA device and a torch built with NCCL; this machine has "
              + ("no CUDA device" if not torch.cuda.is_available() else "no NCCL"), file=sys.stderr)
        return 2
    if a.part:
        _part(a.part, lambda: PARTS[a.part](a.ops))
        return 0
    rc = 0
    for part in PARTS:  # each in a process of its own: Flight Recorder's variables are read at the group's start
        env = dict(os.environ, **(FR_ENV if part == "fr" else {}))
        rc |= subprocess.run([sys.executable, __file__, "--part", part, "--ops", str(a.ops)], env=env,
                             timeout=300).returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
