"""Snapshots of a job whose store counts again: a second world (a new process group, torchrun restarting its
workers after a failure) numbers its snapshots after the first world's on disk, so that the failure's snapshot is
never overwritten nor mixed with a later one; the ranks of one node agree on the number."""

from __future__ import annotations

import orjson
import torch.distributed as dist

from disttrace.tracer import blackbox_files
from disttrace.tracer.format import SNAPSHOT_INFO, SNAPSHOTS_DIR
from disttrace.tracer.record import snapshots


def _take(out, store, reason: str, files: dict) -> str:
    """A rank's snapshot as the black box takes it: asked through the store, written by each rank (here: one
    rank per process, each its own view of the earlier worlds: blackbox_files._AFTER cleared between them)."""
    _, info = snapshots.request(store, reason, 0)
    paths = set()
    for name, data in files.items():
        blackbox_files._AFTER.clear()
        paths.add(blackbox_files.write_snapshot(str(out), info, {name: data}, keep=8))
    (path,) = paths  # every rank's copy in one directory
    return path


def test_a_second_world_numbers_its_snapshots_after_the_first_s(tmp_path):
    ranks = {"rank-00000-h-1.ring": b"a", "rank-00001-h-2.ring": b"b"}
    first = dist.HashStore()
    assert _take(tmp_path, first, "signal", ranks).endswith("000001-signal")
    assert _take(tmp_path, first, "hang", ranks).endswith("000002-hang")
    again = dist.HashStore()  # the restarted workers' store counts from 1
    restarted = {"rank-00000-h-3.ring": b"c", "rank-00001-h-4.ring": b"d"}
    later = _take(tmp_path, again, "hang", restarted)
    assert later.endswith("000003-hang"), later
    root = tmp_path / SNAPSHOTS_DIR
    assert sorted(p.name for p in (root / "000002-hang").iterdir() if p.suffix == ".ring") == list(ranks)  # untouched
    assert sorted(p.name for p in (root / "000003-hang").iterdir() if p.suffix == ".ring") == list(restarted)
    info = orjson.loads((root / "000003-hang" / SNAPSHOT_INFO).read_bytes())
    assert info["seq"] == 1 and info["number"] == 3 and info["world"] != orjson.loads(
        (root / "000001-signal" / SNAPSHOT_INFO).read_bytes())["world"]
    assert _take(tmp_path, again, "signal", restarted).endswith("000004-signal")


def test_a_world_token_read_from_the_store_is_only_digits_and_dashes():
    assert snapshots._token("1795955031993963500-4242") == "1795955031993963500-4242"
    assert snapshots._token("../../etc") is None and snapshots._token(7) is None
