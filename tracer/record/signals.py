"""SIGUSR1 to a black-box rank: a snapshot, even while its main thread is blocked in C++.

A Python signal handler runs only when the main thread comes back to the interpreter: never, for a rank stuck in a
collective. Python's own C handler, though, writes the signal's number to the wakeup fd (signal.set_wakeup_fd) at
once, from whichever thread the kernel chose. So the wakeup fd is the write end of a pipe the watchdog thread
select()s on (watchdog.py); our Python handler does nothing more where that works. Where the job already set a
wakeup fd of its own (asyncio does), it keeps it, and our Python handler writes to the pipe itself (then only once
the main thread runs Python again). A handler the job had for SIGUSR1 is still called.
"""

from __future__ import annotations

import os
import signal
import threading

STOP = 0  # the byte that wakes the watchdog to stop


class SignalPipe:
    def __init__(self):
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.installed = False
        self.wakeup = False  # the wakeup fd is ours
        self._prev = None

    def install(self) -> bool:
        """Set the SIGUSR1 handler and the wakeup fd: only the main thread may."""
        if threading.current_thread() is not threading.main_thread():
            return False
        prev = signal.getsignal(signal.SIGUSR1)
        if prev is signal.SIG_IGN:
            return False  # the job chose to ignore it: so do we
        self._prev = prev
        signal.signal(signal.SIGUSR1, self._handler)
        old = signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)
        if old != -1:  # the job's own: it keeps it
            signal.set_wakeup_fd(old)
        self.wakeup = old == -1
        self.installed = True
        return True

    def _handler(self, signum, frame) -> None:
        if not self._wakeup_is_ours():
            self.poke(signum)
        prev = self._prev
        if callable(prev):
            prev(signum, frame)

    def _wakeup_is_ours(self) -> bool:
        old = signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)
        if old == self.w:
            return True
        if old != -1:
            signal.set_wakeup_fd(old)
        return False

    def poke(self, byte: int) -> None:
        try:
            os.write(self.w, bytes([byte]))
        except OSError:
            pass  # full: a wake is pending anyway

    def drain(self) -> bytes:
        out = b""
        while True:
            try:
                chunk = os.read(self.r, 512)
            except (BlockingIOError, InterruptedError):
                return out
            except OSError:
                return out
            if not chunk:
                return out
            out += chunk

    def uninstall(self) -> None:
        if not self.installed or threading.current_thread() is not threading.main_thread():
            return  # (the pipe stays open: a wakeup fd still set would write into a closed one)
        self.installed = False
        try:
            if self.wakeup:
                old = signal.set_wakeup_fd(-1)
                if old not in (self.w, -1):  # set by the job since: its own, to keep
                    signal.set_wakeup_fd(old)
            if signal.getsignal(signal.SIGUSR1) is self._handler:
                signal.signal(signal.SIGUSR1, self._prev if self._prev is not None else signal.SIG_DFL)
        except (ValueError, OSError):
            pass
        self.close()

    def close(self) -> None:
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except OSError:
                pass
