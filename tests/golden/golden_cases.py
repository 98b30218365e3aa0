"""The golden cases: which command runs on which committed trace, how it is run in process, and the one place its
output is normalized. Shared by test_golden.py (compares) and refresh.py (rewrites); test_golden.py's docstring says
what each trace is.

Every case runs `disttrace ARGV` through cli.main in this process, in a scratch folder that holds a copy of the
traces it reads, named by their relative paths (TRACES below): the outputs name the traces as the user spelt them,
so they never hold the checkout's path nor the scratch folder's, whatever the cwd the tests run from.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).parent
TESTS = HERE.parent
OUT = HERE / "out"         # the goldens: one file per case's stdout, and cases.json (argv, exit code, stderr)
INDEX = OUT / "cases.json"

# the traces, by the name the cases spell them with -> where they are committed
TRACES = {
    "tui_job.jsonl": TESTS / "tui" / "data" / "tui_job.jsonl",
    "hang.jsonl": TESTS / "tui" / "data" / "hang.jsonl",
    "pipeline_job.jsonl": TESTS / "tui" / "data" / "pipeline_job.jsonl",
    "pp_1f1b.jsonl": TESTS / "tui" / "data" / "pp_1f1b.jsonl",
    "gpipe_warmup.jsonl": TESTS / "tui" / "data" / "gpipe_warmup.jsonl",
    "pipeline_demo.jsonl": TESTS / "tui" / "data" / "pipeline_demo.jsonl",
    "ddp_none": HERE / "traces" / "ddp_none",
    "ddp_slow": HERE / "traces" / "ddp_slow",
    "mismatch": HERE / "traces" / "mismatch",
    "nan": HERE / "traces" / "nan",
    "damaged": HERE / "traces" / "damaged",
    "cycles": HERE / "traces" / "cycles",
    "fr": HERE / "traces" / "fr",
    "nccl2.17": TESTS / "data" / "kineto" / "nccl2.17",
    "gloo-r0.json.gz": TESTS / "data" / "kineto" / "host" / "torch2.13-gloo-r0.json.gz",
    "gloo-r1.json.gz": TESTS / "data" / "kineto" / "host" / "torch2.13-gloo-r1.json.gz",
}

_REPORTED = ("tui_job.jsonl", "hang.jsonl", "pipeline_job.jsonl", "pp_1f1b.jsonl", "gpipe_warmup.jsonl",
             "pipeline_demo.jsonl", "ddp_slow", "mismatch", "nan", "damaged", "fr", "nccl2.17")


def _stem(name: str) -> str:
    return name.removesuffix(".jsonl")


# case name (its golden file's name) -> argv of `disttrace`
CASES: dict[str, list[str]] = {
    **{f"report.{_stem(t)}.txt": ["report", t] for t in _REPORTED},
    **{f"report.{_stem(t)}.json": ["report", "--json", t] for t in _REPORTED},
    "report.gloo-host.txt": ["report", "gloo-r0.json.gz", "gloo-r1.json.gz"],
    "report.gloo-host.json": ["report", "--json", "gloo-r0.json.gz", "gloo-r1.json.gz"],
    "report.cycles-all.txt": ["report", "--run", "all", "cycles"],
    "report.cycles-all.json": ["report", "--json", "--run", "all", "cycles"],
    "report.ddp_slow-what-if.txt": ["report", "--what-if", "rank:3", "--what-if", "bandwidth=2x",
                                    "--what-if", "op:all_reduce", "ddp_slow"],
    "report.ddp_slow-what-if.json": ["report", "--json", "--what-if", "rank:3", "--what-if", "bandwidth=2x",
                                     "--what-if", "op:all_reduce", "ddp_slow"],
    "runs.cycles.txt": ["runs", "cycles"],
    "diff.ddp.txt": ["diff", "ddp_none", "ddp_slow"],
    "diff.ddp.json": ["diff", "--json", "ddp_none", "ddp_slow"],
    "diff.ddp-same.json": ["diff", "--json", "ddp_none", "ddp_none"],
    "diff.pipelines.json": ["diff", "--json", "gpipe_warmup.jsonl", "pp_1f1b.jsonl"],
    "export.tui_job.json": ["export", "-o", "-", "tui_job.jsonl"],
    "export.pp_1f1b.json": ["export", "-o", "-", "pp_1f1b.jsonl"],
    "export.ddp_slow.json": ["export", "-o", "-", "ddp_slow"],
    "export.hang.json": ["export", "-o", "-", "hang.jsonl"],
}


def traces_of(argv: list[str]) -> list[str]:
    """The traces a case reads."""
    return list(dict.fromkeys(a for a in argv if a in TRACES))


def copy_traces(into: Path, names=None) -> None:
    """The committed traces (`names`, else all), copied into `into`, so that neither a run nor its stores touch
    the checkout. Their times are set an hour back: a fresh clone's files are seconds old, and a source written
    that recently is never stored (data/store/cache.py, RACY_NS), which would leave the store's runs untried."""
    old = time.time() - 3600
    for name in names or TRACES:
        src = TRACES[name]
        if src.is_dir():
            shutil.copytree(src, into / name, copy_function=shutil.copy2,
                            ignore=shutil.ignore_patterns(".disttrace-cache", "*.disttrace.arrow"))
        else:
            shutil.copy2(src, into / name)
        for p in [into / name, *(into / name).rglob("*")]:
            os.utime(p, (old, old))


