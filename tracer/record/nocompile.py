"""disttrace's code is invisible to torch.compile: the job compiles as it would untraced.

While a compiled function runs, TorchDynamo evaluates every Python frame that starts under it, and the dispatcher
starts ours (the c10d kernels, the fastpath's wrappers, Work.wait's) from the job's own ops: Dynamo would try to
compile the tracer's frames, break graphs on them and recompile (a compiled DDP job got more graph breaks and ran
slower). The compiler's own mechanism for code it must not trace is a code object's execution strategy: SKIP
for the frame itself and for every frame it calls (what the recording calls into, torch included, ran untraced
with no Python frame at all). It is a flag on the code object, checked in C: nothing is added to the hot path.

`hide(modules)` sets it on every code object written in the modules' files (functions, methods, nested functions
and lambdas): never on a decorator's wrapper that lives elsewhere (contextlib's `helper` serves every
@contextmanager of the job: skipping it changed how the job's own code compiled).
The C-level API needs no import of torch._dynamo (slow to import at start-up); where it is missing (torch < 2.6) this
does nothing and says so in the return value.
"""

from __future__ import annotations

import types
from typing import Iterable, Iterator


def hide(modules: Iterable[types.ModuleType]) -> int:
    """Make Dynamo skip the modules' code and whatever it calls. Returns how many code objects were marked."""
    try:
        from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy
    except ImportError:
        return 0
    skip = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    n = 0
    for code in _codes(modules):
        set_code_exec_strategy(code, skip)
        n += 1
    return n


def _codes(modules: Iterable[types.ModuleType]) -> Iterator[types.CodeType]:
    seen: set[int] = set()
    codes = []
    for m in modules:
        path = getattr(m, "__file__", None)
        if path:
            codes += [f.__code__ for obj in vars(m).values() for f in _functions_of(obj)
                      if f.__code__.co_filename == path]
    while codes:
        code = codes.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        yield code
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]  # nested functions, lambdas


def _functions_of(obj) -> list:
    """The plain functions a module attribute holds: itself and what it wraps, or a class's methods, static and
    class methods and properties. The caller keeps those written in the module's own file: a decorator's wrapper
    (contextlib's, for one) is shared by every function it decorates, and the compiler must go on seeing those."""
    if isinstance(obj, types.FunctionType):
        out = []
        while isinstance(obj, types.FunctionType) and len(out) < 8:
            out.append(obj)
            obj = getattr(obj, "__wrapped__", None)
        return out
    if isinstance(obj, type):
        out = []
        for attr in vars(obj).values():
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            if isinstance(attr, property):
                out += [f for f in (attr.fget, attr.fset, attr.fdel) if isinstance(f, types.FunctionType)]
            elif isinstance(attr, types.FunctionType):
                out.append(attr)
        return out
    return []
