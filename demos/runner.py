"""Run one demo under the tracer and write its narration from what was recorded.

    disttrace run --out DIR --summaries full -- python -m torch.distributed.run --standalone
        --nproc_per_node=N --redirects 3 --log-dir DIR/job-output
        demos/programs/PROGRAM.py --backend B --results DIR/demo-results [options]

then load the trace, call the demo's narration function and write DIR/narration.json. Meanwhile it says what
it is doing (`say`), and prints the job's output as it comes, each line whole with its rank in front
(progress.RankOutput reads the files torchrun's `--redirects` writes). The demos that time
megabyte-sized calls (allreduce-three-ways, p2p-bandwidth) record no tensor summaries (`--summaries off`):
summarizing 4 MB tensors on every call would be part of what they measure. The demos that teach memory (zero1,
fsdp2) are recorded with `--memory --memory-step 1`: the bytes their narration quotes are the recorder's, as for a
user's job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from disttrace.tracer.errors import TraceError

from .narrate_common import DemoRun
from .progress import OUTPUT_DIR, RankOutput, say
from .registry import Demo


def default_out(demo: Demo) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"disttrace-demo-{demo.name}-"))


def command(demo: Demo, nproc: int, backend: str, out: Path, size: int | None, extra: list[str]) -> list[str]:
    program_args = ["--backend", backend, "--results", str(out / "demo-results")]
    if size is not None:
        program_args += ["--size", str(size)]
    memory = [] if demo.memory_step is None else ["--memory", "--memory-step", str(demo.memory_step)]
    return [sys.executable, "-m", "disttrace", "run", "--out", str(out), "--summaries", demo.summaries, *memory, "--",
            sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "--redirects", "3", "--log-dir", str(out / OUTPUT_DIR),  # each rank's output to files: RankOutput
            str(demo.path), *program_args, *extra]


def check_backend(backend: str, nproc: int) -> None:
    if backend != "nccl":
        return
    import torch  # only here: the gloo path never needs torch in this process

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < nproc:
        raise TraceError(f"--backend nccl needs {nproc} GPUs on this machine (one per rank); found {gpus}")


def run_demo(demo: Demo, nproc: int, backend: str = "gloo", out: Path | None = None, size: int | None = None,
             extra: list[str] | None = None, tell: Callable[[str], None] = say) -> DemoRun:
    """Run the demo's program under the tracer, narrate it, and return the run (trace in run.out). `tell` gets
    each line of progress: the phases, and the ranks' output."""
    from disttrace.tracer.commands.run import prepare_out
    from disttrace.tracer.data.load import load_trace

    check_backend(backend, nproc)
    out = Path(prepare_out(str(out))) if out is not None else default_out(demo)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),  # quiets torchrun's banner
           "PYTHONUNBUFFERED": "1"}  # each rank's lines reach its output file as they are printed
    where = "the CPU" if backend == "gloo" else "a GPU each"
    tell(f"disttrace demo {demo.name}: starting {nproc} ranks (torchrun, {backend} on {where})\n"
         "  each rank imports torch first: a few seconds")
    started = time.monotonic()
    with RankOutput(out / OUTPUT_DIR, out, nproc, tell, started):
        proc = subprocess.run(command(demo, nproc, backend, out, size, extra or []), env=env)
    took = time.monotonic() - started
    if proc.returncode != 0:
        raise TraceError(f"the {demo.name} demo failed (exit code {proc.returncode} after {took:.1f} s; its output "
                         f"is above); what was recorded is in {out}")
    tell(f"disttrace demo {demo.name}: the job ended ({took:.1f} s); reading its trace, writing the narration")
    results = {}
    for f in sorted((out / "demo-results").glob("rank*.json")):
        results[int(f.stem[4:])] = json.loads(f.read_text())
    options = {"size": size, "extra": list(extra or [])}
    run = DemoRun(demo.name, out, load_trace([str(out)]), nproc, backend, options, results)
    demo.narrator()(run)
    return run
