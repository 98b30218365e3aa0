"""Fault injection for the tests that prove an internal failure never reaches the job: with
DISTTRACE_TEST_FAULT_AT=N in a rank's environment, the begin of its N-th op (counted from 0) fails inside the
tracer."""

from __future__ import annotations

import itertools
import os

ENV_FAULT_AT = "DISTTRACE_TEST_FAULT_AT"


class _failing_count:
    """Event ids whose number `at` raises: that event's begin fails inside the tracer (for the fault tests)."""

    def __init__(self, at: int):
        self.n, self.at = -1, at

    def __next__(self) -> int:
        self.n += 1
        if self.n == self.at:
            raise RuntimeError("injected fault (DISTTRACE_TEST_FAULT_AT)")
        return self.n


def event_ids():
    """The tracer's event ids: 0, 1, 2, ... (with DISTTRACE_TEST_FAULT_AT set: one that fails at that id)."""
    fault = os.environ.get(ENV_FAULT_AT)
    if fault and fault.isdigit():
        return _failing_count(int(fault))
    return itertools.count()
