"""Benchmark: the viewer on a large synthetic trace, as ratios to merely parsing its JSON with orjson.

    python benchmarks/bench_tui.py [--events 1000000] [--ranks 64] [--file PATH] [--size 160x50] [--memory-limit 4G]

Measured side by side in one run:
- the yardstick: orjson.loads of every line of the events file, nothing kept (issue 19); the ratios are to it;
- first frame: from starting the app (headless, loading in its worker behind the progress bar: reader, analysis,
  store) to the first full frame of the timeline; goal: <= 1x the yardstick on a first open, <= 0.5 s on a
  re-open (the median of three), and <= 1 s for `disttrace view`'s re-open from its process start (the median of
  five: the interpreter and the imports included; --reopen-only N times only that). On a first open that is the trace's head (its first seconds, read while the rest
  is: data/store/head.py), and the whole trace's first frame is timed too, as are keys on the head meanwhile (from 0.5 s
  after its first frame, as after loading);
- analysis views ready (goal: <= 2x the yardstick): on the first open, and on a re-open, which opens the saved
  analysis as the first view of a trace that `disttrace run` stored does (its end stores and analyses it). The split
  (load / analyze / store) is printed too;
- frames: each navigation key (zoom +/-, pan h/l and arrows, rank j/k and arrows, event n/p), timed from the
  driver handing the key over to the frame that repaints the timeline (the wait for the 60 Hz frame timer
  included; goal: < 50 ms), to the frame that shows the detail pane, and the CPU time the process spent on
  the key; and the cold cost of drawing every visible timeline line with its caches empty;
- keys while the analysis runs in its worker thread (zoomed in, so that pans move), timed the same way;
- memory: the app process's resident memory once the trace is open (0.5 s after its analysis is on screen), an
  event's share of it, and what one more event costs (against the same run on a trace of 10,000 events: the
  libraries and the screen; goal <= 150 B); the largest peak of its child processes (the first read's workers, a
  large trace's first analysis: analysis/engine/child_process.py) apart; with
  --memory-limit, each run is made in a memory cgroup of that size (memlimit.py: the whole process tree, the
  page cache of the mapped store counted but reclaimable, as on a machine with that much memory), and whether it
  completed is printed (goal at 10M events: within 4 GB).
The app runs in a child process so that its memory is its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).parent))


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: a mapped file's pages included)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class ChildrenPeak:
    """The largest peak resident memory (VmHWM) of this process's children and theirs, sampled every 0.2 s from a
    thread while they run: the first read's workers, and a large trace's first analysis (analysis/engine/child_process.py), made
    in processes whose memory is not the app's. (getrusage's RUSAGE_CHILDREN cannot say it: a child's exec keeps
    the high-water mark of the process it was forked from, the app's own.)"""

    def __init__(self):
        import threading

        self.mb = 0.0
        self._stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def stop(self) -> float:
        self._stop.set()
        return self.mb

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            for pid in _descendants(os.getpid()):
                try:
                    with open(f"/proc/{pid}/status") as f:
                        for line in f:
                            if line.startswith("VmHWM:"):
                                self.mb = max(self.mb, int(line.split()[1]) / 1024)
                except OSError:  # (ended meanwhile)
                    pass


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


