"""The per-process tracer: turns each c10d operation into begin / wait / end records.

Called from the dispatcher kernels of hooks.py and the ProcessGroup wrappers of fastpath.py. The hot path
(`begin_fields`, then completion.py's `complete`) does the least it can: read a few tensor attributes, walk the
stack once (callsite.py), fill in a record whose fixed part is cached (op_records.py), append it through the
recorder. Decoding happens in the reader, later. fastpath.py's lean path (summaries off) does the same in its
wrapper, from a key of its own (lean_entry).

The Tracer holds the process's lifecycle (its rank file, the "meta" record, release and close) and the parts:
groups.py (the groups and their "group" records), op_records.py (the records' bytes), completion.py (how each op
ends, its Work, the user's waits), background.py (CUDA summaries and completions, off the training thread).
Record kinds written through it (see docs/FORMAT.md and format.py): "meta", "group", "clock", "b" (begin:
everything known at issue), "w" (the user's wait() on an async op), "e" (end: completion or error), "s" (a CUDA
summary resolved later), and hooks.py's and watchdog.py's "step", "left" and "stacks".
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import time
from threading import get_ident
from time import monotonic_ns

import orjson
import torch
import torch.distributed as dist

from ..format import FORMAT_VERSION, META, RANK_FILE_SUFFIX, rank_file_stem
from . import background, faults, ncclhook, summaries
from .callsite import walk
from .completion import Completion, Event
from .groups import Group, Groups
from .op_records import (BEGIN_LINE, BEGIN_LINE_GS, BEGIN_LINE_GS_IN, BEGIN_LINE_IN, BEGIN_LINE_PS, BEGIN_LINE_PS_IN,
                         BeginHeads, first_tensor, nbytes)
from .blackbox import BlackBox
from .recorder import Recorder
from .specs import SYNC_P2P_APIS, Spec

_Tensor = torch.Tensor
_LEAN_LIMIT = 20000  # lean entries kept per tracer


class Tracer:
    """One per traced process, created when the process group is initialized."""

    def __init__(self, out_dir: str, mode: str = "off", init: int = 1, black_box=None):
        self.mode = mode  # summaries: off | stats | full
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        os.makedirs(out_dir, exist_ok=True)
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        name = rank_file_stem(self.rank, self.host, self.pid, restart)
        self.path = os.path.join(out_dir, name + RANK_FILE_SUFFIX)
        n = 1
        while os.path.exists(self.path):  # a second trace() block or process group world in the same process
            n += 1
            self.path = os.path.join(out_dir, f"{name}-s{n}{RANK_FILE_SUFFIX}")
        # black_box (a blackbox.Config): the op records go into a ring of fixed size, the rest into the rank file
        self.rec = Recorder(self.path) if black_box is None else BlackBox(self.path, black_box)
        self._ids = faults.event_ids()
        self.heads = BeginHeads()  # the fixed part of each begin record, by begin_fields() key
        self.pairs: dict = {}  # (op, global peer, tag) -> its PairSeq: the P2P records' "ps"
        # fastpath.py's lean path (summaries off): its key -> lean_entry(); None: every op takes the general path.
        # Set once, as rec, _ids, read_seq and completion are: the compiled Lean keeps those with t.lean's entries
        # (_hotpath.c, "the last call's lookups"), knowing this tracer by its lean dict
        self.lean: dict | None = {} if mode == "off" else None
        self.groups = Groups(self.rec.write)
        self.watchdog = None
        self.backward_site = None  # the user's backward() line while a backward pass runs (hooks.py sets it)
        self.left = False  # its "left" record is written: the rank leaves the job alive (hooks.py sets it)
        self.in_flight: dict[int, tuple] = {}  # event id -> (op, group, group_seq, start, thread) for the watchdog
        # the summary of an op's tensors for its record (summaries on): summaries.for_record, bound to this trace
        self.summary = functools.partial(summaries.for_record, mode == "full", self.rec.write)
        # the black box's aggregates (blackbox.py), which each op's end adds to; None: the full trace
        self.agg = getattr(self.rec, "agg", None)
        # the backend's sequence number in each end record: Flight Recorder's id, for matching its dumps; the black
        # box's ring (matched by group_seq alone) leaves it out
        self.read_seq = black_box is None
        self.completion = Completion(self.rec, self.in_flight, self.summary, self.agg)
        self.rec.write({
            "k": META, "v": FORMAT_VERSION, "rank": self.rank, "world_size": self.world_size,
            "local_rank": int(os.environ.get("LOCAL_RANK", -1)), "host": self.host, "pid": self.pid,
            "backend": str(dist.get_backend()), "torch": torch.__version__, "summaries": mode,
            "mono_ns": time.monotonic_ns(), "wall_ns": time.time_ns(), "argv": sys.argv[:20],
            "restart": int(restart) if restart.isdigit() else 0, **_world_identity(init),
            **({"black_box": self.rec.meta()} if black_box is not None else {}),
        })

    # -- the hot path ------------------------------------------------------------------------------
    def begin(self, spec: Spec, args: tuple) -> Event | None:
        """An op seen by the dispatcher kernel (c10d schema arguments; group-local root and peer); None when
        nothing is communicated: tensors without data (FakeTensorMode, the meta device) are not an op to record."""
        n = len(args)
        inp = args[spec.inp] if spec.inp is not None else None
        out = args[spec.out] if spec.out is not None else None
        first = first_tensor(inp if inp is not None else out)
        if first is not None and first.is_meta:
            return None
        is_async = None
        if spec.async_arg is not None:
            is_async = bool(args[spec.async_arg]) if spec.async_arg < n else True
        return self.begin_fields(spec, self.groups.of(dist.ProcessGroup.unbox(args[spec.pg])), inp, out,
                                 args[spec.root] if spec.root is not None else None,
                                 args[spec.peer] if spec.peer is not None else None,
                                 args[spec.tag] if spec.tag is not None and spec.tag < n else None, is_async)

    def begin_fields(self, spec: Spec, g: Group, inp, out, root, peer, tag, is_async) -> Event:
        """Write the begin record of an op about to be issued, and return its Event. Called by begin() and by
        fastpath.py's ProcessGroup method wrapper; root, peer: group-local; is_async: the op's async flag (None:
        it has none)."""
        site, api, origin = walk(3)  # from the kernel or the wrapper outwards
        if site is None:
            # no Python frame of the user's: an autograd device thread (CUDA) runs this backward
            site = self.backward_site
        if api is None:
            api = origin or spec.api
            in_backward = (origin or "").startswith("autograd.") or (origin is None and self.backward_site)
            if spec.name == "allreduce_" and in_backward and "torch.nn.parallel.distributed" in sys.modules:
                api = origin = "ddp.reducer_allreduce"  # DDP's C++ reducer, launched from backward()
        is_async = _async_flag(spec, api, is_async)
        key, fixed, first, size = self._fixed(spec, site, api, origin, g, inp, out, root, peer, tag, is_async)
        head, collective, special, pair = fixed
        ev = Event(next(self._ids), not is_async, g)
        if self.agg is not None:  # the black box: the op's key in the aggregates, added to at its end
            ev.agg = self.agg.slot(g.gidx, spec.op, first.nbytes if size < 0 else size)
        if special:
            self._special(ev, key, inp, out, first)
        gs = ps = None
        if collective:
            gs = g.next_seq
            g.next_seq = gs + 1
        elif pair is not None:
            ps = pair.next_seq
            pair.next_seq = ps + 1
        if self.mode == "off":
            t = monotonic_ns()  # last: everything above is our own cost, not the op's
            if gs is not None:
                line = BEGIN_LINE_GS % (head, ev.id, gs, t)
            elif ps is not None:
                line = BEGIN_LINE_PS % (head, ev.id, ps, t)
            else:
                line = BEGIN_LINE % (head, ev.id, t)
        else:
            line, t = self._with_summary(ev, head, gs, ps, inp, out, spec.inplace)
        ev.info = (spec.op, g, gs, t, key[12])
        if not is_async or ev.cuda:
            # what the watchdog watches: ops the program is blocked in (a CPU async op only while waited on;
            # a CUDA op until the device completes it)
            self.in_flight[ev.id] = ev.info
        rec = self.rec
        try:
            rec.raw(line)
        except ValueError:  # the map is full (or closed): write_raw grows it (or drops the line)
            rec.write_raw(line)
        return ev

    def _fixed(self, spec: Spec, site, api, origin, g: Group, inp, out, root, peer, tag, is_async: bool):
        """(key, the record's fixed part, first tensor, bytes or -1 where they are the first tensor's):
        op_records.BeginHeads' entry for this op, made the first time. The usual [tensor]'s bytes follow from its dtype and shape; other inputs' bytes are part of the key."""
        if type(inp) is list and len(inp) == 1 and type(inp[0]) is _Tensor:
            first = inp[0]
            key = (spec, api, origin, site, g, root, peer, tag, first.dtype, first.shape, first.is_cuda, is_async,
                   get_ident())
            size = -1
        else:
            size, first = nbytes(inp) if inp is not None else (0, None)
            if first is None and out is not None:
                out_bytes, first = nbytes(out)
                if spec.op == "recv":
                    size = out_bytes
            if first is None:
                key = (spec, api, origin, site, g, root, peer, tag, None, None, False, is_async, get_ident(), size)
            else:
                key = (spec, api, origin, site, g, root, peer, tag, first.dtype, first.shape, first.is_cuda,
                       is_async, get_ident(), size)
        fixed = self.heads.get(key)
        if fixed is None:
            fixed = self.heads.make(key, first.nbytes if size < 0 else size, self.pairs)
        return key, fixed, first, size

    def lean_entry(self, lean_key: tuple, spec: Spec, walked: tuple, g: Group, inp, out, root, peer, tag, is_async):
        """fastpath.py's lean path, the first time it sees lean_key: (head, is it a collective, is it async, op,
        its aggregates' slot where the black box keeps them, a P2P op's PairSeq), or False where the op takes the general path (begin_fields): no user's line or api on the stack (the
        backward's site, the origin's api are not the same from one call to the next), a quantized tensor, an op
        that needs _special. Kept in self.lean under lean_key."""
        site, api, origin = walked
        entry = False
        if site is not None and api is not None:
            is_async = _async_flag(spec, api, is_async)
            _, (head, collective, special, pair), first, size = self._fixed(spec, site, api, origin, g, inp, out, root,
                                                                      peer, tag, is_async)
            if not special and first is not None and not first.is_quantized:
                agg = self.agg
                slot = agg.slot(g.gidx, spec.op, first.nbytes if size < 0 else size) if agg is not None else None
                entry = (head, collective, is_async, spec.op, slot, pair)
        lean = self.lean
        if len(lean) > _LEAN_LIMIT:  # (as BeginHeads: a job has few distinct lines and shapes)
            lean.clear()
        lean[lean_key] = entry
        return entry

    @staticmethod
    def _special(ev: Event, key, inp, out, first) -> None:
        """What few ops need: a CUDA op, a recv from any source, a functional collective."""
        spec, api, peer, cuda, is_async = key[0], key[1], key[6], key[10], key[11]
        ev.cuda = cuda
        if cuda:
            ev.device = first.get_device()  # (first: the tensor whose is_cuda made it a CUDA op)
        ev.peer_any = spec.op == "recv" and peer is None
        if is_async and api.startswith("funcol."):  # completed by wait_tensor(output), found by address
            t = first_tensor(out if out is not None else inp if spec.inplace else None)
            if t is not None:
                ev.out_ptr = t.data_ptr()

    def _with_summary(self, ev: Event, head: bytes, gs, ps, inp, out, inplace) -> tuple[bytes, int]:
        """The begin record with the input's summary (summaries on), and its time."""
        summary = b""
        s = self.summary(ev.id, "in", inp) if inp is not None else None
        if s is not None:
            summary = b',"in":' + orjson.dumps(s, default=str)
        ev.tensors = out if out is not None else (inp if inplace else None)
        t = monotonic_ns()
        if gs is not None:
            return BEGIN_LINE_GS_IN % (head, ev.id, gs, summary, t), t
        if ps is not None:
            return BEGIN_LINE_PS_IN % (head, ev.id, ps, summary, t), t
        return BEGIN_LINE_IN % (head, ev.id, summary, t), t

    # -- lifecycle ------------------------------------------------------------------------------
    def write(self, obj) -> None:
        self.rec.write(obj)

    def fail(self, e: BaseException) -> None:
        self.rec.fail(e)

    def release(self, pg=None) -> None:
        """The job destroyed process group pg (None: all of them, with the default group): let go of it, and
        of the Works of its ops, so that they are freed when the job frees them, as they would be untraced. One
        kept past destroy_process_group is destroyed at the interpreter's exit instead, where gloo can abort
        the process ("terminate called without an active exception")."""
        if pg is None:
            self.completion.settle()
            groups = list(self.groups.values())
            self.groups.clear()
            if self.watchdog is not None:
                self.watchdog.store = None  # the job's store goes with its default group
        else:
            g = self.groups.pop(id(pg), None)
            groups = [g] if g is not None else []
        self._flush_device_ends(groups)
        background.let_go_of_cuda_ops(self.completion, lambda ev: pg is None or ev.group in groups)
        self.completion.end_unwaited(lambda ev: pg is None or ev.group in groups)
        for g in groups:
            g.pg = g.gloo = g.hook = None

    def settle_device(self, pg=None) -> None:
        """Before the job destroys pg (None: every group): let the completion hook report the device's duration
        of the ops that are still waiting for it, for a moment (its watchdog looks every ~100 ms)."""
        for g in list(self.groups.values()):
            if g.hook is not None and (pg is None or g.pg is pg):
                g.hook.settle()

    def _flush_device_ends(self, groups) -> None:
        for g in groups:  # no more durations from these groups' hooks: their ops end without one
            if g.hook is not None:
                g.hook.flush(self.completion)

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        groups = list(self.groups.values())  # (groups still here: the job exits without destroying them)
        ncclhook.drain(groups)
        self.settle_device()
        self._flush_device_ends(groups)
        background.let_go_of_cuda_ops(self.completion, lambda ev: True)
        self.completion.settle()
        self.completion.end_unwaited(lambda ev: True)
        background.drain_summaries()
        self.rec.close()


def _async_flag(spec: Spec, api: str, is_async) -> bool:
    """An op's async flag (None: it has none: a P2P call is synchronous where its api is)."""
    if is_async is None:
        return api not in SYNC_P2P_APIS and spec.name != "monitored_barrier_"
    return is_async if type(is_async) is bool else bool(is_async)


def _world_identity(init: int) -> dict:
    """What the ranks of one process-group world share, for the reader to tell the runs in a trace dir apart
    (format.py, data/importers/runs.py): this process's init number (the n-th init_process_group it traced), the rendezvous
    (torchrun's run id, fixed across its restarts, and the store's address) where the environment names them."""
    out = {"init": init}
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id:
        out["run_id"] = run_id[:200]
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if addr and port:
        out["master"] = f"{addr}:{port}"[:200]
    return out
