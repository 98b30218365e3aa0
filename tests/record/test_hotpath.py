"""The recorder's compiled part (_hotpath.c) beside its pure-Python twin: the same frames give the same results.

callsite.walk is _hotpath.walk where the part is built (CPython 3.11-3.13), callsite.py_walk always Python's; both
read the same caches. Each probe here calls both on the same frame and compares, on first sight (the misses, handed
back to Python) and again (the compiled walk's own hits). Skipped where the part is not built or is forced off
(DISTTRACE_PURE=1: then every test of the recorder runs on the Python code alone)."""

from __future__ import annotations

import functools
import importlib.util
import os

import pytest

from disttrace.tracer.format import TORCH_DIR
from disttrace.tracer.record import callsite, compiled

walk_c = compiled.offers("walk")
needs_c = pytest.mark.skipif(walk_c is None, reason="the compiled part is not built here (or DISTTRACE_PURE is set)")


def probe(depth=2):
    """Both walks from this frame, `depth` levels up counted as callsite.walk counts them; twice each (miss, hit)."""
    first = (callsite.py_walk(depth), walk_c(depth))
    again = (walk_c(depth), callsite.py_walk(depth))
    return first + again


def _same(results):
    assert results[0][0] is not None or results[0] == (None, None, None)
    assert all(r == results[0] for r in results), results
    return results[0]


@needs_c
def test_a_users_line_is_the_same_site_on_both_paths():
    site, api, origin = _same(probe())
    assert site.startswith(__file__ + ":") and site.endswith(" in test_a_users_line_is_the_same_site_on_both_paths")
    assert (api, origin) == (None, None)


@needs_c
def test_each_line_of_a_loop_is_its_own_site():
    seen = [_same(probe())[0] for _ in range(3)] + [_same(probe())[0]]
    assert seen[0] == seen[1] == seen[2] != seen[3]


@needs_c
def test_generators_comprehensions_lambdas_and_c_callers():
    def gen():
        yield _same(probe())

    sites = [next(gen())[0]]
    sites += [[_same(probe()) for _ in range(1)][0][0]]
    sites += [(lambda: _same(probe()))()[0]]
    sites += [list(map(lambda _: _same(probe()), [0]))[0][0]]  # called from C (a shim frame on 3.12+)
    sites += [sorted([1, 2], key=lambda _: _same(probe())[0])[0] and _same(probe())[0]]
    sites += [functools.partial(lambda: _same(probe()))()[0]]
    assert all(s and s.startswith(__file__) for s in sites), sites


@needs_c
def test_deeper_starting_points_and_code_run_from_a_string():
    def inner():
        return probe(3)  # the caller of inner's caller

    def outer():
        return _same(inner())

    assert _same(probe())[0] != outer()[0]
    scope = {"probe": probe, "_same": _same}
    exec(compile("r = _same(probe())\n", "<string>", "exec"), scope)
    assert scope["r"][0] == "<string>:1 in <module>"


def _torch_code(rel: str, src: str, name: str):
    """A function whose code says it is torch's file `rel` (how a frame of torch is known: its file's path)."""
    scope: dict = {}
    exec(compile(src, os.path.join(TORCH_DIR or "/torch/", rel), "exec"), scope)
    return scope[name]


@needs_c
@pytest.mark.skipif(TORCH_DIR is None, reason="torch's directory is not known here")
def test_the_api_and_the_origin_are_the_same_on_both_paths():
    # user -> ddp's forward -> c10d's all_reduce (public: the api) -> c10d's _helper (not an api) -> the probe
    helper = _torch_code("distributed/distributed_c10d.py", "def _helper(p):\n    return p()\n", "_helper")
    api = _torch_code("distributed/distributed_c10d.py", "def all_reduce(h, p):\n    return h(p)\n", "all_reduce")
    ddp = _torch_code("nn/parallel/distributed.py", "class DistributedDataParallel:\n"
                      "    def forward(self, a, h, p):\n        return a(h, p)\n", "DistributedDataParallel")
    site, api_name, origin = _same(ddp().forward(api, helper, lambda: probe(3)))
    assert site.startswith(__file__) and api_name == "all_reduce" and origin == "ddp.DistributedDataParallel.forward"


@needs_c
def test_a_cut_cache_of_sites_is_found_again():
    _same(probe())
    for sites in callsite._users.values():
        code = sites[-1]
        sites.clear()
        sites[-1] = code
    assert _same(probe())[0].startswith(__file__)


def test_disttrace_pure_forces_the_python_code(monkeypatch):
    monkeypatch.setenv(compiled.PURE_ENV, "1")
    assert compiled._load() is None
    monkeypatch.setenv(compiled.PURE_ENV, "0")
    built = importlib.util.find_spec("disttrace.tracer.record._hotpath") is not None
    assert (compiled._load() is not None) == built