class FrameClock:
    """Times a key from the moment the driver hands it over to the end of the first frame written to the terminal
    that repainted the timeline (and, apart, to the last frame that repainted the detail pane): wrappers on the
    app's `_display` and on two widgets' `render_lines`, nothing else. Pilot's press-and-wait cannot time this: it
    waits for the process to be idle, which it is not while a thread computes (it gives up after a second,
    twice a key), and the callbacks it posts to every widget to find out cost ~30 ms a key themselves."""

    def __init__(self, app, timeline, detail) -> None:
        self.key_t = 0.0
        self.timeline_s: float | None = None
        self.detail_s: float | None = None
        self._rendered: set[str] = set()
        display = app._display

        def timed_display(screen, update):
            display(screen, update)
            if "timeline" in self._rendered and self.timeline_s is None:
                self.timeline_s = time.perf_counter() - self.key_t
            if "detail" in self._rendered:
                self.detail_s = time.perf_counter() - self.key_t
            self._rendered.clear()

        app._display = timed_display
        for name, widget in (("timeline", timeline), ("detail", detail)):
            def render_lines(crop, _render=widget.render_lines, _name=name):
                self._rendered.add(_name)
                return _render(crop)
            widget.render_lines = render_lines

    async def press(self, app, key: str, settle_s: float = 0.25) -> tuple[float | None, float | None, float]:
        """(seconds to the timeline's frame, to the detail pane's, CPU seconds of this process meanwhile)."""
        from textual import events

        await asyncio.sleep(0.02)  # whatever the last key left to do is done
        event = events.Key(key, key if len(key) == 1 else None)
        event.set_sender(app)
        self.timeline_s = self.detail_s = None
        self._rendered.clear()
        cpu = time.process_time()
        self.key_t = time.perf_counter()
        app._driver.send_message(event)
        await asyncio.sleep(settle_s)
        return self.timeline_s, self.detail_s, time.process_time() - cpu


async def _app_run(path: str, size: tuple[int, int]) -> dict:
    from disttrace.tui.app import DisttraceApp
    from disttrace.tui.screens.viewer import ViewerScreen
    from disttrace.tui.widgets.detail import DetailPane
    from disttrace.tui.widgets.timeline import Timeline

    stages: dict[str, float] = {}
    children = ChildrenPeak()
    t0 = time.perf_counter()
    app = DisttraceApp([path])
    # the first frame: the first one written to the terminal after the timeline drew its lines (waiting for the
    # app to be idle would wait for the analysis worker too, which holds the GIL now and then); on a first open of
    # a large trace that is its head's (data/store/head.py), and the whole trace's comes later: both timed
    drawn: set[str] = set()
    written, whole = [], []
    render_lines = Timeline.render_lines

    def timed_render_lines(self, crop):
        drawn.add("whole" if getattr(self.screen, "head", None) is None else "head")
        return render_lines(self, crop)

    display = app._display

    def timed_display(screen, update):
        display(screen, update)
        if drawn and not written:
            written.append(time.perf_counter() - t0)
        if "whole" in drawn and not whole:
            whole.append(time.perf_counter() - t0)

    own = "render_lines" in Timeline.__dict__
    Timeline.render_lines = timed_render_lines
    app._display = timed_display
    reading, head = [], {}  # keys on the head while the rest is read; the head's size
    async with app.run_test(size=size) as pilot:
        while not written:
            await asyncio.sleep(0.005)
        first = written[0]
        if not whole and isinstance(app.screen, ViewerScreen) and app.screen.head is not None:
            screen = app.screen
            head = {"events": screen.store.n_events, "fraction": screen.head, "span_s": screen.store.span_ns / 1e9}
            clock = FrameClock(app, screen.query_one(Timeline), screen.query_one(DetailPane))
            await asyncio.sleep(0.5)  # as after loading: the timeline draws ahead what the next keys will show
            for key in ["plus"] * 3 + ["l", "h"] * 50:
                if app.screen is not screen or whole:
                    break
                frame, _, _ = await clock.press(app, key, settle_s=0.1)
                if frame is not None and app.screen is screen:
                    reading.append(frame)
        while not whole:
            await asyncio.sleep(0.005)
        if own:
            Timeline.render_lines = render_lines
        else:
            del Timeline.render_lines
        app._display = display
        while not isinstance(app.screen, ViewerScreen):
            await asyncio.sleep(0.01)
        await pilot.pause()
        timeline = app.screen.query_one(Timeline)
        while not timeline.size.height:
            await pilot.pause()
        rss = rss_mb()
        store = app.screen.store
        clock = FrameClock(app, timeline, app.screen.query_one(DetailPane))
        during = []  # keys while the analysis runs in the background (zoomed in: at zoom 0 a pan moves nothing)
        for key in ["plus"] * 3 + ["l", "h"] * 8:
            if store.analysed:
                break
            frame, _, _ = await clock.press(app, key, settle_s=0.1)
            if frame is not None:
                during.append(frame)
        while not store.analysed:
            await asyncio.sleep(0.05)
        analysed = time.perf_counter() - t0
        await asyncio.sleep(0.5)
        rss_full = rss_mb()  # (settled: the worker gives back what the first frame's lanes held once replaced)
        frames: dict[str, list[tuple]] = {}
        keys = (["minus"] * 3 + ["plus"] * 6 + ["l", "l", "h", "j", "j", "k", "right", "left"] + ["minus"] * 3
                + ["plus"] * 8 + ["l", "h"] * 3 + ["j", "k", "down", "up"] * 2 + ["n", "p"] * 3)
        for key in keys:
            frames.setdefault(key, []).append(await clock.press(app, key))
        # the cold cost of one timeline frame: every visible line with empty caches
        cold = []
        for _ in range(5):
            timeline._chunks.clear()
            timeline._segments.clear()
            t = time.process_time()
            for y in range(timeline.size.height):
                timeline.render_line(y)
            cold.append(time.process_time() - t)
            await clock.press(app, "l")
    return {"during_s": during, "first_frame_s": first, "whole_s": whole[0], "head": head, "reading_s": reading,
            "analysed_s": analysed, "rss_mb": rss, "rss_full_mb": rss_full,
            "peak_rss_mb": peak_rss_mb(), "children_peak_mb": children.stop(),
            "frames": frames, "cold_frame_s": cold,
            "events": store.n_events, "ranks": len(store.rows), "stages": stages}


