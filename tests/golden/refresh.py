"""Rewrite the golden outputs (tests/golden/out/) from the code as it is now.

    python tests/golden/refresh.py            # every case
    python tests/golden/refresh.py report.nan.txt diff.ddp.json ...   # only these

The goldens hold the behaviour that a restructuring must leave unchanged (issue 52): rewrite them only for an
intended change of what the commands print, and name every golden it changes, and why, in the commit's message (a
restructuring's commit changes none). `git diff tests/golden/out` shows what changed before it is committed.

Each case runs with the store off (DISTTRACE_CACHE=0), as test_golden.py's first run does; test_golden.py checks
that the store's runs print the same.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.dont_write_bytecode = False

from golden_cases import CASES, INDEX, OUT, copy_traces, normalize, normalize_text, run  # noqa: E402


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.stderr.write(f"refresh.py: no such case: {', '.join(unknown)}\n")
        return 2
    OUT.mkdir(exist_ok=True)
    index = json.loads(INDEX.read_text()) if INDEX.exists() and names else {}
    with tempfile.TemporaryDirectory(prefix="disttrace-golden-") as tmp:
        cwd = Path(tmp)
        copy_traces(cwd)
        for name in names or CASES:
            argv = CASES[name]
            rc, out, err = run(argv, cwd, cache=False)
            (OUT / name).write_bytes(normalize(out, cwd))
            index[name] = {"argv": argv, "rc": rc, "stderr": normalize_text(err, cwd)}
            print(f"{name}: exit {rc}, {len(out):,} bytes")
    INDEX.write_text(json.dumps(dict(sorted(index.items())), indent=1, ensure_ascii=False) + "\n")
    stale = sorted(p.name for p in OUT.iterdir() if p.name not in CASES and p != INDEX)
    for name in stale if not names else ():
        (OUT / name).unlink()
        print(f"{name}: removed (no such case any more)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
