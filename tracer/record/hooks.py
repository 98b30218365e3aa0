"""Hooks into torch.distributed: where the tracer sees every op, whoever issued it.

Every collective and P2P op, whether the user called torch.distributed, DDP's C++ reducer issued it, or a
functional collective of DTensor did, goes through one of the `c10d::` operators of PyTorch's dispatcher. We
register a Python kernel on the BackendSelect key of each: it records the begin, then hands the call on with
`OperatorHandle.redispatch_boxed` (via OpOverload.redispatch), which releases the GIL while the backend runs.
(Calling a saved backend kernel with call_boxed instead holds the GIL and can deadlock gloo.) A nesting guard
makes an op that a backend implements with another c10d op count once.

Work.wait is wrapped to time the user's waits, and init_process_group / destroy_process_group to start and
stop the per-process Tracer (so torchrun's agent, which imports torch.distributed too, records nothing);
torch.profiler's profile.step, to mark training steps as mark_step() does.

Nothing here may raise into the traced program: an internal failure disables tracing with one warning.
The tracer, the nesting guard and the call that never raises are current.py's, shared with fastpath.py.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import time
from threading import get_ident
from time import monotonic_ns

import torch
import torch.distributed as dist
from torch._C import DispatchKey

from ..format import LEFT, STEP
from . import callsite, clock, current, fastpath, nocompile, summaries, tracebacks
from .capture import Tracer
from .compiled import offers
from .specs import SPECS

_PACKAGE = __name__.rsplit(".", 2)[0]  # disttrace.tracer: this process's disttrace modules start with it

_clock_sync: clock.Sync | None = None
_config: dict = {}
_steps = 0  # step markers this tracer has written
_inits = 0  # process-group worlds this process has traced: each is a run, in a rank file of its own
_lib = None
_funcol_lib = None
_installed = False
_early_signals = None  # black box: the SIGUSR1 pipe set up at install (signals.py), for a tracer on any thread


def install(out_dir: str, summaries: str = "off", hang_timeout: float = 0.0, black_box=None, memory=None) -> None:
    """Arrange for tracing to start when the default process group is initialized (or now, if it is).
    black_box: a blackbox.Config to record into a ring of fixed size (None: the whole trace). memory: None (off), or
    the step whose breakdown the report shows (-1: the first steady one): memory.py records memory beside."""
    global _installed
    _config.update(out=os.path.abspath(out_dir), summaries=summaries, hang_timeout=hang_timeout, black_box=black_box,
                   memory=memory)
    if not _installed:
        _installed = True
        _patch_lifecycle()
        tracebacks.install()  # from here on: an error in init_process_group passes through our wrapper too
    tracebacks.on_uncaught = _uncaught if black_box is not None else None
    if black_box is not None:
        _prepare_sigusr1()
    if dist.is_initialized() and current.tracer is None:
        _start()


def uninstall() -> None:
    """Stop tracing and take every hook out again (the programmatic trace() block ends)."""
    global _lib, _funcol_lib, _installed
    stop()
    _config.clear()
    for lib in (_lib, _funcol_lib):
        if lib is not None:
            lib._destroy()
    _lib = _funcol_lib = None
    fastpath.uninstall()
    tracebacks.uninstall()
    tracebacks.on_uncaught = None
    c10d = dist.distributed_c10d
    for owner, name in ((c10d.Work, "wait"), (torch.autograd, "backward"), (torch.profiler.profile, "step")):
        _restore(owner, name)
    for name in ("init_process_group", "destroy_process_group"):
        _restore(c10d, name, dist)
    _installed = False


def _restore(owner, name: str, *also) -> None:
    """Put back the original that a wrapper of ours replaced at owner.name (and at the same name of `also`)."""
    orig = getattr(getattr(owner, name), "_disttrace_orig", None)
    if orig is not None:
        for o in (owner, *also):
            setattr(o, name, orig)


# -- lifecycle ---------------------------------------------------------------------------------------
def _patch_lifecycle() -> None:
    c10d = dist.distributed_c10d
    orig_init, orig_destroy = c10d.init_process_group, c10d.destroy_process_group

    @functools.wraps(orig_init)
    def init_process_group(*args, **kwargs):
        result = orig_init(*args, **kwargs)
        if _config:
            t = current.tracer
            if t is not None and t.left:
                # the world that tracer recorded was destroyed: this is another run (a second init in the same
                # process), recorded in a rank file of its own
                stop()
                t = None
            if t is None:
                _start()
        return result

    @functools.wraps(orig_destroy)
    def destroy_process_group(group=None):
        world = group is None or group is dist.GroupMember.WORLD
        t = current.tracer
        if t is not None:
            current.safe(t.settle_device, None if world else group)
        if world:
            _end_clock()
            _left("destroy")
        try:
            return orig_destroy(group)
        finally:
            t = current.tracer
            if t is not None:  # the groups are the job's to free now, as untraced
                current.safe(t.release, None if world else group)

    init_process_group._disttrace_orig = orig_init  # type: ignore[attr-defined]
    destroy_process_group._disttrace_orig = orig_destroy  # type: ignore[attr-defined]
    for module in (c10d, dist):
        module.init_process_group = init_process_group
        module.destroy_process_group = destroy_process_group


def _start() -> None:
    global _steps, _inits
    _steps = 0
    _inits += 1
    try:
        t = current.tracer = Tracer(_config["out"], _config.get("summaries", "off"), init=_inits,
                                    black_box=_config.get("black_box"))
    except Exception as e:  # noqa: BLE001
        from .recorder import warn_once

        warn_once(_config["out"], f"disttrace: tracing disabled: cannot start the recorder: {e}; the job goes on "
                                  f"untraced")
        return
    try:
        _start_clock()
        _register_kernels()
        fastpath.install()
        _patch_work_wait()
        _patch_backward()
        _patch_profiler_step()
        atexit.register(stop)
        if _config.get("hang_timeout") or _config.get("black_box") is not None:
            from .watchdog import start_watchdog

            if _config.get("black_box") is not None:
                _catch_sigusr1(t)
            start_watchdog(t, float(_config.get("hang_timeout") or 0))
        if t.mode != "off":
            summaries.warm_up()
        if _config.get("memory") is not None:
            from . import memory

            memory.start(t, _config["memory"] if _config["memory"] >= 0 else None)
        # torch.compile must not see the tracer: every in-rank module is loaded by now
        nocompile.hide(m for name, m in list(sys.modules.items()) if name.startswith(_PACKAGE) and m is not None)
    except Exception as e:  # noqa: BLE001
        t.fail(e)


def _prepare_sigusr1() -> None:
    """Black box: SIGUSR1's handler and wakeup fd, which only the main thread may set, set at install (the job's
    import of torch.distributed, on its main thread as a rule), for the tracer that init_process_group starts on
    whichever thread the job calls it (a training loop in a thread of its own)."""
    global _early_signals
    if _early_signals is not None and _early_signals.installed:
        return
    from .signals import SignalPipe

    pipe = SignalPipe()
    _early_signals = pipe if pipe.install() else None
    if _early_signals is None:
        pipe.close()


def _catch_sigusr1(t) -> None:
    """Black box: SIGUSR1 to this rank is a snapshot of every rank (signals.py): through the pipe set up at install,
    else one set up now (only where the main thread starts the tracer)."""
    from .signals import SignalPipe

    pipe = _early_signals
    if pipe is not None and pipe.installed:
        pipe.drain()  # (a signal before the tracer existed: there was no ring to take)
        t.rec.signals = pipe
        return
    pipe = SignalPipe()
    if pipe.install():
        t.rec.signals = pipe
    else:
        pipe.close()


def _uncaught(exc: BaseException) -> None:
    """The program ends with an uncaught exception (tracebacks.py): the black box's snapshot of every rank."""
    t = current.tracer
    if t is not None:
        from .blackbox import exception_trigger

        exception_trigger(t, exc)