def _child(path: str, size: tuple[int, int]) -> None:
    # also time the stages the worker runs, in this same process before the app (for the split)
    out = asyncio.run(_app_run(path, size))
    print(json.dumps(out))


def _cli_child(path: str, size: tuple[int, int], spawned: float) -> None:
    """`disttrace view PATH` as a user starts it (the command's own entry point, imports and all, in its order),
    headless, timed from `spawned` (the parent's wall clock just before it started this process) to the first frame
    written after the timeline drew; then the process ends at once. Prints {"first_frame_s", "app_s": when the app
    started to run (the viewer imported, the input checked), "show_s": when the viewer's screen was begun (the
    store ready), "ahead_s": when the store opened ahead was (loading.StoredAhead; none in older code)}. The hooks are the ones _app_run's first frame uses,
    put on each module as it is imported (importing it here first would change what the command overlaps)."""
    marks: dict[str, float] = {}
    drawn = []

    def on_textual_app(m) -> None:
        run, display = m.App.run, m.App._display

        def headless_run(self, *args, **kwargs):
            marks["app_s"] = time.time() - spawned
            return run(self, headless=True, size=size)

        def timed_display(self, screen, update):
            display(self, screen, update)
            if drawn and "first_frame_s" not in marks:
                marks["first_frame_s"] = time.time() - spawned
                print(json.dumps(marks), flush=True)
                os._exit(0)  # (the analysis' load that follows is not timed here)
        m.App.run, m.App._display = headless_run, timed_display

    def on_timeline(m) -> None:
        render_lines = m.Timeline.render_lines

        def timed_render_lines(self, crop):
            drawn.append(True)
            return render_lines(self, crop)
        m.Timeline.render_lines = timed_render_lines

    def on_viewer_app(m) -> None:
        m.no_terminal = lambda: None  # (headless: no terminal is needed)
        show = m.DisttraceApp._show

        def timed_show(self, *args, **kwargs):
            marks.setdefault("show_s", time.time() - spawned)
            return show(self, *args, **kwargs)
        m.DisttraceApp._show = timed_show

    def on_loading(m) -> None:
        if not hasattr(m, "StoredAhead"):  # (older code)
            return
        opened = m.StoredAhead._open

        def timed_open(self, *args):
            opened(self, *args)
            marks["ahead_s"] = time.time() - spawned
        m.StoredAhead._open = timed_open

    sys.meta_path.insert(0, _AfterImport({"textual.app": on_textual_app, "disttrace.tui.widgets.timeline": on_timeline,
                                          "disttrace.tui.app": on_viewer_app, "disttrace.tui.loading": on_loading}))
    from disttrace.tracer import cli

    cli.main(["view", path])


