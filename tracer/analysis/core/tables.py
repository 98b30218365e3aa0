"""The analysis' collectives and messages as columns, read like lists of CollectiveInstance / P2PMatch.

A million-event trace has ~10^5 collectives and ~10^5 messages; an object for each, with its numbers boxed and its
per-rank data, would cost many times the columns' memory. Here each field is one typed array; `table[k]` and
iteration make the object on demand (a CollectiveInstance is a view that reads and writes these columns, a P2PMatch
a small copy). Loops over every instance or message inside the analysis read the columns directly.
"""

from __future__ import annotations

from array import array
from itertools import repeat
from math import nan
from typing import Iterator
from weakref import WeakValueDictionary

from ...data.table.columns import (CodedColumn, copy_of, extend_from_numpy, filled, from_numpy, order_by, repeat_each,
                            run_starts, typecode)
from ...data.table import NONE, EventTable
from .matching import finished, finished_column
from .results import NULL, Analysis, CollectiveInstance, P2PMatch


def _opt_float(v: float | None) -> float:
    return nan if v is None else v


class CollectiveTable:
    """Collective instances, k = 0..n-1. The rows of instance k (in arrival order) are
    `rows[offset[k]:offset[k + 1]]`, with their waits at the same positions of `waits`; ranks, starts and ends
    are read from the event table (`ends`: an async op's wait() end where its own end is unknown)."""

    def __init__(self, events: EventTable):
        self.events = events
        self.op = CodedColumn()
        self.wait_kind = CodedColumn()
        self.gid = array("i")
        self.group_seq = array("q")
        self.offset = array("q", [0])
        self.rows = array("i")
        self.waits = array("q")
        self.bytes = array("q")
        self.skew_ns = array("q")
        self.duration_ns = array("q")    # NULL: incomplete
        self.algbw_gbps = array("d")     # NaN: none
        self.busbw_gbps = array("d")
        self.model_ns = array("d")
        self.slow = bytearray()
        self.root = array("q")           # NONE: no root
        self.complete = bytearray()
        self.is_async = bytearray()
        self.last_arrival = array("q")
        self.volume_bytes = array("q")
        self.missing: dict[int, tuple[int, ...]] = {}  # only the instances with missing ranks
        # the view of an instance while someone holds it: reading the same instance twice gives the same object
        self._views: WeakValueDictionary[int, CollectiveInstance] = WeakValueDictionary()

    def append(self, op: str, gid: int, group_seq: int, rows: list[int], waits: list[int], nbytes: int,
               wait_kind: str, skew_ns: int, duration_ns: int | None, algbw: float | None, busbw: float | None,
               root: int | None, complete: bool, is_async: bool, last_arrival: int, volume_bytes: int,
               missing: tuple[int, ...]) -> None:
        k = len(self.gid)
        self.op.append(op)
        self.wait_kind.append(wait_kind)
        self.gid.append(gid)
        self.group_seq.append(group_seq)
        self.rows.extend(rows)
        self.waits.extend(waits)
        self.offset.append(len(self.rows))
        self.bytes.append(nbytes)
        self.skew_ns.append(skew_ns)
        self.duration_ns.append(NULL if duration_ns is None else duration_ns)
        self.algbw_gbps.append(_opt_float(algbw))
        self.busbw_gbps.append(_opt_float(busbw))
        self.model_ns.append(nan)
        self.slow.append(0)
        self.root.append(NONE if root is None else root)
        self.complete.append(complete)
        self.is_async.append(is_async)
        self.last_arrival.append(last_arrival)
        self.volume_bytes.append(volume_bytes)
        if missing:
            self.missing[k] = missing

    @classmethod
    def of(cls, events: EventTable, op: list[str], wait_kind: list[str], cols: dict, rows, waits, offset,
           missing: dict[int, tuple[int, ...]]) -> "CollectiveTable":
        """A table of n instances at once: op and wait_kind by instance, the other columns (`append`'s names) and
        the rows, waits and offsets as numpy arrays."""
        import numpy as np

        out = cls(events)
        out.op.extend(op)
        out.wait_kind.extend(wait_kind)
        for name in ("gid", "group_seq", "bytes", "skew_ns", "duration_ns", "algbw_gbps", "busbw_gbps", "root",
                     "last_arrival", "volume_bytes"):
            extend_from_numpy(getattr(out, name), cols[name])
        out.offset = from_numpy(offset)
        out.rows = from_numpy(rows, "i")
        out.waits = from_numpy(waits)
        n = len(op)
        out.model_ns = filled("d", n, nan)
        out.slow = bytearray(n)
        out.complete = bytearray(np.asarray(cols["complete"], np.uint8).tobytes())
        out.is_async = bytearray(np.asarray(cols["is_async"], np.uint8).tobytes())
        out.missing = missing
        return out

    def __len__(self) -> int:
        return len(self.gid)

    def __getitem__(self, k: int) -> CollectiveInstance:
        n = len(self.gid)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("collective index out of range")
        view = self._views.get(k)
        if view is None:
            view = self._views[k] = CollectiveInstance(self, k)
        return view

    def __iter__(self) -> Iterator[CollectiveInstance]:
        return map(CollectiveInstance, repeat(self), range(len(self.gid)))

    # -- per-instance reads (CollectiveInstance's properties) ----------------------------------------------------
    def rows_of(self, k: int) -> array:
        return _part(self.rows, self.offset[k], self.offset[k + 1])

    def waits_of(self, k: int) -> array:
        return _part(self.waits, self.offset[k], self.offset[k + 1])

    def ranks_of(self, k: int) -> array:
        return array("q", map(self.events.rank.__getitem__, self.rows_of(k)))

    def starts_of(self, k: int) -> array:
        return array("q", map(self.events.start_ns.__getitem__, self.rows_of(k)))

    def ends_of(self, k: int) -> array:
        rows = self.rows_of(k)
        if self.is_async[k]:
            return finished(self.events, rows)  # the op-end rule: a wait() return where the end is unknown
        return array("q", map(self.events.end_ns.__getitem__, rows))

    def row_ends(self) -> "object":
        """ends_of for every instance at once: each row's end (rows in the table's order), in numpy."""
        import numpy as np

        rows = np.frombuffer(self.rows, np.int32)
        sizes = np.diff(np.frombuffer(self.offset, np.int64))
        is_async = repeat_each(np.frombuffer(self.is_async, np.uint8) != 0, sizes)
        return np.where(is_async, finished_column(self.events)[rows],
                        np.frombuffer(self.events.end_ns, np.int64)[rows])

    def culprit_rows(self, culprits) -> "object":
        """Each instance's row of its culprit (`culprits`: the rank its ranks waited for, None or -1 for none; a rank
        is in an instance once), -1 for none, in numpy."""
        import numpy as np

        out = np.full(len(self.gid), -1, np.int64)
        rows = np.frombuffer(self.rows, np.int32)
        k = repeat_each(np.arange(len(self.gid)), np.diff(np.frombuffer(self.offset, np.int64)))
        culprit = np.array([-1 if c is None else c for c in culprits], np.int64)
        at = np.frombuffer(self.events.rank, np.int32)[rows] == culprit[k]
        out[k[at]] = rows[at]
        return out

    def column(self, name: str) -> "object":
        """A column of the instances (`append`'s names; a coded one's codes) in numpy, over the same memory."""
        import numpy as np

        col = getattr(self, name)
        if isinstance(col, CodedColumn):
            col = col.codes
        return np.frombuffer(col, np.uint8 if isinstance(col, bytearray) else typecode(col))

    def groups_by(self, names: tuple[str, ...], where=None) -> list:
        """The instances of each distinct value of the columns `names` (numpy arrays of indexes, each in table
        order), in the order of their first instances; `where`: of the instances it marks only (a numpy bool
        column). What a report or view of ~10^5 collectives sums or takes the median of, without a view each."""
        import numpy as np

        picked = np.arange(len(self.gid)) if where is None else np.flatnonzero(where)
        keys = [self.column(name)[picked] for name in names]
        order = order_by(*keys)  # (stable: each value's instances in table order)
        starts = np.flatnonzero(run_starts(*(k[order] for k in keys)))
        groups = np.split(picked[order], starts[1:]) if len(picked) else []
        groups.sort(key=lambda g: int(g[0]))
        return groups

    def wait_totals(self) -> "object":
        """Each instance's total wait (the sum of its ranks' waits; 0 without rows), in numpy: one pass over the
        waits, where summing each instance's would make a view of each (as many as the trace has collectives)."""
        import numpy as np

        totals = np.zeros(len(self.gid), np.int64)
        offset = np.frombuffer(self.offset, np.int64)
        filled = offset[1:] > offset[:-1]
        if filled.any():
            totals[filled] = np.add.reduceat(np.frombuffer(self.waits, np.int64), offset[:-1][filled])
        return totals

    def most_waited(self, top: int) -> list[int]:
        """The instances whose ranks waited longest in total, most first (equal totals in table order), at most
        `top` of them, none whose ranks did not wait."""
        import numpy as np

        totals = self.wait_totals()
        return [k for k in np.argsort(-totals, kind="stable")[:top].tolist() if totals[k] > 0]

    def first_starts(self) -> array:
        """The earliest arrival of every instance (0 for one without rows), in numpy: one pass over the rows."""
        import numpy as np

        n = len(self.gid)
        first = np.zeros(n, np.int64)
        if len(self.rows):
            starts = np.frombuffer(self.events.start_ns, np.int64)[np.frombuffer(self.rows, np.int32)]
            offset = np.frombuffer(self.offset, np.int64)
            filled = offset[1:] > offset[:-1]
            first[filled] = np.minimum.reduceat(starts, offset[:-1][filled])
        return array("q", first.tobytes())


