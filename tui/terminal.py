"""Whether the viewer can run here: it draws on stdout and reads keys from stdin, both a terminal.

Started without one (`disttrace view T </dev/null >out`, a demo in a pipe) it would write escape codes into a file
and wait for keys that never come. Imports nothing heavy: `disttrace demo` asks before it runs its job.
"""

from __future__ import annotations

import sys


def no_terminal() -> str | None:
    """Why the viewer cannot run here ("the viewer needs a terminal, and stdout is not one"), or None."""
    missing = [name for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout))
               if stream is None or not stream.isatty()]
    if not missing:
        return None
    return f"the viewer needs a terminal, and {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not one"
