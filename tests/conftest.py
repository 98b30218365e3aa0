"""Shared fixtures: real traced torchrun jobs, made once per test session and shared across tests.

Starting torchrun costs seconds (every rank imports torch), so tests ask the session-scoped `traced`
factory for a trace of a job script in tests/jobs/; the same (script, nproc, args, options) is traced once.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from harness import Traces, run_folder

# The suite keeps its bytecode (__pycache__/, ignored by git) even where PYTHONDONTWRITEBYTECODE is set, as on this
# project's machines: otherwise every run, and every worker of a parallel run, rewrites the asserts of every test
# module and compiles the package again (most of collecting the fast loop). The processes the tests start keep theirs
# too: each rank of each job would compile the recorder's modules, each `disttrace report` the analysis'
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# The tests lie in folders that mirror the code (record/, data/, analysis/ and its groups, commands/, tui/, demos/). pytest imports
# each test module by its file name (no __init__.py: names are unique across the folders), and a few import helpers
# from another folder's module (test_store's `age`, test_schedule's `gpipe_sync`): every test folder is on the path,
# after the one pytest puts first for the module it imports.
for _folder in sorted({p.parent for p in Path(__file__).parent.rglob("test_*.py")}):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


@pytest.fixture(scope="session")
def traced(tmp_path_factory):
    """traced(script, nproc=2, args=(), summaries="full", run_args=(), expect_rc=0) -> Path of the trace dir:
    tests/jobs/SCRIPT traced under torchrun once per run per distinct call (harness.Traces), the xdist workers'
    runs shared."""
    return Traces(run_folder(tmp_path_factory))


# -- timing-sensitive tests: the quiet run ---------------------------------------------------------------------
# Their ground truths are runs made in pairs at one pace (tests/pairs.py) or waits measured within tolerances: on
# a machine that the parallel workers share they miss more often. Marked `quiet` here, they run one at a time, in a
# pytest run of their own, beside the parallel run of the rest held at idle CPU weight where a cgroup allows, else
# after it (the README's test command, tests/run_suite.py: `pytest -m quiet`, `pytest -n 2 -m "not quiet"`). A
# module whose truths are only partly of timing marks those tests itself (`@pytest.mark.quiet`: test_verdicts.py,
# test_diff.py, test_critical_path.py, test_schedule_real.py).
QUIET = {"analysis/causal/test_attribution_truth.py", "analysis/test_analysis_real.py",
         "analysis/waits/test_whole_run_real.py",  # (a straggler's 40 ms sleep: the aggregates' ground truth)
         # a profiler-traced job's clocks fitted on its collectives' exits, against the recorder's ping-pong: beside
         # the other worker's jobs, 3 ranks on 2 cores left exits skewed past the fit's own uncertainty (twice in
         # fresh clones' parallel runs: rank 2 fitted 2.0 ms off with 1.2 ms of uncertainty, and a report
         # that exited 1)
         "data/test_kineto.py"}


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        try:
            where = item.path.relative_to(here).as_posix()
        except ValueError:
            continue
        if where in QUIET:
            item.add_marker(pytest.mark.quiet)
    # The longest modules first, so that the two workers end together: `-n 2 --dist loadscope` hands a worker the
    # next module when it has 2 tests left. The viewer's modules (their app sessions make them the longest of the
    # fast loop) first, then the others by their number of tests, most first (xdist's own order, which alone put the
    # viewer's few long tests in the middle and left the workers 7 s apart at the end).
    tests_in = Counter(item.path for item in items)
    items.sort(key=lambda item: (not item.path.is_relative_to(here / "tui"),
                                 0 if item.path.is_relative_to(here / "tui") else -tests_in[item.path]))


def pytest_configure(config):
    # (the order above, not xdist's, in the loop: see pytest_collection_modifyitems; the full suite, whose time is its
    # jobs', keeps the order it was measured in)
    if getattr(config.option, "loadscopereorder", False) and _is_the_contributors_loop(config):
        config.option.loadscopereorder = False


# -- the fast loop starts no process ----------------------------------------------------------------------------
# `pytest -m "not slow"` is the contributors' loop: a test that starts torchrun, tmux or any child process
# (subprocess, multiprocessing, `python -m disttrace` as a process) is marked `slow`. Outside `slow` tests every way
# of starting one fails the test, in its fixtures too (a session fixture that runs a job is set up inside the first
# test that asks for it).
import _posixsubprocess  # noqa: E402
import subprocess  # noqa: E402

_STARTERS = [(subprocess, "_fork_exec"), (_posixsubprocess, "fork_exec"), (os, "fork"), (os, "forkpty"),
             (os, "posix_spawn"), (os, "posix_spawnp"), (os, "system")]
_STARTED = pytest.StashKey[list]()


def _process_started(what: str, started: list):
    def refuse(*args, **kwargs):
        started.append(what)
        raise pytest.fail.Exception(f"a test not marked slow started a process ({what}): mark it "
                                    "@pytest.mark.slow, or give it what the process made (tests/data, tests/tui/data)")
    return refuse


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.get_closest_marker("slow") is not None:
        yield
        return
    started: list = []
    saved = [(mod, name, getattr(mod, name)) for mod, name in _STARTERS if hasattr(mod, name)]
    for mod, name, _ in saved:
        setattr(mod, name, _process_started(f"{mod.__name__}.{name}", started))
    item.stash[_STARTED] = started
    try:
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)



@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A process refused where the code under test swallowed the failure still fails the test."""
    outcome = yield
    started = item.stash.get(_STARTED, None)
    report = outcome.get_result()
    if started and report.when == "call" and report.passed:
        report.outcome = "failed"
        report.longrepr = f"a test not marked slow started a process: {', '.join(started)}"


