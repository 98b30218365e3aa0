"""CPU time that recording adds to each NCCL op, beside Flight Recorder's: issue 50's NCCL side, measured on a GPU.

    python benchmarks/bench_nccl_cost.py [--ops 1500] [--rounds 8] [--repeat 2] [--backend nccl|gloo]

bench_record_cost.py counts instructions with callgrind on gloo; a GPU machine has no valgrind, and NCCL's work
is split between the job's thread (the issue), NCCL's watchdog and hook threads and disttrace's CUDA watcher. So
here the yardstick is CPU time per op, in a world of one (one process, one GPU, a HashStore), a loop of 4 KiB
all_reduces issued without waiting (the device keeps up: a world of one's kernel takes microseconds), then one
synchronize. Per op: the job's thread's CPU time over the issue loop (time.thread_time), and the process's
(every thread, from the loop's start until the device is done and 0.2 s more for the threads that end ops after
it: the same 0.2 s in every mode). Modes:
- untraced: Flight Recorder off (TORCH_FR_BUFFER_SIZE=0 and TORCH_NCCL_TRACE_BUFFER_SIZE=0);
- fr: Flight Recorder on at its default 2,000 entries, timing off (what a job has unless it sets the variables);
- fr+timing: Flight Recorder with TORCH_NCCL_ENABLE_TIMING=1 (what gives its entries device durations);
- full: disttrace's full trace (summaries off); bb: `--black-box` (a ring of 4,000 ops, the aggregates);
  both with Flight Recorder off, as disttrace leaves it (it turns on NCCL's timing for its completion hook itself).
Flight Recorder is read when the process group is made, so each setting runs in a process of its own: untraced,
full and bb in one (interleaved blocks, --rounds of them), fr and fr+timing each in another (untraced blocks);
--repeat runs each process that many times, alternating, so that what differs between processes shows in the
spread. Printed: the medians per op, and what each mode adds beside untraced. --backend gloo runs the same on the
CPU (no device; a check of this script, and a CPU-time figure beside callgrind's).

--pieces: where a traced CUDA op's time goes, for whoever makes it cheaper: in one process (Flight Recorder off),
blocks of the same loop untraced, with a timing CUDA event from a pool recorded after each op (the floor of an end
event of our own), and traced (full and --black-box) as built and with one piece of the CUDA path changed at a time
(the CUDA watcher woken at each op, as it was before 2026-11-30, instead of only when it is idle; never given the
op; the op ended at its issue, no CUDA end at all). The changed pieces end ops wrongly or never: a measurement only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

NUMEL = 1024  # float32: 4 KiB
FR_OFF = {"TORCH_FR_BUFFER_SIZE": "0", "TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}
FR_ON = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}
SETTINGS = {  # process -> (environment, modes measured in it)
    "off": (FR_OFF, ("untraced", "full", "bb")),
    "fr": (FR_ON, ("fr",)),
    "full-from-start": (FR_OFF, ("full-from-start",)),
    "bb-from-start": (FR_OFF, ("bb-from-start",)),
    "fr+timing": ({**FR_ON, "TORCH_NCCL_ENABLE_TIMING": "1"}, ("fr+timing",)),
}
LABELS = {"untraced": "untraced (Flight Recorder off)", "fr": "Flight Recorder (2,000 entries)",
          "fr+timing": "Flight Recorder, NCCL timing on", "full": "disttrace, full trace",
          "bb": "disttrace --black-box", "full-from-start": "full trace, from init (NCCL hook, timing)",
          "bb-from-start": "--black-box, from init (NCCL hook, timing)"}


def _block(all_reduce, ops: int, sync, extra=None) -> tuple[float, float]:
    """CPU µs per op of `ops` all_reduces issued back to back (extra(i) after each): the job's thread's over the issue
    loop, and the process's until the device is done and 0.2 s more (the ends other threads record after it)."""
    c0, p0 = time.thread_time(), time.process_time()
    if extra is None:
        for _ in range(ops):
            all_reduce()
    else:
        for i in range(ops):
            all_reduce()
            extra(i)
    c1 = time.thread_time()
    sync()
    time.sleep(0.2)
    return (c1 - c0) / ops * 1e6, (time.process_time() - p0) / ops * 1e6


def _worker(setting: str, backend: str, ops: int, rounds: int) -> None:
    import torch

    from disttrace.tracer import trace

    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(0)
    tmp = tempfile.mkdtemp(prefix="disttrace-bench-nccl-")
    if setting.endswith("-from-start"):  # traced from before init_process_group, as `disttrace run` traces a job
        with trace(out=os.path.join(tmp, setting), summaries="off", black_box=setting.startswith("bb")):
            _measure(setting, backend, ops, rounds, tmp, from_start=True)
        return
    _measure(setting, backend, ops, rounds, tmp)


