"""What a "stacks" record (the watchdog's Python stacks of a rank) says in one line."""

from __future__ import annotations

from ...format import is_user_file
from .event_table import text_field


def stacks_site(stacks: dict) -> str:
    """Where a rank was when the watchdog recorded its stacks (a "stacks" record): the main thread's innermost
    frame of user code, and what it was calling ("train.py:12 in main → wait"). The live hang diagnosis and the
    analysis' hang problems both say this; the record may come from a damaged file, so anything odd is skipped."""
    threads = stacks.get("threads") if isinstance(stacks, dict) else None
    threads = [t for t in threads if isinstance(t, dict)] if isinstance(threads, list) else []
    main = next((t for t in threads if t.get("name") == "MainThread"), threads[0] if threads else None)
    frames = main.get("frames") if main else None
    frames = [(text_field(f[0]), text_field(f[1]), text_field(f[2])) for f in frames
              if isinstance(f, list) and len(f) >= 3] \
        if isinstance(frames, list) else []
    if not frames:
        return "(no Python stack)"
    user = [k for k, f in enumerate(frames) if is_user_file(f[0])]
    if not user:
        return "{}:{} in {}".format(*frames[-1])
    k = user[-1]
    calling = f" → {frames[-1][2]}" if k < len(frames) - 1 else ""
    return "{}:{} in {}".format(*frames[k]) + calling