# -- the lean path's records: _hotpath.begin and _hotpath.end beside fastpath.py's and Completion.lean_end's --------
begin_c, end_c = compiled.offers("begin"), compiled.offers("end")
needs_records = pytest.mark.skipif(begin_c is None, reason="the compiled part is not built here (or DISTTRACE_PURE)")


class _Rec:
    """A recorder that keeps its lines; full (raw raises ValueError, as a full map does) after `room` lines."""

    def __init__(self, room=10**9):
        self.lines, self.room, self.grown = [], room, []

    def raw(self, line):
        if len(self.lines) >= self.room:
            raise ValueError("full")
        self.lines.append(line)

    def write_raw(self, line):
        self.grown.append(line)


@needs_records
@pytest.mark.parametrize("gs, ps", [(None, None), (0, None), (7, None), (2**40, None), (None, 0), (None, 2**40)])
def test_a_begin_record_is_the_templates_bytes(gs, ps):
    from disttrace.tracer.record.op_records import BEGIN_LINE, BEGIN_LINE_GS, BEGIN_LINE_PS

    head = b'{"k":"b","op":"all_reduce","api":"all_reduce","g":0,"bytes":4096,"async":false,"i":'
    rec = _Rec()
    now = begin_c(rec, head, 12345, gs, ps)
    want = BEGIN_LINE_GS % (head, 12345, gs, now) if gs is not None else \
        BEGIN_LINE_PS % (head, 12345, ps, now) if ps is not None else BEGIN_LINE % (head, 12345, now)
    assert rec.lines == [want]
    if ps is None:  # (the four-argument form: no pair number)
        now = begin_c(rec, head, 12345, gs)
        assert rec.lines[-1] == (BEGIN_LINE % (head, 12345, now) if gs is None else
                                 BEGIN_LINE_GS % (head, 12345, gs, now))
    full = _Rec(room=0)  # the map is full: write_raw has the line
    begin_c(full, head, 1, gs, ps)
    assert full.lines == [] and len(full.grown) == 1


def _completions(tmp_path, agg: bool):
    from disttrace.tracer.record.aggregates import Aggregates
    from disttrace.tracer.record.completion import Completion

    out = []
    for name in ("py", "c"):
        a = Aggregates(str(tmp_path / f"{name}.agg"), lambda rec: None, "seconds", 10, 1.0) if agg else None
        out.append(Completion(_Rec(), {}, None, a))
    return out


@needs_records
@pytest.mark.parametrize("agg", [False, True], ids=["full", "black_box"])
def test_a_lean_end_is_the_same_record_and_counts_either_way(tmp_path, agg):
    py, c = _completions(tmp_path, agg)
    assert type(c.lean_done) is compiled.offers("Ender")  # end_c with (rec, agg); Completion.lean_end its twin
    start = py.agg.start if agg else 0
    c_start = c.agg.start if agg else 0
    ends = [(3, 7, 100, 350), (4, None, 400, 1000), (5, 9, 500, 500), (6, 2**33, 600, 2_000_000_000)]  # the last
    for i, seq, t0, t in ends:  # ... past the window's end: it closes the window first, as Aggregates.add does
        slot = (py.agg.slot(0, "all_reduce", 4096 * i), c.agg.slot(0, "all_reduce", 4096 * i)) if agg else (None, None)
        py.lean_end(("all_reduce", "g", i, start + t0, 1, i, seq, slot[0]), start + t)
        c.lean_done(("all_reduce", "g", i, c_start + t0, 1, i, seq, slot[1]), c_start + t)
    assert py.rec.lines == [ln if not agg else _shifted(ln, c_start - start) for ln in c.rec.lines]
    if agg:
        assert py.agg.acc == c.agg.acc and len(py.agg._closed) == len(c.agg._closed) == 2  # two windows of 1 s passed
        assert [w[5] for w in py.agg._closed] == [w[5] for w in c.agg._closed]  # the closed windows' rows


def _shifted(line: bytes, by: int) -> bytes:
    import orjson

    rec = orjson.loads(line)
    rec["t"] -= by
    return orjson.dumps(rec) + b"\n"


@needs_records
def test_a_lean_end_counts_in_windows_of_steps_whose_deadline_never_comes(tmp_path):
    from disttrace.tracer.record.aggregates import Aggregates
    from disttrace.tracer.record.completion import Completion

    aggs = [Aggregates(str(tmp_path / f"{k}.agg"), lambda rec: None, "steps", 10, 10.0) for k in (0, 1)]
    for a in aggs:
        a.step(1, a.start)  # a job that marks steps: the deadline is 1 << 63, past a C long long
    py, c = (Completion(_Rec(), {}, None, a) for a in aggs)
    for comp in (py, c):
        slot = comp.agg.slot(0, "all_reduce", 4096)
        for i in range(3):
            (comp.lean_end if comp is py else comp.lean_done)(("all_reduce", "g", i, 100, 1, i, None, slot), 350)
    assert py.agg.acc == c.agg.acc == {0: [3, 750, 250, 12288]}
