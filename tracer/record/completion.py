"""How each op ends: its Work followed from issue to completion, the user's wait() on it, the "e" and "w" records.

When does an op end? gloo runs collectives on its own threads and returns a Work at once:
- a synchronous Python API call (all_reduce(async_op=False), send, recv, ...) waits on that Work right away on
  the same thread: the end is when that wait() returns (hooks.py wraps Work.wait);
- anything else (async_op=True, isend/irecv, DDP's reducer, functional collectives) ends when the Work's
  future completes (a callback; it never blocks), and the user's wait() is recorded apart;
- gloo's send/recv Works have no future: their end is the return of wait();
- a CUDA op's future completes when it is enqueued, and its wait() returns once the job's stream is made to wait
  for it: neither says when the device ran it. Every CUDA op ends when the CUDA watcher (background.py) sees
  its Work completed, and stays in the watchdog's sight until then; an NCCL collective's end record also waits
  for its duration on the device from PyTorch's completion hook (ncclhook.py).
"""

from __future__ import annotations

import threading
import time
import weakref

import torch
import torch.distributed as dist

from . import background
from .compiled import offers
from .op_records import END_LINE, END_LINE_SEQ, END_LINE_SEQ_DEV, END_OPEN, WAIT_LINE, end_fields

# lean_end's common case (no error) in C, the aggregates' add included (compiled.py): the same record and counts
_lean_end_c = offers("end")
_Ender = offers("Ender")  # end(rec, agg, ...) as one object: the compiled Work.wait calls it without a Python call
if _lean_end_c is not None:
    offers("init_records")(END_OPEN)

PENDING_LIMIT = 4096  # finished async ops kept for a wait() that may still come


class _ThreadSlot(threading.local):
    sync = None  # the synchronous op this thread issued last and waits on next (Work.wait ends it)


class Event:
    """An op in flight. `sync`: ends at the next wait() on this thread.

    Defaults live on the class: an op sets only what differs (one Event per op is made on the hot path)."""

    tensors = None      # what to summarize at the end (summaries on)
    ended = False
    cuda = False
    work = None         # the kernel path's own Python Work while the op is in flight (see Completion.track)
    work_ref = None     # a weak reference to the Work: the job's own from the start, ours once the op finished
    peer_any = False    # a recv from any source: the end record says which
    seq = None          # the backend's sequence number for the op
    out_ptr = 0         # output data_ptr, for functional collectives' wait_tensor
    watched = False     # something will tell us when it completes (a future callback, the CUDA watcher)
    info = None         # (op, group, group_seq, start, thread) for the watchdog
    hooked = None       # the group's ncclhook.DeviceEnds while its completion hook's duration is to come
    dev = None          # the op's duration on the device (ns), once the hook gave it
    done_t = None       # when the CUDA watcher saw it done, while the end record waits for the hook
    device = None       # a CUDA op's device index
    stream_end = None   # a StreamEnd after the op on the job's stream, once the job waited on it
    agg = None          # the black box: the op's slot in the aggregates (aggregates.Aggregates.slot)

    def __init__(self, id, sync, group):
        self.id, self.sync, self.group = id, sync, group

    def held_work(self):
        """The op's Work if it is still alive, held strongly or weakly; else None."""
        if self.work is not None:
            return self.work
        return self.work_ref() if self.work_ref is not None else None


class StreamEnd:
    """A Work-like end of a CUDA op: a CUDA event recorded on the job's current stream of the op's device right
    after it, for an op whose backend gave no Work to follow (NCCL's synchronous collectives, which run on that
    stream) or whose Work cannot say when it is done. The CUDA watcher polls is_completed() (cudaEventQuery)."""

    __slots__ = ("event", "__weakref__")  # (held weakly once done, as a Work is: Completion.finished)

    def __init__(self, event):
        self.event = event

    @staticmethod
    def after(ev: Event) -> "StreamEnd | None":
        try:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(ev.device))
        except Exception:  # noqa: BLE001 - no end to follow: the caller ends the op as it can
            return None
        return StreamEnd(event)

    def is_completed(self) -> bool:
        return self.event.query()


