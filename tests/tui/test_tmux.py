"""The real viewer in a real terminal (tmux) on a trace of a real torchrun job, used as a person would."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")]


# A tmux server of this test process's own (-L): on the default socket, every session of the machine's users
# shares one server, which exits with its last session; a new session started as another's last one ended found
# it exiting ("server exited unexpectedly", seen with two workers beside other runs of the suite).
TMUX = ["tmux", "-L", f"disttrace-tests-{os.getpid()}"]


class Tmux:
    def __init__(self, command: str, width: int = 120, height: int = 40):
        self.name = f"disttrace-{uuid.uuid4().hex[:8]}"
        # the pane is made at its size first, then the command started in it: a new session's pane starts at
        # tmux's default size and is resized an instant later, which a busy machine's app can start before and miss
        new = [*TMUX, "new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height), "sleep 600"]
        for _ in range(20):
            # the last test's kill-session ended the server's last session: the server exits, and a session asked
            # of it meanwhile fails (a fresh clone's loaded run): asked again once it is gone
            if subprocess.run(new, capture_output=True).returncode == 0:
                break
            time.sleep(0.25)
        else:
            subprocess.run(new, check=True)
        # and told its size: on a loaded machine the app's size query (shutil.get_terminal_size, which reads
        # COLUMNS and LINES first) now and then fell back to 80x24 in a 120x40 pane
        subprocess.run([*TMUX, "respawn-pane", "-k", "-t", self.name,
                        f"env COLUMNS={width} LINES={height} {command}"], check=True)

    def screen(self) -> str:
        return subprocess.run([*TMUX, "capture-pane", "-p", "-t", self.name], capture_output=True,
                              text=True).stdout

    def keys(self, *keys: str) -> None:
        for k in keys:
            subprocess.run([*TMUX, "send-keys", "-t", self.name, k], check=True)
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
        return subprocess.run([*TMUX, "has-session", "-t", self.name], capture_output=True).returncode == 0

    def kill(self) -> None:
        subprocess.run([*TMUX, "kill-session", "-t", self.name], capture_output=True)


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
        term.keys("#0", "Enter")
        # the prompt gone before the next keys: sent with Enter, a loaded machine let them reach the prompt's input
        term.wait_for("1 Timeline", gone="go to: a time")
        term.keys("2", "]")
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


# -- the Pipeline tab's schedule grid (issue 40) --------------------------------------------------------------

def _grid_rows(screen: str, labels: tuple[str, ...]) -> list[str]:
    return [line.strip() for line in screen.splitlines() if line.strip().startswith(labels)]


GRID = ("r0 s0", "r1 s1", "s0 ", "s1 ")


def _grid_screen(term: Tmux, text: str, timeout: float = 30) -> str:
    """The screen once `text` and every row of the grid (measured and textbook) are on it (a loaded machine may
    show the text a frame before the grid's last rows), else as it is at the timeout, for the asserts to show."""
    deadline = time.monotonic() + timeout
    while True:
        screen = term.wait_for(text, timeout)
        if all(_grid_rows(screen, (label,)) for label in GRID) or time.monotonic() > deadline:
            return screen
        time.sleep(0.2)


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (200, 50)])
def test_the_pipeline_tab_of_a_pipelining_job(traced, size):
    """torch.distributed.pipelining's 1F1B on 2 ranks, 4 iterations: tab 3 draws the grid of the playhead's
    iteration with its measured and textbook bubble; ] steps to the next iteration."""
    trace = traced("pp_schedules.py", nproc=2, args=["--schedule=1f1b"], summaries="off")
    term = Tmux(f"{sys.executable} -m disttrace view {trace}", *size)
    try:
        term.wait_for("1 Timeline")
        term.keys("3")
        screen = _grid_screen(term, "Iteration 1 of 4")
        assert "1F1B, P = 2, M = 4. Bubble" in screen.replace("\n ", " ") and "measured" in screen, screen
        assert "(P−1)/(M+P−1)" in screen and "20.0%" in screen, screen
        rows = _grid_rows(screen, ("r0 s0", "r1 s1"))
        assert len(rows) == 2, screen
        for row in rows:  # every micro-batch's forward and backward on both stages, the bubble between
            assert all(f"{k}{mb}" in row for k in "FB" for mb in range(4)) and "░" in row, screen
        assert _grid_rows(screen, ("s0 ", "s1 "))[:2], screen  # the textbook grid under it
        term.keys("]")
        screen = _grid_screen(term, "Iteration 2 of 4")
        assert len(_grid_rows(screen, ("r0 s0", "r1 s1"))) == 2, screen
    finally:
        term.kill()


@pytest.fixture(scope="module")
def pipeline_demo(tmp_path_factory):
    from harness import demo_once

    out, proc = demo_once(tmp_path_factory, "pipeline-parallel", "--no-view")  # (tests/demos runs it too)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


# (quiet: the grid's shape is the demo's timing; run starved, at idle CPU weight beside the quiet jobs, its stage 1
# started 300 ms late, and at 80 columns its cells narrowed to "3" where "B3" is asked)
@pytest.mark.quiet
@pytest.mark.parametrize("size", [(80, 24), (100, 30), (200, 50)])
def test_the_pipeline_demo_opens_on_its_grid(pipeline_demo, size):
    """The demo's trace opens on the Pipeline tab: its narration above the grid of GPipe's iteration, n steps the
    messages (the grid follows), ] goes to 1F1B's."""
    term = Tmux(f"{sys.executable} -m disttrace view {pipeline_demo}", *size)
    try:
        screen = _grid_screen(term, "Iteration 1 of 2")
        assert "GPipe, P = 2, M = 4. Bubble" in screen.replace("\n ", " "), screen
        assert "(P−1)/(M+P−1)" in screen and "20.0%" in screen, screen
        assert "GPipe, forward of micro-batch 0" in screen, screen  # the first message's narration
        rows = _grid_rows(screen, ("r0 s0", "r1 s1"))
        assert len(rows) == 2 and all("F0" in r and "B3" in r for r in rows), screen
        term.keys("]")
        screen = term.wait_for("Iteration 2 of 2")
        assert "1F1B, P = 2, M = 4" in screen.replace("\n ", " ") and "1F1B, forward of micro-batch 0" in screen, screen
    finally:
        term.kill()
