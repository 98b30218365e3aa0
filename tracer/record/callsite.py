"""Who called a collective: the user's line, the torch.distributed function and the component that issued it.

One walk up the Python stack from the dispatcher kernel gives all three. Each code object is classified once
and cached (the walk then costs a dict lookup per frame):
- site: the first frame outside torch and disttrace, as "file:line in function";
- api: the outermost torch.distributed.distributed_c10d function on the way (what the user or library called,
  e.g. `all_gather_object` rather than the `all_gather` it calls inside);
- origin: the innermost frame of a known component (DDP, FSDP, DTensor, tensor parallel, functional collectives,
  pipelining, DeviceMesh), as "component.function"; a graph that torch.compile generated is "compiled.forward"
  (FX) or "compiled.call" (Inductor), and the site is the line that called the compiled function.
"""

from __future__ import annotations

import os
import sys

import torch

from ..format import GENERATED, TORCH_DIR, frame_kind
from ..format import USER as USER_FRAME
from .compiled import offers

# where frame_kind finds torch (the paths of components are below it); torch's own where it found none
_TORCH_DIR = TORCH_DIR or os.path.dirname(torch.__file__) + os.sep

# (path fragment below torch/, component); the first that matches wins, so longer paths come first
_COMPONENTS = (
    ("nn/parallel/distributed.py", "ddp"),
    ("distributed/fsdp/", "fsdp"),
    ("distributed/tensor/parallel/", "tp"),
    ("distributed/tensor/", "dtensor"),
    ("distributed/_functional_collectives", "funcol"),
    ("distributed/pipelining/", "pipelining"),
    ("distributed/device_mesh.py", "device_mesh"),
    ("distributed/_composable/", "composable"),
    ("distributed/algorithms/", "algorithms"),
    ("distributed/checkpoint/", "checkpoint"),
    ("distributed/optim/", "optim"),
    ("autograd/", "autograd"),
)
_C10D_FILES = ("distributed/distributed_c10d.py",)

USER, OWN, C10D, TORCH = 0, 1, 2, 3
# frames too generic to name an origin: the next one out says more
_GENERIC = frozenset({"<listcomp>", "<genexpr>", "<dictcomp>", "<lambda>", "wrapper", "inner", "decorate_context",
                      "_fn", "fn"})
# A tensor subclass's or mode's handler passes the op on; the line that called the collective is further out
_HANDLERS = frozenset({"__torch_dispatch__", "__torch_function__"})
# Each code object is classified once, keyed by id (a code object's own hash is recomputed on every lookup from its
# name, constants and names: a cost the walk would pay on every frame). The user's code objects: id -> their call
# sites by instruction offset ("file:line in function"; the code itself under -1, so that no other code object can
# take its id while the entry exists). Every other code object: id -> (kind, the api or origin it names, code).
_users: dict = {}
_others: dict = {}
_SITES_LIMIT = 2000  # call sites kept per code object; a generated-code pathology is cut


def _classify(code) -> tuple[int, str | None]:
    path = code.co_filename
    if code.co_name in _HANDLERS:
        return OWN, None
    kind = frame_kind(path)
    if kind == USER_FRAME:
        return USER, None
    if kind == GENERATED:  # a compiled graph's code (FX, Inductor): the user's line is the caller's
        return TORCH, f"compiled.{code.co_name}"
    if not path.startswith(_TORCH_DIR):
        return OWN, None  # disttrace's or the standard library's: neither the user's line nor torch
    rel = path[len(_TORCH_DIR):].replace(os.sep, "/")
    if rel in _C10D_FILES:  # a public function of distributed_c10d names the api (not its helpers or decorators)
        return C10D, code.co_name if code.co_name[0] != "_" and code.co_name != "wrapper" else None
    for fragment, component in _COMPONENTS:
        if rel.startswith(fragment):
            return TORCH, None if code.co_name in _GENERIC else f"{component}.{code.co_qualname}"
    return TORCH, None


def _enter(code) -> None:
    kind, name = _classify(code)
    if kind == USER:
        _users[id(code)] = {-1: code}
    else:
        _others[id(code)] = (kind, name, code)


def _site(f, sites: dict) -> str:
    if len(sites) > _SITES_LIMIT:
        code = sites[-1]
        sites.clear()
        sites[-1] = code
    code = f.f_code
    site = sites[f.f_lasti] = f"{code.co_filename}:{f.f_lineno} in {code.co_name}"
    return site


def walk(depth: int = 2) -> tuple[str | None, str | None, str | None]:
    """(site, api, origin) for the code that called into the frame `depth` levels up."""
    users, others = _users, _others
    f = sys._getframe(depth)
    api = origin = None
    while f is not None:
        key = id(f.f_code)
        sites = users.get(key)
        if sites is not None:  # the user's code
            # keyed by the instruction offset: the line number is computed from it by scanning a table
            site = sites.get(f.f_lasti)
            return site if site is not None else _site(f, sites), api, origin
        entry = others.get(key)
        if entry is None:
            _enter(f.f_code)
            continue  # (looked at again, now known)
        name = entry[1]
        if name is not None:
            if entry[0] == C10D:
                api = name  # the outermost one wins
            elif origin is None:
                origin = name  # the innermost one wins
        f = f.f_back
    return None, api, origin


# The compiled walk (_hotpath.c, CPython 3.11-3.13): the same walk over the interpreter's frames, without making frame
# objects, sharing these caches; each miss is handed back to the code above (compiled.py says when it is absent).
py_walk = walk
_compiled_walk = offers("walk")
if _compiled_walk is not None:
    offers("init_walk")(_users, _others, _enter, py_walk, C10D)
    walk = _compiled_walk
