"""Benchmark: the viewer on a large synthetic trace, as ratios to merely parsing its JSON with orjson.

    python benchmarks/bench_tui.py [--events 1000000] [--ranks 64] [--file PATH] [--size 160x50]

Measured side by side in one run:
- parse: orjson.loads of every line of the events file (the yardstick);
- first frame: from starting the app (headless, loading in its worker behind the progress bar: reader, analysis,
  store) to the first full frame of the timeline; goal: <= 3x parse. The split (load / analyze / store) is
  printed too;
- frames: a key (zoom in/out, pan, next rank) and the repaint it causes, median and worst; goal: < 50 ms;
  and the cold cost of drawing every visible timeline line with its cell cache empty;
- a key while the analysis runs in its worker thread: a pan, timed from the key event to the repaint done. Pilot's
  press cannot time this: it waits for the process to be idle, which it is not while a thread computes (it gives
  up after a second, twice a key); so the key is sent as the driver would and the screen's pending messages and
  repaint are awaited (the same measure once analysed is printed beside it);
- memory: the app process's resident memory once the trace is open (goal: low hundreds of MB).
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


async def _key_to_repaint(app, pilot, key: str) -> float:
    """Seconds from a key event to its effects processed and the screen repainted, without waiting for the process
    to be idle (see the module doc)."""
    from textual import events

    t = time.perf_counter()
    event = events.Key(key, key if len(key) == 1 else None)
    event.set_sender(app)
    app._driver.send_message(event)
    for _ in range(3):  # the key, the reactive changes it makes, the refreshes those ask for
        await pilot._wait_for_screen()
    app.screen._on_timer_update()  # the repaint that would follow on the next frame
    return time.perf_counter() - t


async def _app_run(path: str, size: tuple[int, int]) -> dict:
    from disttrace.tui.app import DisttraceApp
    from disttrace.tui.screens.viewer import ViewerScreen
    from disttrace.tui.widgets.timeline import Timeline

    stages: dict[str, float] = {}
    t0 = time.perf_counter()
    app = DisttraceApp([path])
    async with app.run_test(size=size) as pilot:
        while not isinstance(app.screen, ViewerScreen):
            await asyncio.sleep(0.01)
        await pilot.pause()
        timeline = app.screen.query_one(Timeline)
        while not timeline.size.height:
            await pilot.pause()
        first = time.perf_counter() - t0
        rss = rss_mb()
        store = app.screen.store
        during = []  # pans while the analysis runs in the background
        while not store.analysed and len(during) < 20:
            during.append(await _key_to_repaint(app, pilot, "lh"[len(during) % 2]))
            await asyncio.sleep(0.1)
        while not store.analysed:
            await asyncio.sleep(0.05)
        analysed = time.perf_counter() - t0
        rss_full = rss_mb()
        await pilot.pause()
        after = [await _key_to_repaint(app, pilot, "lh"[k % 2]) for k in range(10)]  # the same measure, analysed
        frames: dict[str, list[float]] = {}
        # "x" is bound to nothing: it measures what Pilot's press-and-wait costs by itself, to subtract
        keys = ["x"] * 5 + ["plus"] * 6 + ["l", "l", "h", "j", "j", "k"] + ["minus"] * 3 + ["plus"] * 8 + ["l", "h"] * 3
        cpu: dict[str, list[float]] = {}
        for key in keys:
            t, c = time.perf_counter(), time.process_time()
            await pilot.press(key)
            await pilot.pause()
            frames.setdefault(key, []).append(time.perf_counter() - t)
            cpu.setdefault(key, []).append(time.process_time() - c)
        # the cold cost of one timeline frame: every visible line with empty caches
        cold = []
        for _ in range(5):
            timeline._strips.clear()
            timeline._segments.clear()
            t = time.process_time()
            for y in range(timeline.size.height):
                timeline.render_line(y)
            cold.append(time.process_time() - t)
            await pilot.press("l")
            await pilot.pause()
    return {"during_s": during, "after_s": after, "first_frame_s": first, "analysed_s": analysed, "rss_mb": rss, "rss_full_mb": rss_full,
            "frames": frames, "cpu": cpu, "cold_frame_s": cold,
            "events": store.n_events, "ranks": len(store.rows), "stages": stages}


def _child(path: str, size: tuple[int, int]) -> None:
    # also time the stages the worker runs, in this same process before the app (for the split)
    out = asyncio.run(_app_run(path, size))
    print(json.dumps(out))


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
    analysis = analyze(table)
    an = time.perf_counter() - t
    r2 = rss_mb()
    t = time.perf_counter()
    TraceStore(table, analysis)
    st = time.perf_counter() - t
    r3 = rss_mb()
    return {"load_s": load, "analyze_s": an, "store_s": st,
            "mem_table_mb": r1 - r0, "mem_analysis_mb": r2 - r1, "mem_store_mb": r3 - r2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--file", help="use (or create) this .jsonl instead of a temporary one")
    ap.add_argument("--size", default="160x50", help="terminal size, COLSxROWS")
    ap.add_argument("--child", choices=["app", "stages"], help=argparse.SUPPRESS)
    ns = ap.parse_args()
    size = tuple(int(v) for v in ns.size.lower().split("x"))
    path = ns.file or os.path.join(tempfile.gettempdir(), f"disttrace_synth_{ns.events}_{ns.ranks}.jsonl")
    if ns.child == "app":
        _child(path, size)
        return
    if ns.child == "stages":
        print(json.dumps(_stages(path)))
        return
    from synth import ensure_synthetic, time_parse

    ensure_synthetic(path, ns.events, ns.ranks)
    parse, n = time_parse(path)

    def child(kind: str) -> dict:
        cmd = [sys.executable, __file__, "--file", path, "--size", ns.size, "--child", kind]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"{kind} run failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    app = child("app")
    stages = child("stages")
    first = app["first_frame_s"]
    base = statistics.median(app["frames"].pop("x"))
    keys = [t - base for ts in app["frames"].values() for t in ts]
    cbase = statistics.median(app["cpu"].pop("x"))
    ckeys = [t - cbase for ts in app["cpu"].values() for t in ts]
    print(f"trace: {n:,} events, {app['ranks']} ranks ({path}); terminal {ns.size}")
    print(f"parse (orjson, the yardstick)   {parse:7.2f} s")
    print(f"first full frame (timeline)     {first:7.2f} s   = {first / parse:.2f}x parse (goal <= 3x)")
    print(f"analysis views ready            {app['analysed_s']:7.2f} s   = {app['analysed_s'] / parse:.2f}x parse "
          "(the analysis runs after the first frame)")
    print(f"  of which, measured apart:     load {stages['load_s']:.2f} s ({stages['load_s'] / parse:.2f}x), "
          f"analyze {stages['analyze_s']:.2f} s ({stages['analyze_s'] / parse:.2f}x), "
          f"store {stages['store_s']:.2f} s ({stages['store_s'] / parse:.2f}x)")
    if app["during_s"]:
        during, after = app["during_s"], app["after_s"]
        print(f"a key while analysing (pan)     median {statistics.median(during) * 1e3:6.1f} ms, worst "
              f"{max(during) * 1e3:6.1f} ms ({len(during)} keys); once analysed median "
              f"{statistics.median(after) * 1e3:.1f} ms, worst {max(after) * 1e3:.1f} ms (key event to repaint)")
    print(f"key -> repaint (zoom/pan/rank)  median {statistics.median(keys) * 1e3:6.1f} ms, "
          f"worst {max(keys) * 1e3:6.1f} ms (goal < 50 ms), over an unbound key ({base * 1e3:.0f} ms of Pilot)")
    for key, ts in app["frames"].items():
        print(f"    {key:6s} median {(statistics.median(ts) - base) * 1e3:6.1f} ms  "
              f"worst {(max(ts) - base) * 1e3:6.1f} ms  ({len(ts)})")
    print(f"  CPU time of this process      median {statistics.median(ckeys) * 1e3:6.1f} ms, "
          f"worst {max(ckeys) * 1e3:6.1f} ms (the same keys; less sensitive to a busy machine)")
    cold = app["cold_frame_s"]
    print(f"timeline lines, cold cache      median {statistics.median(cold) * 1e3:6.1f} ms, "
          f"worst {max(cold) * 1e3:6.1f} ms CPU (every visible lane drawn from scratch)")
    print(f"memory (app process RSS)        {app['rss_mb']:7.0f} MB at the first frame, {app['rss_full_mb']:.0f} MB "
          f"analysed; of which table {stages['mem_table_mb']:.0f} MB, analysis {stages['mem_analysis_mb']:.0f} MB, "
          f"viewer store {stages['mem_store_mb']:.0f} MB")


if __name__ == "__main__":
    main()