class P2PTable:
    """Matched messages, k = 0..n-1; a missing side's row is -1 in `send`/`recv` (None in the P2PMatch)."""

    def __init__(self):
        self.src = array("i")
        self.dst = array("i")
        self.order = array("i")
        self.send = array("i")
        self.recv = array("i")
        self.bytes = array("q")
        self.late_sender_ns = array("q")
        self.late_receiver_ns = array("q")
        self.transfer_ns = array("q")  # NONE: unknown (transfers are positive)

    def append(self, src: int, dst: int, order: int, send: int | None, recv: int | None, nbytes: int,
               late_sender_ns: int, late_receiver_ns: int, transfer_ns: int | None) -> None:
        self.src.append(src)
        self.dst.append(dst)
        self.order.append(order)
        self.send.append(NONE if send is None else send)
        self.recv.append(NONE if recv is None else recv)
        self.bytes.append(nbytes)
        self.late_sender_ns.append(late_sender_ns)
        self.late_receiver_ns.append(late_receiver_ns)
        self.transfer_ns.append(NONE if transfer_ns is None else transfer_ns)

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, k: int) -> P2PMatch:
        return _match(self.src[k], self.dst[k], self.order[k], self.send[k], self.recv[k], self.bytes[k],
                      self.late_sender_ns[k], self.late_receiver_ns[k], self.transfer_ns[k])

    def __iter__(self) -> Iterator[P2PMatch]:
        return map(_match, self.src, self.dst, self.order, self.send, self.recv, self.bytes, self.late_sender_ns,
                   self.late_receiver_ns, self.transfer_ns)


def _part(col, a: int, b: int) -> array:
    """col[a:b] as an array, as an array's slice is: a column of a saved analysis is the mapped file (a memoryview,
    whose slice would be one too, and which an array cannot be added to)."""
    return col[a:b] if type(col) is array else copy_of(col[a:b])


def _match(src, dst, order, send, recv, nbytes, ls, lr, transfer) -> P2PMatch:
    return P2PMatch(src, dst, order, None if send == NONE else send, None if recv == NONE else recv, nbytes, ls, lr,
                    None if transfer == NONE else transfer)


def pending_analysis(table: EventTable) -> Analysis:
    """The Analysis of a table not analysed yet, standing in until the real one is computed (the viewer shows the
    events meanwhile): nothing matched, no waits, nothing found. A field with a default keeps it."""
    n = len(table)
    no_match = array("i", [-1]) * n
    return Analysis(table=table, collectives=CollectiveTable(table), instance_of=no_match, p2p=P2PTable(),
                    p2p_of=no_match, event_wait_ns=array("q", bytes(8 * n)), waits={}, stragglers=[], links=[],
                    pipeline=None, problems=[], models={}, event_overlap_ns=array("q", bytes(8 * n)))