def _start_clock() -> None:
    """Align this rank's clock to rank 0's: in the background where the store allows (clock.Sync), else now."""
    global _clock_sync
    t = current.tracer
    if t is None or not t.rec.enabled:
        return
    try:
        store = dist.distributed_c10d._get_default_store()
        if clock.Sync.possible(store):
            _clock_sync = clock.Sync(store, t.rank, t.world_size, t.write)
            _clock_sync.start()
            return
    except Exception:  # noqa: BLE001 - the exchange in line then
        pass
    _align_clock("start")


def _left(how: str) -> None:
    """Record that this rank leaves the job alive (destroy_process_group, or the end of the program): a rank whose
    file just stops while the others go on did not, and the analysis says it died."""
    t = current.tracer
    if t is not None and not t.left:
        t.left = True
        current.safe(t.write, {"k": LEFT, "t": time.monotonic_ns(), "how": how})


def _end_clock(grace_s: float = 1.0) -> None:
    """At destroy_process_group: end the background exchange (it measured the drift while the job ran), or
    measure the end offset now where it runs in line."""
    global _clock_sync
    sync, _clock_sync = _clock_sync, None
    if sync is not None:
        sync.stop(grace_s)
    else:
        _align_clock("end", timeout_s=3.0)


def _align_clock(phase: str, timeout_s: float = 30.0) -> None:
    t = current.tracer
    if t is None or not t.rec.enabled or getattr(t, f"_clock_{phase}", False):
        return
    setattr(t, f"_clock_{phase}", True)
    try:
        store = dist.distributed_c10d._get_default_store()
        result = clock.exchange(store, t.rank, t.world_size, phase, timeout_s=timeout_s)
    except Exception as e:  # noqa: BLE001 - no alignment is better than a broken job
        t.write(clock.error_record(phase, e))
        return
    if result is not None:
        t.write(clock.offset_record(phase, *result))