def _measure(setting: str, backend: str, ops: int, rounds: int, tmp: str, from_start: bool = False) -> None:
    import torch
    import torch.distributed as dist

    from disttrace.tracer import trace

    cuda = backend == "nccl"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    t = torch.ones(NUMEL, device="cuda" if cuda else "cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def block() -> tuple[float, float]:
        return _block(lambda: dist.all_reduce(t), ops, sync)

    def traced(mode: str, b: int):
        if mode in ("untraced", "fr", "fr+timing") or from_start:
            return block()
        with trace(out=os.path.join(tmp, f"{mode}-{b}"), summaries="off", black_box=mode == "bb"):
            block()  # warm (the recorder's modules, the hook's registration)
            return block()

    modes = SETTINGS[setting][1]
    for _ in range(2):
        block()  # the communicator, the allocator
    res: dict = {m: [] for m in modes}
    for b in range(rounds):
        for m in modes[b % len(modes):] + modes[: b % len(modes)]:  # the order rotated each round
            res[m].append(traced(m, b))
    sync()
    print(json.dumps({m: [list(x) for x in v] for m, v in res.items()}))
    dist.destroy_process_group()


def _pieces(backend: str, ops: int, rounds: int) -> None:
    import torch
    import torch.distributed as dist

    from disttrace.tracer import trace
    from disttrace.tracer.record import background, completion

    torch.cuda.set_device(0)
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    t = torch.ones(NUMEL, device="cuda")
    tmp = tempfile.mkdtemp(prefix="disttrace-bench-pieces-")
    watcher, stream_end = background._CudaWatcher, completion.StreamEnd
    real_add, real_after = watcher.add, stream_end.__dict__["after"]
    pool = [torch.cuda.Event(enable_timing=True) for _ in range(4096)]

    def add_and_wake(self, comp, ev, work) -> None:  # the watcher woken at each op (as it was before 2026-11-30)
        real_add(self, comp, ev, work)
        self.wake.set()

    after_none = staticmethod(lambda ev: None)
    pieces = [  # (name, black box, change)
        ("full trace", False, None),
        ("  ended at issue (no CUDA end)", False, lambda: setattr(stream_end, "after", after_none)),
        ("black box", True, None),
        ("  the watcher woken at each op", True, lambda: setattr(watcher, "add", add_and_wake)),
        ("  the watcher never given the op", True, lambda: setattr(watcher, "add", lambda self, c, e, w: None)),
        ("  ended at issue (no CUDA end)", True, lambda: setattr(stream_end, "after", after_none)),
    ]

    def block(extra=None) -> tuple[float, float]:
        return _block(lambda: dist.all_reduce(t), ops, torch.cuda.synchronize, extra)

    for _ in range(2):
        block()
    res: dict = {}
    for b in range(rounds):
        res.setdefault("untraced", []).append(block())
        res.setdefault("untraced + a pooled timing event per op", []).append(
            block(lambda i: pool[i % 4096].record()))
        for name, bb, change in pieces:
            if change is not None:
                change()
            try:
                with trace(out=os.path.join(tmp, f"{b}-{len(res)}"), summaries="off", black_box=bb):
                    block()
                    res.setdefault(("bb" if bb else "full") + ": " + name, []).append(block())
            finally:
                watcher.add, stream_end.after = real_add, real_after
                w = background._THREADS.get(watcher)
                if w is not None:
                    w.wake.set()
            torch.cuda.synchronize()
    print(f"the CUDA path piece by piece: 4 KiB all_reduce on {backend}, issued back to back; CPU µs per op, "
          f"medians of {rounds} blocks of {ops}")
    for name, v in res.items():
        print(f"  {name:50s} job's thread {statistics.median(c for c, _ in v):7.1f}   "
              f"all threads {statistics.median(a for _, a in v):7.1f}")
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=int, default=1500, help="all_reduces per block")
    p.add_argument("--rounds", type=int, default=8, help="blocks per mode in each process")
    p.add_argument("--repeat", type=int, default=2, help="processes per setting, alternating")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--pieces", action="store_true", help="the CUDA path piece by piece (see above)")
    p.add_argument("--worker", choices=tuple(SETTINGS), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.pieces:
        os.environ.update(SETTINGS["off"][0])
        _pieces(a.backend, a.ops, a.rounds)
        return 0
    if a.worker:
        _worker(a.worker, a.backend, a.ops, a.rounds)
        return 0
    if a.backend == "nccl":
        import torch
        import torch.distributed as dist

        if not torch.cuda.is_available() or not dist.is_nccl_available():
            print("bench_nccl_cost: needs a CUDA device and a torch built with NCCL (or --backend gloo); this "
                  "machine has " + ("no CUDA device" if not torch.cuda.is_available() else "no NCCL"),
                  file=sys.stderr)
            return 2
    got: dict = {}
    for rep in range(a.repeat):
        for setting, (env, _modes) in SETTINGS.items():
            cmd = [sys.executable, __file__, "--worker", setting, "--backend", a.backend, "--ops", str(a.ops),
                   "--rounds", str(a.rounds)]
            t0 = time.monotonic()
            proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                print(f"{setting} (process {rep + 1}) failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
                return 1
            for m, v in json.loads(proc.stdout.strip().splitlines()[-1]).items():
                got.setdefault(m, []).append(v)
            print(f"  ({setting}, process {rep + 1}: {time.monotonic() - t0:.0f} s)", file=sys.stderr)
    print(f"4 KiB all_reduce on {a.backend}, a world of one: CPU µs per op, medians of {a.rounds} blocks of "
          f"{a.ops} ops per process; per process (of {a.repeat}) in brackets")
    base_main = statistics.median(x[0] for v in got["untraced"] for x in v)
    base_all = statistics.median(x[1] for v in got["untraced"] for x in v)
    print(f"{'':40} {'job thread':>11} {'added':>8} {'all threads':>12} {'added':>8}")
    for m in LABELS:
        if m not in got:
            continue
        main_ = statistics.median(x[0] for v in got[m] for x in v)
        all_ = statistics.median(x[1] for v in got[m] for x in v)
        per = ", ".join(f"{statistics.median(x[0] for x in v):.1f}" for v in got[m])
        print(f"{LABELS[m]:40} {main_:11.1f} {main_ - base_main:+8.1f} {all_:12.1f} {all_ - base_all:+8.1f}"
              f"   [{per}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
