"""What the tests share to run disttrace and real jobs: paths, the CLI as a subprocess, torchrun commands, traced
runs. Test modules import it (never conftest.py or each other); conftest.py holds the session's fixtures."""

from __future__ import annotations

import importlib.util
import os
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
               env: dict | None = None, timeout: float = 180):
    """`disttrace run --out OUT [run_args] torchrun --nproc_per_node=N tests/jobs/SCRIPT ARGS`."""
    cmd = ["run", "--out", str(out), "--summaries", summaries, *run_args, "--", *torchrun_cmd(script, nproc, args)]
    return run_disttrace(*cmd, timeout=timeout, env=env)


def traced_fr_run(traced, tmp_path_factory):
    """(disttrace trace dir, dump dir) of one traced fr_ddp.py run, shared by every test module of the session
    (the dump dir's path is part of the traced job's arguments, so it must be the same path each time)."""
    dumps = tmp_path_factory.getbasetemp() / "fr_dumps"
    dumps.mkdir(exist_ok=True)
    trace = traced("fr_ddp.py", nproc=2, args=[str(dumps)], summaries="off")
    return trace, dumps