def stop() -> None:
    """Flush and close this process's trace (atexit; also called by tracer.trace())."""
    global _clock_sync
    t = current.tracer
    if t is None:
        return
    sync, _clock_sync = _clock_sync, None
    if sync is not None:  # tracing ends without destroy_process_group: no waiting for anyone's clock
        sync.stop(0.0)
    if not hasattr(sys, "last_value"):  # (set when an uncaught exception ended the program: that rank died)
        _left("exit")
    current.tracer = None
    memory = sys.modules.get(_PACKAGE + ".record.memory")  # (loaded only where memory is recorded)
    if memory is not None:
        memory.stop()
    try:
        t.close()
    except Exception:  # noqa: BLE001
        pass


# -- the dispatcher kernels ------------------------------------------------------------------------
def _register_kernels() -> None:
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("c10d", "IMPL")
    for name, spec in SPECS.items():
        overload = getattr(getattr(torch.ops.c10d, name, None), "default", None)
        if overload is None:
            continue  # an op this torch does not have
        lib.impl(name, _make_kernel(overload, spec), "BackendSelect", with_keyset=True)
    _lib = lib
    wait_tensor = getattr(getattr(torch.ops._c10d_functional, "wait_tensor", None), "default", None)
    if wait_tensor is not None:
        global _funcol_lib
        _funcol_lib = torch.library.Library("_c10d_functional", "IMPL")
        _funcol_lib.impl("wait_tensor", _make_wait_tensor_kernel(wait_tensor), "BackendSelect", with_keyset=True)


def _make_wait_tensor_kernel(overload):
    redispatch = overload.redispatch
    backend_select = DispatchKey.BackendSelect

    def kernel(keyset, *args, **kwargs):
        keyset = keyset.remove(backend_select)
        t = current.tracer
        if t is None or not t.completion.by_ptr:
            return redispatch(keyset, *args, **kwargs)
        t0 = time.monotonic_ns()
        result = redispatch(keyset, *args, **kwargs)
        current.safe(t.completion.tensor_waited, args[0], t0, time.monotonic_ns())
        return result

    return kernel


def _make_kernel(overload, spec):
    # the handle's method itself: OpOverload.redispatch is a Python method around it (a frame saved per op)
    redispatch = getattr(getattr(overload, "_handle", None), "redispatch_boxed", None) or overload.redispatch
    backend_select = DispatchKey.BackendSelect
    nested = current.nested

    def kernel(keyset, *args, **kwargs):
        keyset = keyset.remove(backend_select)
        t = current.tracer
        if t is None or kwargs or (nested and get_ident() in nested):
            return redispatch(keyset, *args, **kwargs)
        ev = None
        try:
            ev = t.begin(spec, args)
        except Exception as e:  # noqa: BLE001
            t.fail(e)
        tid = get_ident()
        nested.add(tid)
        try:
            result = redispatch(keyset, *args)
        except BaseException as e:
            nested.discard(tid)
            if ev is not None:
                current.safe(t.completion.error, ev, e)
            raise
        nested.discard(tid)
        if ev is not None:
            try:
                t.completion.issued(ev, result)
            except Exception as e:  # noqa: BLE001
                t.fail(e)
        return result

    return kernel