class Completion:
    """The ops issued and not yet let go of: their Works, their ends and the waits on them (one per Tracer).

    rec: the recorder; in_flight: the Tracer's table of the ops the watchdog watches (event id -> Event.info);
    summary(event id, "out", tensors): the output summary to put in the end record, or None. It holds nothing of
    the Tracer's own: the Tracer, and the groups it keeps, go when hooks.py lets go of it."""

    def __init__(self, rec, in_flight: dict, summary, agg=None):
        self.rec, self.in_flight, self.summary = rec, in_flight, summary
        self.agg = agg  # the black box's aggregates.Aggregates (each op's end adds to them), or None
        self.pending: dict[int, Event] = {}   # id(python Work) -> event, for async ops the user may wait on
        self.by_ptr: dict[int, Event] = {}    # output data_ptr -> event, for functional collectives' wait_tensor
        # event id -> Event, for the async ops whose future's callback will end them: the job may let go of the
        # Work (DDP does, once its reducer waited in C++) before gloo's thread has run the callback
        self.awaited: dict[int, Event] = {}
        # id(the job's Work) -> the synchronous op the fast path issued with it (distributed_c10d waits on that very
        # Work next, on the same thread): the job's own object is known there, so no thread-local is needed
        self.sync_works: dict[int, Event] = {}
        # the same for fastpath.py's lean path, without an Event: id(the job's Work) -> (op, group, group_seq, start,
        # thread, event id, the backend's sequence number, the aggregates' slot), the first five what in_flight holds. The op stays in it
        # until the wait returns: the watchdog watches it from here (in_flight_items)
        self.lean_sync: dict[int, tuple] = {}
        self.tls = _ThreadSlot()  # the kernel's path: its Work is ours, the job may be handed another object
        if _lean_end_c is not None:  # (lean_done, the same as lean_end without an error; it holds no self)
            self.lean_done = _Ender(rec, agg)

    # -- issue ----------------------------------------------------------------------------------
    def issued(self, ev: Event, result) -> None:
        """The backend accepted the op; `result` is what the c10d op returned (Work, or (tensors, Work))."""
        work = result[-1] if isinstance(result, tuple) else result
        if work is not None and not isinstance(work, torch.ScriptObject):
            work = None
        self.issued_work(ev, None if work is None else dist.distributed_c10d.Work.unbox(work), ours=True)

    def issued_work(self, ev: Event, work, ours: bool = False) -> None:
        """The backend accepted the op and returned `work` (a Python Work, or None). ours: `work` is a wrapper
        this tracer made (the kernel's path), not the object the job will be handed (the fast path)."""
        try:  # the backend's own sequence number, read right after issue: Flight Recorder's id for this op
            ev.seq = ev.group.pg._get_sequence_number_for_group()
        except Exception:  # noqa: BLE001
            pass
        if work is None:
            if ev.cuda:  # NCCL runs a synchronous collective on the job's current stream and returns no Work
                work = StreamEnd.after(ev)
            if work is None:
                self.complete(ev)  # the backend finished it synchronously (monitored_barrier, ...)
                return
        if ev.sync and not ev.cuda:
            # distributed_c10d waits on it next, on this thread
            if ours:
                self.tls.sync = ev
            else:
                sync_works = self.sync_works
                if len(sync_works) > PENDING_LIMIT:  # Works never waited on (an exception between): forget them
                    sync_works.clear()
                sync_works[id(work)] = ev
            return
        self.track(ev, work, ours)

    def lean_end(self, entry: tuple, t: int, err: BaseException | None = None) -> None:
        """The end record of a lean synchronous op (lean_sync's entry), whose wait() returned at t (or raised err)."""
        slot = entry[7]
        if slot is not None:
            self.agg.add(slot, entry[3], t)
        seq = entry[6]
        if err is not None:
            self.rec.write(end_fields(entry[5], t, seq, err, False))
            return
        line = END_LINE % (entry[5], t) if seq is None else END_LINE_SEQ % (entry[5], t, seq)
        rec = self.rec
        try:
            rec.raw(line)
        except ValueError:  # the map is full (or closed): write_raw grows it (or drops the line)
            rec.write_raw(line)

    lean_done = lean_end  # a lean op's end without an error: hooks.py's Work.wait (compiled.py's, where it is built)

    def in_flight_items(self) -> list[tuple[int, tuple]]:
        """[(event id, (op, group, group_seq, start, thread))] of the ops the watchdog watches: in_flight's and the
        lean path's synchronous ops (a copy, under the GIL: the job's threads change both meanwhile)."""
        return list(self.in_flight.items()) + [(e[5], e[:5]) for e in list(self.lean_sync.values())]

    def error(self, ev: Event, err: BaseException) -> None:
        """The backend refused the op."""
        if self.tls.sync is ev:
            self.tls.sync = None
        self.complete(ev, err)

    # -- following the Work ---------------------------------------------------------------------
    def track(self, ev: Event, w, ours: bool) -> None:
        """Follow an async op's Work: its future's completion, the user's wait() on it.

        The job's own Work object (the fast path's) is held weakly: the entry lasts as long as the job holds it.
        A wrapper of ours (the kernel's path) is held until the op completes: the job is handed that same object
        only if it is alive when the op returns to Python, else a new one whose wait() we would not know."""
        self.pending[id(w)] = ev
        if ours:
            ev.work = w
        else:
            self._hold_weakly(ev, w)
        if ev.out_ptr:
            self.by_ptr[ev.out_ptr] = ev  # functional collectives complete through wait_tensor(output)
        if ev.cuda:
            ev.watched = True
            # A CUDA Work's future completes on the host as soon as the op is enqueued, so its callback says
            # nothing about the device. It ends when Work.is_completed(), which queries the op's CUDA events
            # without blocking, says so to the watcher thread that polls it (about a millisecond's resolution);
            # an NCCL collective's duration on the device comes from ProcessGroupNCCL's completion hook
            ends = getattr(ev.group, "hook", None)
            if ends is not None:
                ends.claim(ev)
            background.cuda_watcher().add(self, ev, w)
            return
        try:
            fut = w.get_future()
        except Exception:  # noqa: BLE001 - gloo send/recv have no future: they end at wait()
            return
        ev.watched = True
        self.awaited[ev.id] = ev
        fut.add_done_callback(lambda f, ev=ev: self._future_done(ev, f))

    def _future_done(self, ev: Event, fut) -> None:
        try:
            err = None
            try:
                fut.value()
            except Exception as e:  # noqa: BLE001
                err = e
            self.complete(ev, err)
            self.finished(ev)
        except Exception as e:  # noqa: BLE001
            self.rec.fail(e)

    def device_done(self, ev: Event, t: int) -> None:
        """The CUDA watcher saw ev's op done on the device at t: it ends at t, once the completion hook gave its
        duration if one is to come (ncclhook.DeviceEnds); the watchdog stops watching it now."""
        ends = ev.hooked
        if ends is not None and ends.awaits(ev, t):
            self.in_flight.pop(ev.id, None)
        else:
            self.complete(ev, None, t, dev=ev.dev)
        self.finished(ev)

    def _hold_weakly(self, ev: Event, w) -> None:
        """Keep ev in `pending` under id(w) for as long as w lives, without keeping w alive."""
        key, pending = id(w), self.pending

        def gone(_ref, key=key, ev=ev) -> None:  # w is being freed: its id may be reused after this
            if pending.get(key) is ev:
                pending.pop(key, None)
        ev.work_ref = weakref.ref(w, gone)

    def finished(self, ev: Event) -> None:
        """ev's op has completed: hold its Work weakly from now on. It stays in `pending` so that a later wait()
        on it is timed, for as long as the job holds the Work; a Work held by us alone would keep its tensors
        alive after the job let go of them (a job that waits through work.get_future() never calls wait())."""
        w = ev.work
        if w is None:
            return
        ev.work = None
        self._hold_weakly(ev, w)
        # Works the job holds but never waits on from Python: past a bound, forget the finished ones
        pending = self.pending
        if len(pending) > PENDING_LIMIT:
            for k in [k for k, e in list(pending.items()) if e.ended]:
                pending.pop(k, None)

    # -- the end ----------------------------------------------------------------------------------
    def complete(self, ev: Event, err: BaseException | None = None, t: int | None = None, bound=False,
                 dev: int | None = None) -> None:
        """ev's op ended at t (now if None); dev: its duration on the device, ns (the NCCL completion hook's)."""
        if ev.ended:
            return
        ev.ended = True
        t = t or time.monotonic_ns()
        if ev.agg is not None:
            self.agg.add(ev.agg, ev.info[3], t)
        self.in_flight.pop(ev.id, None)
        self.awaited.pop(ev.id, None)
        if ev.out_ptr and self.by_ptr.get(ev.out_ptr) is ev and ev.work is None:
            del self.by_ptr[ev.out_ptr]
        if err is None and not bound and not ev.peer_any and ev.tensors is None:
            # the common case, formatted directly: cheaper than a dict through orjson
            seq = ev.seq
            if type(seq) is not int:
                line = END_LINE % (ev.id, t)
            elif dev is None:
                line = END_LINE_SEQ % (ev.id, t, seq)
            else:
                line = END_LINE_SEQ_DEV % (ev.id, t, seq, dev)
            rec = self.rec
            try:
                rec.raw(line)
            except ValueError:  # the map is full (or closed): write_raw grows it (or drops the line)
                rec.write_raw(line)
            return
        rec = end_fields(ev.id, t, ev.seq, err, bound, dev)
        work = ev.held_work() if ev.peer_any else None
        if work is not None:  # a recv from any source: now we know which
            try:
                rec["peer"] = work._source_rank() if hasattr(work, "_source_rank") else work.source_rank()
            except Exception:  # noqa: BLE001
                pass
        if ev.tensors is not None and err is None:
            try:  # (the end is written whatever happens to its summary: ended unwritten, it would read as a hang)
                summary = self.summary(ev.id, "out", ev.tensors)
                if summary is not None:
                    rec["out"] = summary
            except Exception:  # noqa: BLE001
                pass
            ev.tensors = None
        self.rec.write(rec)

    # -- waits ------------------------------------------------------------------------------------
    def wait_begins(self, work, t0: int) -> None:
        ev = self.pending.get(id(work))
        if ev is not None and not ev.ended and not ev.cuda:  # (a CUDA op is watched from its issue to its end)
            self.in_flight[ev.id] = ev.info[:3] + (t0,) + ev.info[4:]

    def waited(self, work, t0: int, t1: int, err: BaseException | None) -> None:
        """The user's (or a library's) wait() on an async op's `work` ran from t0 to t1."""
        ev = self.pending.pop(id(work), None)
        if ev is None:
            return
        if not ev.cuda:  # a CUDA op's wait() returns before the device ran it: the watchdog keeps watching
            self.in_flight.pop(ev.id, None)
        elif not ev.ended and err is None:
            # the job's stream now waits for the op: an event there completes after it, for a Work that cannot
            # tell (gloo's reduce_scatter_tensor with CUDA tensors is never is_completed())
            ev.stream_end = StreamEnd.after(ev)
        self.rec.write_raw(WAIT_LINE % (ev.id, t0, t1))
        if not ev.ended and (not ev.watched or err is not None):
            self.complete(ev, err, t1)
        ev.work = None

    def tensor_waited(self, tensor, t0: int, t1: int) -> None:
        """_c10d_functional.wait_tensor(tensor) ran from t0 to t1 (functional collectives, DTensor)."""
        ev = self.by_ptr.pop(tensor.data_ptr(), None)
        if ev is None:
            return
        self.rec.write_raw(WAIT_LINE % (ev.id, t0, t1))
        if ev.work is not None:
            self.pending.pop(id(ev.work), None)
            ev.work = None
        if not ev.ended and not ev.cuda:
            self.complete(ev, None, t1)  # gloo gives no future for some ops: their end is the wait

    # -- letting go ---------------------------------------------------------------------------------
    def end_unwaited(self, which) -> None:
        """Let go of the async ops that `which` picks among those nobody waited on: the ones whose backend
        gives no completion callback and that are done by now are said to be, with an end time that is only
        an upper bound."""
        for table in (self.pending, self.by_ptr):
            for key, ev in list(table.items()):
                if not which(ev):
                    continue
                try:
                    work = ev.held_work()
                    if not ev.ended and work is not None and work.is_completed():
                        self.complete(ev, bound=True)
                except Exception:  # noqa: BLE001
                    pass
                table.pop(key, None)  # (a Work's weakref callback may have taken it meanwhile)
                ev.work = None

    def settle(self, timeout_s: float = 0.1) -> None:
        """Give the completion callbacks of ops that are done a moment to run (on gloo's threads) before the
        groups go or the file closes: an op whose end is never recorded reads as a hang."""
        deadline = time.monotonic() + timeout_s
        while self.awaited and time.monotonic() < deadline:
            time.sleep(0.001)