# What the outputs may not depend on: the environment, pinned here. Rich sizes its tables by COLUMNS (report's own
# default, 120, only where it is unset) and colours by FORCE_COLOR/TTY_*; `runs` prints each run's start in the
# local time zone (TZ: UTC here, whatever the machine's).
_ENV = {"COLUMNS": "120", "LINES": None, "FORCE_COLOR": None, "NO_COLOR": None, "TTY_COMPATIBLE": None,
        "TTY_INTERACTIVE": None, "TERM": "dumb", "TZ": "UTC"}


def _set(env: dict) -> None:
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    time.tzset()


@contextmanager
def _environment(cwd: Path, cache: bool):
    saved = {k: os.environ.get(k) for k in (*_ENV, "DISTTRACE_CACHE")}
    here = os.getcwd()
    try:
        _set({**_ENV, "DISTTRACE_CACHE": "1" if cache else "0"})
        os.chdir(cwd)
        yield
    finally:
        os.chdir(here)
        _set(saved)


def run(argv: list[str], cwd: Path, cache: bool) -> tuple[int, bytes, str]:
    """(exit code, stdout, stderr) of `disttrace ARGV` run in this process in `cwd`, the store on or off (its
    DISTTRACE_CACHE, whatever the caller's environment says)."""
    from disttrace.tracer import cli

    out, err = io.BytesIO(), io.StringIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    old = sys.stdout, sys.stderr
    with _environment(cwd, cache):
        sys.stdout, sys.stderr = stdout, err
        try:
            rc = cli.main(argv)
        finally:
            stdout.flush()
            sys.stdout, sys.stderr = old
    return rc, out.getvalue(), err.getvalue()


def normalize(data: bytes, cwd: Path) -> bytes:
    """The one place an output is normalized: the scratch folder's path, should an output ever name a trace by its
    real path (none does at the frozen commit; the store's fingerprint holds real paths, and a message could show
    one), becomes `<traces>`. Nothing else needs to be, and nothing else is, so that any other change shows: the
    commands print no timing of their own work, their only date is the trace's own (in the pinned time zone,
    _ENV), the paths inside the traces (call sites, run.json's command) were recorded once and are the traces'
    own, and the store's state changes nothing (test_golden.py runs every case with it off, then on twice:
    written, then read back with the saved analysis)."""
    real = os.path.realpath(cwd)
    for p in sorted({str(cwd), real}, key=len, reverse=True):
        data = data.replace(p.encode(), b"<traces>")
    return data


def normalize_text(text: str, cwd: Path) -> str:
    return normalize(text.encode(), cwd).decode()


__all__ = ["CASES", "INDEX", "OUT", "TRACES", "copy_traces", "normalize", "traces_of", "normalize_text", "run"]
