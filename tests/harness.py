"""What the tests share to run disttrace and real jobs: paths, the CLI as a subprocess, torchrun commands, traced
runs. Test modules import it (never conftest.py or each other); conftest.py holds the session's fixtures."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

JOBS = Path(__file__).parent / "jobs"
REPO = Path(__file__).resolve().parent.parent
if str(JOBS) not in sys.path:  # a job imports its helpers (tagged.py) as a script does, from its own folder
    sys.path.append(str(JOBS))


def job(name: str):
    """A job script of tests/jobs/ as a module, for the ground truth it declares (constants, RUN, EXPECT); the jobs
    import torch only inside main(), so this is cheap."""
    spec = importlib.util.spec_from_file_location(name, JOBS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def disttrace_cmd(*args: str) -> list[str]:
    """The disttrace CLI as a subprocess command (the installed package, run by this interpreter)."""
    return [sys.executable, "-m", "disttrace", *map(str, args)]


def run_disttrace(*args: str, timeout: float = 120, env: dict | None = None, cwd=None, input=None):
    """Run `disttrace ARGS...` and return the CompletedProcess (text mode, output captured)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(disttrace_cmd(*args), capture_output=True, text=True, timeout=timeout, env=full_env,
                          cwd=cwd, input=input)


def torchrun_cmd(script: Path | str, nproc: int = 2, args=(), nnodes: int = 1, node_rank: int = 0,
                 port: int | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
    if nnodes == 1:
        cmd.append("--standalone")
    else:
        cmd += [f"--nnodes={nnodes}", f"--node_rank={node_rank}", "--master_addr=127.0.0.1",
                f"--master_port={port}"]
    script = Path(script)
    if not script.is_absolute():
        script = JOBS / script
    return cmd + [str(script), *map(str, args)]


# torch 2.13 sometimes aborts a rank at the interpreter's exit, untraced as often as traced (about 1 run in 10 on 2
# busy vCPUs): once the job's Python has ended and its groups are destroyed, a C++ thread destroys a still-joinable
# std::thread, and torchrun reports the rank's exit code -6.
EXIT_ABORT = "terminate called without an active exception"


def aborted_at_exit(proc) -> bool:
    """Whether a job failed only by torch's abort at exit (see EXIT_ABORT)."""
    return proc.returncode != 0 and EXIT_ABORT in proc.stderr and "exitcode  : -6" in proc.stderr


def run_traced(script, out: Path, nproc: int = 2, args=(), summaries: str = "full", run_args=(),
               env: dict | None = None, timeout: float = 180, again: bool = False, outputs=()):
    """`disttrace run --out OUT [run_args] torchrun --nproc_per_node=N tests/jobs/SCRIPT ARGS`. again: where torch
    aborted a rank at exit (EXIT_ABORT: not the job's doing nor disttrace's), run it once more, into a new OUT and
    with the job's own `outputs` (folders) removed first."""
    cmd = ["run", "--out", str(out), "--summaries", summaries, *run_args, "--", *torchrun_cmd(script, nproc, args)]
    proc = run_disttrace(*cmd, timeout=timeout, env=env)
    if again and aborted_at_exit(proc):
        for d in (out, *outputs):
            shutil.rmtree(d, ignore_errors=True)
        proc = run_disttrace(*cmd, timeout=timeout, env=env)
    return proc


def all_reduces_by_bucket(issued: dict) -> dict[tuple, int]:
    """tests/jobs/bb_train.py's truth ({bytes: all_reduces issued}) as the black box's aggregates count them:
    {("all_reduce", lo): n}, lo the power of two at or below the bytes (docs/FORMAT.md's size buckets)."""
    out: dict[tuple, int] = {}
    for nbytes, n in issued.items():
        lo = 1 << (int(nbytes).bit_length() - 1)
        out[("all_reduce", lo)] = out.get(("all_reduce", lo), 0) + n
    return out


def run_folder(tmp_path_factory) -> Path:
    """This run's own temporary folder, which its xdist workers share: the parent of each worker's base temp
    (pytest-N/popen-gwK), or the base temp itself without xdist. A new one each run."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def made_once(folder: Path, stem: str, key, make) -> dict:
    """{"out", "rc", "stdout", "stderr"} of make(DIR) -> (out path, CompletedProcess), made once per run and key
    for every test module, whichever xdist worker asks: DIR and what make leaves there lie in `folder`, the run's
    shared one (run_folder), and a worker that finds another one making the same key waits for it (a lock file per
    key) instead of making it beside it."""
    name = f"{stem}-{hashlib.sha1(json.dumps(key).encode()).hexdigest()[:6]}"
    done = folder / f"{name}.json"
    folder.mkdir(exist_ok=True)
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (released when closed, also by a worker that dies)
        if not done.exists():
            out, proc = make(folder / name)
            done.write_text(json.dumps({"out": str(out), "rc": proc.returncode, "stdout": proc.stdout,
                                        "stderr": proc.stderr}))
    return json.loads(done.read_text())


class Traces:
    """traced(script, nproc=2, args=(), summaries="full", run_args=(), expect_rc=0) -> Path of the trace dir.

    Traces tests/jobs/SCRIPT under torchrun once per run per distinct call, for every module and worker of the run
    (made_once): rec_ops.py, rec_crash.py, fr_ddp.py, ex_p2p.py and pp_schedules.py are traced by 2-3 modules each.
    A pair's two runs of a timing truth have distinct keys (tests/pairs.py), so each is a run."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.made = folder / "traced", {}

    def __call__(self, script: str, nproc: int = 2, args=(), summaries: str = "full", run_args=(),
                 expect_rc: int | None = 0) -> Path:
        key = [str(script), nproc, [str(a) for a in args], summaries, [str(a) for a in run_args]]
        if json.dumps(key) not in self.made:
            self.made[json.dumps(key)] = made_once(self.folder, Path(script).stem, key, lambda d: self._trace(
                d, script, nproc, args, summaries, run_args, expect_rc))
        made = self.made[json.dumps(key)]
        if expect_rc is not None and made["rc"] != expect_rc:
            raise AssertionError(f"traced job {script} exited {made['rc']}, expected {expect_rc}\n"
                                 f"--- stdout\n{made['stdout'][-4000:]}\n--- stderr\n{made['stderr'][-4000:]}")
        return Path(made["out"])

    @staticmethod
    def _trace(d: Path, script, nproc, args, summaries, run_args, expect_rc):
        out = d / "trace"
        return out, run_traced(script, out, nproc, args, summaries, run_args, again=expect_rc == 0)


def demo_once(tmp_path_factory, name: str, *args: str) -> tuple[Path, subprocess.CompletedProcess]:
    """(its out dir, the command's outcome) of `disttrace demo NAME ARGS --out DIR` (stdin empty), run once per run
    for every module and worker of the run (made_once): tests/demos runs every demo, and tests/tui/test_tmux opens
    the pipeline demo's trace."""
    def make(d: Path):
        out = d / name
        return out, run_disttrace("demo", name, *args, "--out", str(out), timeout=300, input="")

    made = made_once(run_folder(tmp_path_factory) / "demos", name, [name, *args], make)
    return Path(made["out"]), subprocess.CompletedProcess(["disttrace", "demo", name, *args], made["rc"],
                                                          made["stdout"], made["stderr"])


def traced_fr_run(traced, tmp_path_factory):
    """(disttrace trace dir, dump dir) of one traced fr_ddp.py run, shared by every test module of the run
    (the dump dir's path is part of the traced job's arguments, so it must be the same path each time, in the
    folder the run's workers share)."""
    dumps = run_folder(tmp_path_factory) / "fr_dumps"
    dumps.mkdir(exist_ok=True)
    trace = traced("fr_ddp.py", nproc=2, args=[str(dumps)], summaries="off")
    return trace, dumps


def compile_modes_runs(tmp: Path, nproc: int, env: dict | None = None):
    """jobs/compile_modes.py run untraced and traced: ({rank: (untraced counts, traced counts)}, the trace dir)."""
    # torch 2.13 sometimes aborts a rank of this job at the interpreter's exit (EXIT_ABORT). What the job did is
    # complete by then (its outputs written, its trace closed by atexit), and that is what is compared; any other
    # failure, or that one before the outputs, fails the test
    def check(proc, name):
        done = all((tmp / f"{name}.{r}").exists() for r in range(nproc))
        assert proc.returncode == 0 or (done and aborted_at_exit(proc)), proc.stderr[-3000:]
        assert done, proc.stderr[-3000:]

    plain = subprocess.run(torchrun_cmd(JOBS / "compile_modes.py", nproc, [tmp / "untraced"]), capture_output=True,
                           text=True, timeout=300, env={**os.environ, **(env or {})})
    check(plain, "untraced")
    traced = run_traced("compile_modes.py", tmp / "trace", nproc, [tmp / "traced"], summaries="off", env=env,
                        timeout=300)
    check(traced, "traced")
    load = lambda name, r: json.loads((tmp / f"{name}.{r}").read_text())  # noqa: E731
    return {r: (load("untraced", r), load("traced", r)) for r in range(nproc)}, tmp / "trace"


def assert_compiled_the_same(counts: dict) -> None:
    """What Dynamo counted (compile_modes.py) is the same traced as untraced, and so are the job's numbers."""
    for rank, (plain, traced) in counts.items():
        # nothing of disttrace's in the graph breaks, no extra frame, graph, recompile or AOT compilation
        assert traced["graph_breaks"] == plain["graph_breaks"], rank
        for key in ("frames", "stats", "recompiles", "aot_autograd"):
            assert traced[key] == plain[key], (rank, key)
        assert plain["stats"]["unique_graphs"] >= 3 and plain["aot_autograd"]["ok"] >= 1  # it did compile
        assert traced["results"] == plain["results"], rank


def assert_compiled_collectives_recorded(trace: Path, fsdp: bool = True) -> None:
    """compile_modes.py's collectives, compiled ones too, are in rank 0's trace, at the user's lines (FSDP2's only
    where `fsdp`: in a world of one it issues none)."""
    events = [json.loads(line) for f in sorted(trace.glob("rank-00000-*.jsonl"))
              for line in f.read_bytes().rstrip(b"\0").splitlines() if b'"k":"b"' in line]
    # (the api is the generated function's: compiled.forward from an FX graph, compiled.call from Inductor)
    in_graph = [e for e in events if e.get("api", "").startswith("compiled.")]
    # 3 calls of the fullgraph step (its dist.all_reduce) and 3 of the functional collective, each recorded; the
    # compiled code is the graph's, and the site the user's compiled function (Dynamo's frame keeps its def line)
    assert len(in_graph) == 6, [(e["op"], e.get("api"), e["site"]) for e in events]
    assert all(e["op"] == "all_reduce" and e["site"].startswith(str(JOBS / "compile_modes.py")) for e in in_graph)
    assert sorted(e["site"].rsplit(" in ", 1)[1] for e in in_graph) == ["fullgraph_step"] * 3 + ["funcol_step"] * 3
    # DDP's bucket all-reduces from the compiled model's backward, FSDP2's all-gathers and reduce-scatters
    apis = {e["api"] for e in events}
    assert {"ddp.reducer_allreduce", *(("all_gather_single", "reduce_scatter_single") if fsdp else ())} <= apis, apis