# -- backward(): the call site for collectives that autograd's device threads issue ------------------------------
def _patch_backward() -> None:
    """Remember the user's backward() line while it runs: on CUDA, DDP's gradient all-reduces are issued from
    autograd's device threads, where no Python frame of the user's is on the stack."""
    autograd = torch.autograd
    orig = autograd.backward
    if getattr(orig, "_disttrace_orig", None) is not None:
        return

    @functools.wraps(orig)
    def backward(*args, **kwargs):
        t = current.tracer
        if t is None:
            return orig(*args, **kwargs)
        prev = t.backward_site
        try:
            t.backward_site = callsite.walk(2)[0]
        except Exception:  # noqa: BLE001
            pass
        try:
            return orig(*args, **kwargs)
        finally:
            t.backward_site = prev

    backward._disttrace_orig = orig  # type: ignore[attr-defined]
    autograd.backward = backward


# -- training steps ---------------------------------------------------------------------------------------------
def mark_step(src: str = "api") -> None:
    """A training step ends here: a "step" record (the reader numbers ops by the markers before them). `src`:
    "api" (disttrace.tracer.mark_step) or "profiler" (torch.profiler's step()). Never raises."""
    global _steps
    t = current.tracer
    if t is None:
        return
    try:
        _steps += 1
        t.write({"k": STEP, "t": time.monotonic_ns(), "n": _steps, "src": src})
    except Exception as e:  # noqa: BLE001
        t.fail(e)


def _patch_profiler_step() -> None:
    """torch.profiler's convention: profile.step() is called at the end of each iteration. Honour it as a
    marker (the call costs a record more; record_function regions are not looked at: that would mean wrapping
    every record_function of every job)."""
    profile = torch.profiler.profile
    orig = profile.step
    if getattr(orig, "_disttrace_orig", None) is not None:
        return

    @functools.wraps(orig)
    def step(self, *args, **kwargs):
        mark_step("profiler")  # before: the profiler's own step work (an export, perhaps) is not the step's
        return orig(self, *args, **kwargs)

    step._disttrace_orig = orig  # type: ignore[attr-defined]
    profile.step = step


# -- Work.wait -----------------------------------------------------------------------------------
def _patch_work_wait() -> None:
    Work = dist.distributed_c10d.Work
    if getattr(Work.wait, "_disttrace", False):
        return
    orig = Work.wait

    def wait(self, *args, **kwargs):
        t = current.tracer
        if t is None:
            return orig(self, *args, **kwargs)
        c = t.completion
        lean = c.lean_sync  # the lean path's synchronous ops, by the job's Work: in the watchdog's sight till the end
        if lean:
            key = id(self)
            entry = lean.get(key)
            if entry is not None:
                try:
                    result = orig(self, *args, **kwargs)
                except BaseException as e:
                    lean.pop(key, None)
                    current.safe(c.lean_end, entry, monotonic_ns(), e)
                    raise
                now = monotonic_ns()
                lean.pop(key, None)
                try:
                    c.lean_done(entry, now)
                except Exception as e:  # noqa: BLE001
                    t.fail(e)
                return result
        works = c.sync_works  # the fast path's synchronous ops, by the job's Work
        ev = works.pop(id(self), None) if works else None
        if ev is None:  # the kernel's path's, by thread
            tls = c.tls
            ev = tls.sync
            if ev is not None:
                tls.sync = None
        if ev is not None:
            # the synchronous op just issued on this thread (distributed_c10d waits on it next): it ends when
            # this wait returns
            try:
                result = orig(self, *args, **kwargs)
            except BaseException as e:
                current.safe(c.complete, ev, e)
                raise
            try:
                c.complete(ev, None, monotonic_ns())
            except Exception as e:  # noqa: BLE001
                t.fail(e)
            return result
        if not c.pending:
            return orig(self, *args, **kwargs)  # nothing of ours to time
        t0 = time.monotonic_ns()
        current.safe(c.wait_begins, self, t0)
        try:
            result = orig(self, *args, **kwargs)
        except BaseException as e:
            current.safe(c.waited, self, t0, time.monotonic_ns(), e)
            raise
        try:
            c.waited(self, t0, time.monotonic_ns(), None)
        except Exception as e:  # noqa: BLE001
            t.fail(e)
        return result

    # the lean branch above in C where the compiled part is built (compiled.py): the rest is this function, called
    # from it
    compiled = offers("Wait")
    if compiled is not None:
        wait = compiled(orig, wait, vars(current))
    wait._disttrace = True  # type: ignore[attr-defined]
    wait._disttrace_orig = orig  # type: ignore[attr-defined]
    wait.__doc__ = orig.__doc__
    Work.wait = wait