# -- the viewer driven by keys (Textual's Pilot) ----------------------------------------------------------------
# Pilot.press waits after each key until the process's CPU time stops advancing (textual._wait.wait_for_idle: a
# 20 ms sleep at least, twice a key, up to 1 s each while anything runs), and pause() once more. The tests wait for
# what a key does instead: every message pump of the app (the app, its screens, their widgets) has handled all
# it was sent, what that posted and the callbacks it scheduled, seen so on a few turns of the event loop in a row;
# press() then waits for the screen as before (Pilot._wait_for_screen). Work in threads (the app's workers) and
# timers is not waited for by either: a test that needs it waits for its result (tui_helpers.wait_until).
# And the timeline draws nothing ahead (Timeline._plan_ahead, on a timer after each change of view) unless a test
# is marked draws_ahead: drawing ahead changes no cell on screen, only how soon a later key finds its lanes.
import asyncio  # noqa: E402
import time  # noqa: E402

SETTLED_TURNS = 3  # turns of the event loop in a row with nothing left to handle
UPDATES = 10  # screen refreshes made by one wait at most


def _pumps(app) -> list:
    pumps = [app]
    for screen in app.screen_stack:
        pumps += list(screen.walk_children(with_self=True))
    return pumps


def _busy(pump) -> bool:
    """A pump whose task runs is idle when it waits for its next message (textual._queue.Queue.get) with none
    queued and no callback due; else it is handling one."""
    task = getattr(pump, "_task", None)
    if task is None or task.done():
        return False
    queue = pump._message_queue
    return bool(queue.values or not queue.ready_event._waiters or pump._next_callbacks)


def _update_due(app) -> bool:
    """Whether the screen has a refresh waiting for its update timer (layout, repaint, callbacks after refresh)."""
    try:
        screen = app.screen
    except Exception:  # no screen (yet, or any more)
        return False
    return not app._batch_count and bool(screen._layout_required or screen._scroll_required or
                                         screen._repaint_required or screen._dirty_widgets or
                                         screen._recompose_required or screen._callbacks)


async def settled(min_sleep: float = 0.0, max_sleep: float = 1.0) -> None:
    """textual._wait.wait_for_idle's stand-in: the active app's message pumps have nothing left to handle, and the
    screen's refresh that its update timer would make is made (at most UPDATES times: a widget may always be dirty)."""
    from textual._context import active_app

    app = active_app.get(None)
    deadline = time.monotonic() + max_sleep  # (Textual's bound too)
    quiet = updates = 0
    while quiet < SETTLED_TURNS and time.monotonic() < deadline:
        await asyncio.sleep(0)
        if app is None:
            quiet += 1
        elif any(_busy(p) for p in _pumps(app)):
            quiet = 0
        elif updates < UPDATES and _update_due(app):
            app.screen._on_timer_update()
            updates += 1
            quiet = 0
        else:
            quiet += 1


# -- the frames nobody reads, in the contributors' loop ----------------------------------------------------------
# A headless app draws every frame (the compositor renders each changed widget's lines) and throws it away:
# App._display writes nothing without a terminal. That is some 3 frames a key and a quarter of a viewer test's CPU.
# A run that leaves out the slow tests (the contributors' loop, `-m "not slow"`) skips them: what a test reads off
# the screen (tui_helpers.screen_text, the snapshots) it draws itself, whole, as before, and every view is drawn by
# its snapshot. The full suite (the README's test command) draws every frame as Textual does, so a widget that fails
# to draw in a state no test reads is still found there.
def _skip_unread_frames(refresh):
    def compositor_refresh(screen) -> None:
        app = screen.app
        if app.is_headless and not app.is_inline and screen is app.screen:
            screen._dirty_widgets.clear()  # (their regions stay dirty in the compositor: the next draw draws them)
            app._update_mouse_over(screen)
            return
        refresh(screen)
    return compositor_refresh


def _is_the_contributors_loop(config) -> bool:
    return "not slow" in (config.getoption("markexpr", "") or "")


@pytest.fixture(autouse=True)
def _pilot_waits_for_the_keys_effect(request, monkeypatch):
    if "textual.app" not in sys.modules:  # (no test module of this session drives an app)
        return
    import textual.app
    import textual.constants
    import textual.pilot
    import textual.screen

    monkeypatch.setattr(textual.app, "wait_for_idle", settled)
    monkeypatch.setattr(textual.pilot, "wait_for_idle", settled)
    if _is_the_contributors_loop(request.config):
        monkeypatch.setattr(textual.screen.Screen, "_compositor_refresh",
                            _skip_unread_frames(textual.screen.Screen._compositor_refresh))
    # No animations (TEXTUAL_ANIMATIONS=none, as a user may set): a tab's underline slides over ~20 frames, each a
    # whole screen drawn, and it lands where it would have anyway
    monkeypatch.setattr(textual.constants, "TEXTUAL_ANIMATIONS", "none")
    if request.node.get_closest_marker("draws_ahead") is None and "disttrace.tui.widgets.timeline" in sys.modules:
        from disttrace.tui.widgets.timeline import Timeline

        monkeypatch.setattr(Timeline, "AHEAD_DELAY_S", 1e6)
