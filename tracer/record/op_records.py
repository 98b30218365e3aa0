"""An op's records as bytes: "b" (begin), "e" (end) and "w" (the user's wait), formatted by hand on the hot path.

The templates are built here once, at import, from the format's record kinds (format.py), and filled in with
`%` per op: cheaper than a dict through orjson. Records are compact JSON with "k" first, as orjson
writes them, so that a record is the same bytes whichever way it was written.
"""

from __future__ import annotations

import threading

import orjson
import torch

from ..format import BEGIN, END, WAIT, kind_marker


# head (the begin record up to its id, from BeginHeads), id, [group_seq or pair_seq], [',"in":' summary], time
BEGIN_LINE = b'%b%d,"t":%d}\n'
BEGIN_LINE_GS = b'%b%d,"gs":%d,"t":%d}\n'
BEGIN_LINE_PS = b'%b%d,"ps":%d,"t":%d}\n'
BEGIN_LINE_IN = b'%b%d%b,"t":%d}\n'
BEGIN_LINE_GS_IN = b'%b%d,"gs":%d%b,"t":%d}\n'
BEGIN_LINE_PS_IN = b'%b%d,"ps":%d%b,"t":%d}\n'
# id, time, [the backend's sequence number]: the common end, with no error, peer or summary
END_OPEN = b"{" + kind_marker(END) + b',"i":'  # (compiled.py's end record starts with it too)
END_LINE = END_OPEN + b'%d,"t":%d}\n'
END_LINE_SEQ = END_OPEN + b'%d,"t":%d,"seq":%d}\n'
# ... and the NCCL kernel's duration by its CUDA events, from the completion hook (ncclhook.py)
END_LINE_SEQ_DEV = b"{" + kind_marker(END) + b',"i":%d,"t":%d,"seq":%d,"dev":%d}\n'
WAIT_LINE = b"{" + kind_marker(WAIT) + b',"i":%d,"t0":%d,"t1":%d}\n'  # id, the wait's start and end

_BEGIN_OPEN = b"{" + kind_marker(BEGIN) + b',"op":"%b","api":%b,"g":%d'
_MAIN_THREAD = threading.main_thread().ident
_CACHE_LIMIT = 20000  # begin-record heads kept per tracer


def end_fields(ev_id: int, t: int, seq, err: BaseException | None, bound: bool, dev: int | None = None) -> dict:
    """The end record that is not END_LINE (an error, a bound, a peer or a summary to add), up to its peer."""
    rec = {"k": END, "i": ev_id, "t": t}
    if bound:
        rec["bound"] = True  # completion seen only at exit: the op ended at or before t
    if seq is not None:
        rec["seq"] = seq
    if dev is not None:
        rec["dev"] = dev  # the device's duration of the op (CUDA events), ns
    if err is not None:
        rec["st"] = "error"
        rec["err"] = f"{type(err).__name__}: {err}"[:1000]
    return rec


def first_tensor(obj):
    while isinstance(obj, (list, tuple)):
        if not obj:
            return None
        obj = obj[0]
    return obj if isinstance(obj, torch.Tensor) else None


def nbytes(obj) -> tuple[int, object]:
    """Total bytes of the tensors in obj and the first tensor (for dtype and shape)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size(), obj
    total, first = 0, None
    for x in obj or ():
        if isinstance(x, torch.Tensor):
            total += x.numel() * x.element_size()
            first = first if first is not None else x
        else:
            for t in x:
                total += t.numel() * t.element_size()
                first = first if first is not None else t
    return total, first


class PairSeq:
    """The next number of one direction, peer and tag's P2P ops on this rank (a record's "ps"): what matches a
    send with its recv after a black box's ring has wrapped, as a group's next_seq does a collective."""

    __slots__ = ("next_seq",)

    def __init__(self) -> None:
        self.next_seq = 0


class BeginHeads(dict):
    """Tracer.begin_fields() key -> (the begin record up to its id, is it a collective, does it need _special,
    the PairSeq of a P2P op whose peer is known, else None).

    Everything but the op's id, group_seq and time repeats from one call of a line to the next: that part of the
    record is formatted once per distinct key (cheaper than formatting it each time). The key:
    (spec, api, origin, site, group, root, peer, tag, dtype, shape, is_cuda, is_async, thread id[, bytes]), root
    and peer group-local; bytes only where they do not follow from dtype and shape."""

    __slots__ = ()

    def make(self, key, nbytes: int, pairs: dict) -> tuple[bytes, bool, bool, PairSeq | None]:
        """The entry for key, made and kept; `pairs`: the tracer's PairSeq by (op, global peer, tag), which outlive
        this cache (a number never starts again)."""
        spec, api, origin, site, g, root, peer, tag, dtype, shape, cuda, is_async, tid = key[:13]
        op = spec.op
        root = None if root is None else g.global_rank(root)
        peer = None if peer is None else g.global_rank(peer)
        parts = [_BEGIN_OPEN % (op.encode(), orjson.dumps(api), g.gidx)]
        if root is not None:
            parts.append(b',"root":%d' % root)
        if peer is not None:
            parts.append(b',"peer":%d' % peer)
        if tag is not None:
            parts.append(b',"tag":%d' % tag)
        parts.append(b',"bytes":%d' % nbytes)
        if dtype is not None:
            parts.append(b',"dtype":%b,"shape":%b' % (orjson.dumps(str(dtype).removeprefix("torch.")),
                                                    orjson.dumps(list(shape))))
        parts.append(b',"async":true' if is_async else b',"async":false')
        if site:
            parts.append(b',"site":' + orjson.dumps(site))
        if origin and origin != api:
            parts.append(b',"origin":' + orjson.dumps(origin))
        if tid != _MAIN_THREAD:
            parts.append(b',"th":%d' % tid)
        parts.append(b',"i":')
        special = cuda or (op == "recv" and peer is None) or (is_async and api.startswith("funcol."))
        pair = None
        if (op == "send" or op == "recv") and peer is not None:
            pair = pairs.get((op, peer, tag))
            if pair is None:
                pair = pairs[(op, peer, tag)] = PairSeq()
        fixed = (b"".join(parts), op != "send" and op != "recv", special, pair)
        if len(self) > _CACHE_LIMIT:  # a job has few distinct lines and shapes; a pathological one is cut
            self.clear()
        self[key] = fixed
        return fixed