class _AfterImport:
    """A meta path finder that calls hooks[name](module) once the module `name` has been executed."""

    def __init__(self, hooks: dict) -> None:
        self.hooks = hooks

    def find_spec(self, name, path, target=None):
        import importlib.util

        hook = self.hooks.pop(name, None)
        if hook is None:
            return None
        spec = importlib.util.find_spec(name)
        loader = spec.loader

        class Loader:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                hook(module)
        spec.loader = Loader()
        return spec


def _ensure_store(path: str, size: tuple[int, int]) -> None:
    """The trace's store and saved analysis, valid for the code this process imports: written by a first open in
    the viewer (as a stored trace's are) when they are not."""
    from disttrace.tracer.data.store import cache, codec

    try:
        codec.read_store(cache.cache_path([path], None, False), cache.fingerprint([path], None, [path])[0])
        return
    except (codec.StoreError, OSError):
        pass
    for f in (cache.StoreOrigin(cache.cache_path([path], None, False), {}).beside("analysis"),):
        if os.path.exists(f):
            os.unlink(f)
    asyncio.run(_app_run(path, size))


def _code_env(commit: str | None) -> dict:
    """The environment of a child that imports `commit`'s disttrace (None: this tree's): its files, extracted once
    by git archive into the temp dir, first on the path (before the editable install's finder)."""
    env = dict(os.environ)
    if commit is None:
        return env
    home = Path(tempfile.gettempdir()) / f"disttrace-archive-{commit}"
    if not (home / "disttrace").exists():
        repo = Path(__file__).resolve().parent.parent
        (home / "disttrace").mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(repo), "archive", commit], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(home / "disttrace")], input=archive, check=True)
    _compiled(home / "disttrace")
    env["PYTHONPATH"] = os.pathsep.join([str(home), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _compiled(root: Path) -> None:
    """Every module under `root`'s tracer/ and tui/ compiled to bytecode, as an installed package's are (where
    PYTHONDONTWRITEBYTECODE is set, an import would compile its source again every time)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "tracer"), str(root / "tui")], check=True)


def _linked(path: str, commit: str) -> str:
    """A hard link of the trace for `commit`'s code: its own store beside it (each code's store is stale to the
    other's)."""
    root, ext = os.path.splitext(path)
    link = f"{root}.against-{commit}{ext}"
    if not os.path.exists(link):
        os.link(path, link)
    return link


def _stages(path: str) -> dict:
    from disttrace.tui import loading
    from disttrace.tui.model.store import TraceStore
    from disttrace.tracer.analysis import analyze

    r0 = rss_mb()
    t = time.perf_counter()
    table = loading.read_table([path])
    load = time.perf_counter() - t
    r1 = rss_mb()
    t = time.perf_counter()
    analysis = analyze(table, timings={})  # computed (timings: never the analysis saved in the store)
    an = time.perf_counter() - t
    r2 = rss_mb()
    t = time.perf_counter()
    analyze(table)  # the analysis saved in the store (the app's first run saved it)
    saved = time.perf_counter() - t
    t = time.perf_counter()
    TraceStore(table, analysis)
    st = time.perf_counter() - t
    r3 = rss_mb()
    return {"load_s": load, "analyze_s": an, "saved_s": saved, "store_s": st,
            "mem_table_mb": r1 - r0, "mem_analysis_mb": r2 - r1, "mem_store_mb": r3 - r2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--file", help="use (or create) this .jsonl instead of a temporary one")
    ap.add_argument("--size", default="160x50", help="terminal size, COLSxROWS")
    ap.add_argument("--memory-limit", metavar="SIZE", help="run each child in a memory cgroup of SIZE (4G)")
    ap.add_argument("--child", choices=["app", "stages", "cli", "store"], help=argparse.SUPPRESS)
    ap.add_argument("--spawned", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--reopen-only", type=int, metavar="N", help="only time N re-opens, process start included "
                    "(the store is written first if it is missing)")
    ap.add_argument("--against", metavar="COMMIT", help="with --reopen-only: alternate with COMMIT's code (its "
                    "files, from git archive, imported first), on a hard link of the trace (each code its store)")
    ns = ap.parse_args()
    size = tuple(int(v) for v in ns.size.lower().split("x"))
    path = ns.file or os.path.join(tempfile.gettempdir(), f"disttrace_synth_v3_{ns.events}_{ns.ranks}.jsonl")
    if ns.child == "app":
        _child(path, size)
        return
    if ns.child == "store":
        _ensure_store(path, size)
        return
    if ns.child == "cli":
        _cli_child(path, size, ns.spawned)
        return
    if ns.child == "stages":
        print(json.dumps(_stages(path)))
        return
    from memlimit import MemoryLimit, parse_size
    from synth import date_back, ensure_synthetic, fresh_store, time_parse, time_yardstick

    ensure_synthetic(path, ns.events, ns.ranks)

    def cli_reopen(file: str = path, env: dict | None = None) -> dict:
        """`disttrace view` re-opening the stored trace, from its process start to its first frame."""
        spawned = time.time()
        proc = subprocess.run([sys.executable, __file__, "--file", file, "--size", ns.size, "--child", "cli",
                               "--spawned", repr(spawned)], capture_output=True, text=True, env=env)
        if proc.returncode:
            sys.exit(f"cli run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def cli_line(runs: list[dict]) -> str:
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        ahead = f", the store opened ahead at {med['ahead_s']:.2f} s" if "ahead_s" in med else ""
        return (f"first frame, re-open, process   {med['first_frame_s']:7.2f} s   (goal <= 1 s; `disttrace view` from "
                f"its process start, the median of {', '.join(format(r['first_frame_s'], '.2f') for r in runs)} s; "
                f"medians: the app ran at {med['app_s']:.2f} s (the interpreter, the viewer's imports){ahead}, its "
                f"screen begun at {med['show_s']:.2f} s)")

    if ns.reopen_only:
        # the store, valid for the code that opens it: else written (and analysed) by a first open of that code
        _compiled(Path(__file__).resolve().parent.parent)
        date_back(path)  # (just written: else this code's store was skipped and its "re-opens" were first opens)
        stored_by = {None: path}
        if ns.against:
            stored_by[ns.against] = _linked(path, ns.against)
        for commit, file in stored_by.items():
            subprocess.run([sys.executable, __file__, "--file", file, "--child", "store"], check=True,
                           env=_code_env(commit))
        runs: dict = {commit: [] for commit in stored_by}
        for _ in range(ns.reopen_only):  # alternating: this machine's speed drifts
            for commit, file in stored_by.items():
                runs[commit].append(cli_reopen(file, _code_env(commit)))
        print(cli_line(runs[None]))
        if ns.against:
            print(f"  against {ns.against}: " + cli_line(runs[ns.against]).split("   ", 1)[1])
        return
    parse, n = time_parse(path)
    yards = [time_yardstick(path)]  # measured three times, between the runs: this machine's speed drifts
    fresh_store(path)  # the first app run parses and writes the trace store; the re-open run opens it

    limited: list[str] = []  # what each run did under --memory-limit

    def child(kind: str, what: str, file: str = path) -> dict:
        cmd = [sys.executable, __file__, "--file", file, "--size", ns.size, "--child", kind]
        cage = MemoryLimit.make(parse_size(ns.memory_limit)) if ns.memory_limit else None
        if isinstance(cage, str):
            limited.append(f"{what}: not tested, {cage}")
            cage = None
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=cage and cage.join)
            if cage is not None:
                peak = cage.peak_bytes()
                killed = cage.oom_kills()
                limited.append(f"{what}: {'KILLED for want of memory' if killed else 'completed'}; the cgroup's "
                               f"peak {peak / 2**30:.2f} GB (page cache of the mapped store included)"
                               if peak is not None else f"{what}: {'KILLED' if killed else 'completed'}")
        finally:
            if cage is not None:
                cage.close()
        if proc.returncode:
            print("\n".join(limited))
            sys.exit(f"{kind} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    app = child("app", "the viewer, first open (reading, analysing, keys)")
    yards.append(time_yardstick(path))
    # three re-opens, the median's reported: one takes 0.35-0.6 s on this VM, as its speed drifts
    reopens = [child("app", "the viewer, re-open")] + [child("app", f"the viewer, re-open ({k})") for k in (2, 3)]
    reopen = sorted(reopens, key=lambda r: r["first_frame_s"])[1]
    cli_runs = [cli_reopen() for _ in range(5)]
    # the same on a trace of 10,000 events: what the process holds whatever the trace (the libraries, Textual's
    # screen), so that what each event costs is told apart from it
    small = os.path.join(tempfile.gettempdir(), f"disttrace_synth_v3_10000_{ns.ranks}.jsonl")
    ensure_synthetic(small, 10_000, ns.ranks)
    fresh_store(small)
    base = [child("app", "the viewer on 10,000 events, first open", small),
            child("app", "the viewer on 10,000 events, re-open", small)]
    stages = child("stages", "the stages measured apart (load, analyze, store)")
    yards.append(time_yardstick(path))
    yard = statistics.median(yards)
    first = app["first_frame_s"]
    print(f"trace: {n:,} events, {app['ranks']} ranks ({path}); terminal {ns.size}")
    print(f"yardstick (orjson, none kept)   {yard:7.2f} s   (the median of {', '.join(f'{y:.2f}' for y in yards)} s, "
          "measured between the runs; the ratios are to it)")
    if parse is not None:  # (not at 10M events: it would keep ~40 GB of dicts)
        print(f"parse (orjson, all kept)        {parse:7.2f} s")
    head = app["head"]
    if head:
        print(f"first frame, first open         {first:7.2f} s   = {first / yard:.2f}x the yardstick (goal <= 1x; the "
              f"trace's head: its first {head['span_s'] * 1e3:.0f} ms, {head['events']:,} events, {head['fraction']:.1%} of "
              f"its bytes, while the rest is read)")
    print(f"whole trace on screen, 1st open {app['whole_s']:7.2f} s   = {app['whole_s'] / yard:.2f}x the yardstick "
          f"(parses and writes the trace store)")
    print(f"first frame, re-open            {reopen['first_frame_s']:7.2f} s   = "
          f"{reopen['first_frame_s'] / yard:.2f}x the yardstick (goal <= 0.5 s; from the store; the median of "
          f"{', '.join(format(r['first_frame_s'], '.2f') for r in reopens)} s), "
          f"RSS {reopen['rss_mb']:.0f} MB at the first frame")
    print(cli_line(cli_runs))
    print(f"analysis views ready, 1st open  {app['analysed_s']:7.2f} s   = {app['analysed_s'] / yard:.2f}x the "
          "yardstick (goal <= 2x; the analysis, made in a child process, follows the whole trace's first frame)")
    print(f"analysis views ready, re-open   {reopen['analysed_s']:7.2f} s   = {reopen['analysed_s'] / yard:.2f}x the "
          "yardstick (goal <= 2x; the saved analysis: what the first view of a trace that `disttrace run` wrote opens, "
          "its end having stored and analysed it)")
    print(f"  of which, measured apart:     load {stages['load_s']:.2f} s ({stages['load_s'] / yard:.2f}x), "
          f"analyze {stages['analyze_s']:.2f} s ({stages['analyze_s'] / yard:.2f}x; goal <= 2x; "
          f"{stages['saved_s']:.2f} s to read it saved), "
          f"store {stages['store_s']:.2f} s ({stages['store_s'] / yard:.2f}x)")

    def ms(ts) -> str:
        return f"median {statistics.median(ts) * 1e3:6.1f} ms, worst {max(ts) * 1e3:6.1f} ms" if ts else "—"

    if app["reading_s"]:
        print(f"a key on the head, rest reading {ms(app['reading_s'])} ({len(app['reading_s'])} keys, key to frame)")
    if app["during_s"]:
        print(f"a key while analysing (zoom/pan) {ms(app['during_s'])} ({len(app['during_s'])} keys, key to frame)")
    frames = app["frames"]
    timeline = [f[0] for fs in frames.values() for f in fs if f[0] is not None]
    print(f"key -> timeline frame           {ms(timeline)} (goal < 50 ms; from the driver handing the key over "
          "to the frame written, the wait for the 60 Hz frame timer included)")
    print("    key     key -> timeline frame               detail pane shown   CPU time of the process per key")
    for key, fs in frames.items():
        tl = [f[0] for f in fs if f[0] is not None]
        dp = [f[1] for f in fs if f[1] is not None]
        cpu = [f[2] for f in fs]
        print(f"    {key:6s}  {ms(tl)}  {'median %6.1f ms' % (statistics.median(dp) * 1e3) if dp else '(unchanged)    '}  "
              f"{ms(cpu)}  ({len(fs)})")
    cpu = [f[2] for fs in frames.values() for f in fs]
    print(f"  CPU time per key (all)        {ms(cpu)} (everything a key causes, the detail pane included)")
    cold = app["cold_frame_s"]
    print(f"timeline lines, cold cache      median {statistics.median(cold) * 1e3:6.1f} ms, "
          f"worst {max(cold) * 1e3:6.1f} ms CPU (every visible lane drawn from scratch)")
    print(f"memory (app process RSS)        {app['rss_mb']:7.0f} MB at the first frame, {app['rss_full_mb']:.0f} MB "
          f"analysed; of which table {stages['mem_table_mb']:.0f} MB, analysis {stages['mem_analysis_mb']:.0f} MB, "
          f"viewer store {stages['mem_store_mb']:.0f} MB")
    per = {k: r * 2**20 / max(n, 1) for k, r in (("first", app["rss_full_mb"]), ("again", reopen["rss_full_mb"]))}
    print(f"memory an event                 {per['first']:7.0f} B analysed on the first open, {per['again']:.0f} B on a "
          "re-open (the whole process, its libraries included)")
    n_base = base[0]["events"]
    more = [(big["rss_full_mb"] - small_run["rss_full_mb"]) * 2**20 / max(n - n_base, 1)
            for big, small_run in ((app, base[0]), (reopen, base[1]))]
    print(f"  what one more event costs     {more[0]:7.0f} B on the first open, {more[1]:.0f} B on a re-open (goal <= "
          f"150 B; against the same on {n_base:,} events: {base[0]['rss_full_mb']:.0f} MB first open, "
          f"{base[1]['rss_full_mb']:.0f} MB re-open)")
    print(f"peak RSS (VmHWM)                {app['peak_rss_mb']:7.0f} MB first open, {reopen['peak_rss_mb']:.0f} MB "
          "re-open (the mapped store's pages included); of its child processes (the first read's workers, the "
          f"first analysis), the largest {app['children_peak_mb']:.0f} MB (sampled)")
    if ns.memory_limit:
        print(f"in a {ns.memory_limit} memory cgroup each (goal at 10M events: completes within 4 GB):")
        for line in limited:
            print("    " + line)


if __name__ == "__main__":
    main()
