"""The c10d operators the recorder sees, and where each one's arguments are: shared by hooks.py (a dispatcher
kernel per operator), fastpath.py (ProcessGroup's methods, which issue the same operators) and capture.py (the
begin record)."""

from __future__ import annotations

SYNC_P2P_APIS = frozenset({"send", "recv"})  # P2P calls that wait for their op before returning


class Spec:
    """Where an op's arguments are, by position in its c10d schema. `api`: the default api name of an op issued
    without a torch.distributed Python call on the stack."""

    __slots__ = ("name", "op", "api", "inp", "out", "pg", "root", "peer", "tag", "async_arg", "inplace")

    def __init__(self, name, op, api, pg, inp=None, out=None, root=None, peer=None, tag=None, async_arg=None,
                 inplace=False):
        self.name, self.op, self.api, self.pg, self.inp, self.out = name, op, api, pg, inp, out
        self.root, self.peer, self.tag, self.async_arg, self.inplace = root, peer, tag, async_arg, inplace


# c10d::<name> -> how to read it. Positions follow the schemas of torch.ops.c10d (checked at install).
SPECS = {s.name: s for s in (
    Spec("allreduce_", "all_reduce", "all_reduce", pg=1, inp=0, async_arg=4, inplace=True),
    Spec("allreduce_coalesced_", "all_reduce", "all_reduce_coalesced", pg=1, inp=0, async_arg=3, inplace=True),
    Spec("broadcast_", "broadcast", "broadcast", pg=1, inp=0, root=2, async_arg=4, inplace=True),
    Spec("reduce_", "reduce", "reduce", pg=1, inp=0, root=3, async_arg=5, inplace=True),
    Spec("allgather_", "all_gather", "all_gather", pg=2, inp=1, out=0, async_arg=3),
    Spec("_allgather_base_", "all_gather", "all_gather_into_tensor", pg=2, inp=1, out=0, async_arg=3),
    Spec("allgather_coalesced_", "all_gather", "all_gather_coalesced", pg=2, inp=1, out=0, async_arg=3),
    Spec("allgather_into_tensor_coalesced_", "all_gather", "all_gather_into_tensor_coalesced", pg=2, inp=1, out=0,
         async_arg=3),
    Spec("reduce_scatter_", "reduce_scatter", "reduce_scatter", pg=2, inp=1, out=0, async_arg=4),
    Spec("_reduce_scatter_base_", "reduce_scatter", "reduce_scatter_tensor", pg=2, inp=1, out=0, async_arg=4),
    Spec("reduce_scatter_tensor_coalesced_", "reduce_scatter", "reduce_scatter_tensor_coalesced", pg=2, inp=1,
         out=0, async_arg=4),
    Spec("alltoall_", "all_to_all", "all_to_all", pg=2, inp=1, out=0, async_arg=3),
    Spec("alltoall_base_", "all_to_all", "all_to_all_single", pg=2, inp=1, out=0, async_arg=5),
    Spec("barrier", "barrier", "barrier", pg=1, async_arg=3),
    Spec("monitored_barrier_", "barrier", "monitored_barrier", pg=1),
    Spec("gather_", "gather", "gather", pg=2, inp=1, out=0, root=3, async_arg=4),
    Spec("scatter_", "scatter", "scatter", pg=2, inp=1, out=0, root=3, async_arg=4),
    Spec("send", "send", "isend", pg=1, inp=0, peer=2, tag=3),
    Spec("recv_", "recv", "irecv", pg=1, out=0, peer=2, tag=3),
    Spec("recv_any_source_", "recv", "irecv", pg=1, out=0, tag=2),
)}
