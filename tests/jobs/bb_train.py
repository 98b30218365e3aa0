"""A small data-parallel training loop, as a user writes one: a model's gradients all-reduced by hand each step,
the loss averaged, `mark_step()` at the end of each iteration. For the black box (tests/record/test_black_box*.py):
run with `disttrace run --black-box --ring 200`, it issues about ten times the ring in ops.

Faults (`--fault`): `hang` (rank --rank sleeps --hang-s seconds in its data loading at step --at: the others wait
in the all-reduce), `raise` (rank --rank raises at step --at), `kill` (rank --rank is SIGKILLed at step --at), `pause`
(rank 0 writes READY=--ready at step --at, then the job goes on slowly for --pause-s seconds so that a test can ask
for snapshots while it runs). `--go-on FILE`: a hang or a pause ends early once FILE exists (a test that has seen
what it waited for lets the job finish instead of sleeping out the seconds).
`--trace DIR`: the job records itself with the Python API, `trace(out=DIR, black_box=True, ring=200)`.
`--thread`: the training loop runs in a thread of its own (the main thread only waits for it, as a job whose main
thread serves something else does): init_process_group is called there. `--device cuda`: on NCCL, the model and
batches on the rank's GPU (tests/record/test_gpu.py).
Ground truth: each rank writes --truth.RANK (JSON): the ops it issued by (op, bytes), the checksum of its parameters
(which it also prints), its resident memory at step 50 and at the end.
"""

import argparse
import json
import os
import signal
import threading
import time

import torch
import torch.distributed as dist

from disttrace.tracer import mark_step, trace

OPS_PER_STEP = 7  # 6 parameters' gradients, then the loss


def load_batch(step, rank, args):
    if args.fault == "hang" and rank == args.rank and step == args.at:
        until = time.monotonic() + args.hang_s  # a slow file system: this rank is late at the all-reduce
        while time.monotonic() < until and not go_on(args):
            time.sleep(0.05)
    if args.fault == "raise" and rank == args.rank and step == args.at:
        raise RuntimeError(f"corrupt batch at step {step}")
    if args.fault == "kill" and rank == args.rank and step == args.at:
        os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 32, generator=g).to(args.device), torch.randn(16, 4, generator=g).to(args.device)


def go_on(args) -> bool:
    return bool(args.go_on) and os.path.exists(args.go_on)


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--fault", choices=("none", "hang", "raise", "kill", "pause"), default="none")
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--at", type=int, default=250)
    p.add_argument("--hang-s", type=float, default=8.0)
    p.add_argument("--pause-s", type=float, default=8.0)
    p.add_argument("--ready", default="")
    p.add_argument("--go-on", default="", help="a hang or a pause ends once this file exists")
    p.add_argument("--truth", default="")
    p.add_argument("--trace", default="", help="record with trace(out=..., black_box=True, ring=200) itself")
    p.add_argument("--thread", action="store_true", help="train in a thread of its own")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = p.parse_args()
    if args.thread:
        worker = threading.Thread(target=train, args=(args,), name="trainer")
        worker.start()
        worker.join()
    elif args.trace:
        with trace(out=args.trace, black_box=True, ring=200):
            train(args)
    else:
        train(args)


def train(args):
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    issued = {}
    slow_until = None
    rss = {}
    for step in range(args.steps):
        if step == 50:
            rss["at_50"] = resident_bytes()
        x, y = load_batch(step, rank, args)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        for param in model.parameters():
            dist.all_reduce(param.grad)
            param.grad /= world
            issued[param.grad.nbytes] = issued.get(param.grad.nbytes, 0) + 1
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        issued[avg.nbytes] = issued.get(avg.nbytes, 0) + 1
        mark_step()
        if args.fault == "pause" and step == args.at:
            slow_until = time.monotonic() + args.pause_s
            if rank == 0 and args.ready:
                with open(args.ready + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.replace(args.ready + ".tmp", args.ready)
        if slow_until is not None and time.monotonic() < slow_until and not go_on(args):
            time.sleep(0.05)
    checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
    print(f"rank {rank} checksum {checksum:.12f}", flush=True)
    if args.truth:
        with open(f"{args.truth}.{rank}", "w") as f:
            json.dump({"allreduce": issued, "checksum": checksum, "steps": args.steps,
                       "rss": {**rss, "at_end": resident_bytes()}}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
