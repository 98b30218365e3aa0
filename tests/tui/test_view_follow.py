"""`disttrace view --follow`: a trace that grows while the viewer is open shows its new events, and F keeps the
playhead on the newest one."""

from __future__ import annotations

from pathlib import Path

from disttrace.tui.app import DisttraceApp
from disttrace.tui.screens.viewer import ViewerScreen

DATA = Path(__file__).parent / "data" / "tui_job.jsonl"


async def test_follow_picks_up_new_events_and_f_follows_the_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(DisttraceApp, "FOLLOW_INTERVAL_S", 0.2)
    lines = DATA.read_bytes().splitlines(keepends=True)
    live = tmp_path / "live.jsonl"
    live.write_bytes(b"".join(lines[: len(lines) // 2]))
    app = DisttraceApp([str(live)], follow=True)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if isinstance(app.screen, ViewerScreen):
                break
        assert len(app.store.table) == len(lines) // 2
        with live.open("ab") as f:  # the job writes more
            f.write(b"".join(lines[len(lines) // 2:]))
        for _ in range(100):
            await pilot.pause(0.05)
            if len(app.store.table) == len(lines):
                break
        assert len(app.store.table) == len(lines)
        await pilot.press("F")
        for _ in range(60):
            await pilot.pause(0.05)
            if isinstance(app.screen, ViewerScreen) and app.screen.playhead == len(lines) - 1:
                break
        assert app.follow_newest and app.screen.playhead == len(lines) - 1


def test_follow_waits_for_the_jobs_first_events(tmp_path, monkeypatch):
    """The viewer started with --follow before any rank wrote: it waits (one line on stderr), then opens."""
    import threading

    from disttrace.tui import app as app_module

    monkeypatch.setattr(DisttraceApp, "FOLLOW_INTERVAL_S", 0.2)
    trace = tmp_path / "trace"
    trace.mkdir()  # `disttrace run` made the dir; no rank has written yet
    rank_file = (b'{"k":"meta","v":1,"rank":0,"world_size":1,"host":"h","pid":1}\n'
                 b'{"k":"group","g":0,"name":"0","desc":"default_pg","ranks":[0]}\n'
                 b'{"k":"b","i":0,"op":"barrier","api":"barrier","g":0,"gs":0,"bytes":0,"async":false,"t":1000}\n'
                 b'{"k":"e","i":0,"t":5000}\n')
    threading.Timer(0.5, lambda: (trace / "rank-00000-h-1.jsonl").write_bytes(rank_file)).start()
    store, _narration = app_module._wait_for_first_events([str(trace)])
    assert len(store.table) == 1 and store.table.op[0] == "barrier"
