"""The real viewer in a real terminal (tmux) on a trace of a real torchrun job, used as a person would."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")]


class Tmux:
    def __init__(self, command: str, width: int = 120, height: int = 40):
        self.name = f"disttrace-{uuid.uuid4().hex[:8]}"
        # the pane is made at its size first, then the command started in it: a new session's pane starts at
        # tmux's default size and is resized an instant later, which a busy machine's app can start before and miss
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height),
                        "sleep 600"], check=True)
        # and told its size: on a loaded machine the app's size query (shutil.get_terminal_size, which reads
        # COLUMNS and LINES first) now and then fell back to 80x24 in a 120x40 pane
        subprocess.run(["tmux", "respawn-pane", "-k", "-t", self.name,
                        f"env COLUMNS={width} LINES={height} {command}"], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True,
                              text=True).stdout

    def keys(self, *keys: str) -> None:
        for k in keys:
            subprocess.run(["tmux", "send-keys", "-t", self.name, k], check=True)
            time.sleep(0.15)

    def wait_for(self, text: str, timeout: float = 30, gone: str | None = None) -> str:
        """The screen once `text` is on it (and `gone` is not)."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen and (gone is None or gone not in screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not on screen after {timeout}s:\n{screen}")
            time.sleep(0.2)

    def alive(self) -> bool:
        return subprocess.run(["tmux", "has-session", "-t", self.name], capture_output=True).returncode == 0

    def kill(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def test_view_a_real_trace_in_tmux(traced, tmp_path):
    trace = traced("tui_job.py", nproc=4)
    done = tmp_path / "exit_code"
    term = Tmux(f"{sys.executable} -m disttrace view {trace}; echo $? > {done}")
    try:
        screen = term.wait_for("1 Timeline")
        for r in range(4):
            assert f"r{r} " in screen  # one lane per rank, labelled with rank and host
        assert "all_reduce" in screen and "before the first event" in screen
        # N five times: all_reduce, all_gather, reduce_scatter, broadcast, then the barrier rank 2 came 0.3 s late to
        term.keys("N", "N", "N", "N", "N")
        screen = term.wait_for("barrier #4")
        assert "which arrived last" in screen and "rank 2" in screen, screen
        # the waits view says the verdict and puts the straggler first
        term.keys("4")
        screen = term.wait_for("4 ranks by the wait")
        assert "Straggler: rank 2 was late" in screen, screen
        rows = [line.split() for line in screen.splitlines() if re.match(r"^\s*r\d+\s+[\d.]+[mµn]?s\b", line)]
        assert rows and rows[0][0] == "r2", screen
        # the ring view of the first all_reduce: 2(N-1) = 6 steps of K/N = 1 KiB (K = 1024 floats)
        term.keys("1", "g")
        term.wait_for("go to: a time")  # the prompt (the footer says "g go to" all along)
        term.keys("#0", "Enter", "2", "]")
        screen = term.wait_for("Step 1 of 6")
        assert "K/N = 1KiB" in screen
        term.keys("?")
        term.wait_for("next collective")
        term.keys("Escape")  # then q once the help is gone: ESC and q read together would be alt+q
        term.wait_for("Step 1 of 6", gone="next collective")
        term.keys("q")
        deadline = time.monotonic() + 30
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.read_text().strip() == "0"
    finally:
        term.kill()


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
def test_go_to_in_a_real_terminal_shows_what_is_typed_and_one_numbering(size):
    """`g`: the typed text is on screen while typed (a bordered input once showed only its borders), and #16 is #16
    in the list, the detail pane and the status line."""
    from tui_helpers import TUI_JOB

    term = Tmux(f"{sys.executable} -m disttrace view {TUI_JOB}", *size)
    try:
        term.wait_for("1 Timeline")
        term.keys("g")
        term.wait_for("go to:")
        term.keys("#16")
        screen = term.wait_for("#16")
        prompt = screen.splitlines()
        at = next(i for i, line in enumerate(prompt) if "go to:" in line)
        assert prompt[at + 1].strip() == "#16", screen
        term.keys("Enter")
        screen = term.wait_for("#16 on rank 0", gone="go to:")  # the detail pane (drawn a frame after the list)
        assert "#16 of 32 @" in screen, screen  # the status line
        if size[0] >= 200:  # the list has room for its # column
            assert any(line.startswith("▶") and line.split()[1] == "16" for line in screen.splitlines()), screen
    finally:
        term.kill()
