"""The chosen step's breakdown by kind, per rank, and the imbalance across ranks (docs/ANALYSIS.md "Memory").

Parameters, gradients and optimizer state: the most the step's samples at ops and optimizer steps held (a peak's
sample is left out for them: inside backward a gradient not yet attached to its parameter still counts as a
temporary). Activations, temporaries and communication buffers: their most in the step, peaks included. Outside
the allocator: the process's RSS (on CUDA, the device's used memory less the caching allocator's reserved bytes)
less what the tracker holds, at the step's last sample that read it: never hidden, never subtracted away.
"""

from __future__ import annotations

import numpy as np

from ...format import MEM_AT_PEAK, MEM_KINDS
from .results import Imbalance, RankMemory
from .steps import window_rows

PARAMS, GRADS, OPTIMIZER, ACTIVATIONS, TEMPORARIES, COMM = range(len(MEM_KINDS))
# Imbalance: the rank holding the most of a kind holds more than IMBALANCE_FRACTION over the ranks' median, and
# IMBALANCE_BYTES more (a few kB of a scalar's difference is no finding)
IMBALANCE_FRACTION, IMBALANCE_BYTES = 0.10, 1 << 20
# the breakdown's fields, by kind, in the JSON's names
FIELDS = {"params": "params_bytes", "grads": "grads_bytes", "optimizer": "optimizer_bytes",
          "activations": "activations_peak_bytes", "temporaries": "temporaries_peak_bytes",
          "comm": "comm_buffers_peak_bytes"}


def rank_breakdown(samples, window: tuple[int, int] | None) -> RankMemory | None:
    """One rank's breakdown in the window (None: the whole trace); None when no sample falls in it."""
    i, j = window_rows(samples, window)
    if i >= j:
        return None
    b = samples.bytes[i:j]
    total = b.sum(axis=1)
    held = np.asarray([at != MEM_AT_PEAK for at in samples.at[i:j]])
    steady = b[held] if held.any() else b
    k = int(np.argmax(total))
    return RankMemory(
        rank=samples.rank,
        params_bytes=int(steady[:, PARAMS].max()), grads_bytes=int(steady[:, GRADS].max()),
        optimizer_bytes=int(steady[:, OPTIMIZER].max()), activations_peak_bytes=int(b[:, ACTIVATIONS].max()),
        temporaries_peak_bytes=int(b[:, TEMPORARIES].max()), comm_buffers_peak_bytes=int(b[:, COMM].max()),
        outside_allocator_bytes=_outside(samples, i, j), peak_bytes=int(total[k]),
        peak_by_kind=dict(zip(MEM_KINDS, b[k].tolist())), peak_op=samples.op[i + k], peak_site=samples.site[i + k],
        peak_ns=int(samples.t[i + k]), t_ns=samples.t, total=samples.total)


def _outside(samples, i: int, j: int) -> int | None:
    for x in range(j - 1, i - 1, -1):
        dev = samples.device[x]
        if isinstance(dev, dict) and isinstance(dev.get("used"), int) and isinstance(dev.get("reserved"), int):
            return dev["used"] - dev["reserved"]
        if samples.rss[x] >= 0:
            return int(samples.rss[x] - samples.bytes[x].sum())
    return None


def short_site(site: str | None) -> str:
    """A call site as its file's name and line ("train.py:40"), without its folder and function."""
    if not site:
        return ""
    return site.split(" in ")[0].rsplit("/", 1)[-1]


def imbalance(ranks: dict[int, RankMemory]) -> list[Imbalance]:
    """Per kind, the rank that holds more than the others (IMBALANCE_FRACTION and IMBALANCE_BYTES over the median)."""
    if len(ranks) < 2:
        return []
    out = []
    for kind, name in FIELDS.items():
        values = {r: getattr(m, name) for r, m in ranks.items()}
        typical = int(np.median(list(values.values())))
        rank = max(values, key=lambda r: (values[r], -r))
        over = values[rank] - typical
        if over > IMBALANCE_BYTES and over > IMBALANCE_FRACTION * max(typical, 1):
            out.append(Imbalance(rank, kind, values[rank], typical))
    return out
