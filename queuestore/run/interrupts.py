"""Keeps a prefork revoke from interrupting a run where that would do harm.

``TaskQueue.cancel`` sends ``revoke(terminate=True, signal="SIGUSR1")``; in a
prefork child billiard turns SIGUSR1 into ``SoftTimeLimitExceeded``, raised
wherever the job happens to be. Two places need care:

- Inside a store call. The exception can land between taking a pool or
  driver lock and the ``try`` that would release it, and the process's next
  store call then waits forever. The signal is held back until the call
  returns.
- After the run already knows it is cancelled (its heartbeat heard the cancel
  first, or a signal was already delivered). A second interrupt would only
  break the job's own cleanup, so it is dropped.

Outside a queuestore run the signal goes to billiard's handler, as before.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

_SIGNAL = getattr(signal, "SIGUSR1", None)


class Interrupts:
    """The soft-time-limit signal of this process, made safe around queuestore runs."""

    def __init__(self) -> None:
        self._depth = 0
        self._pending = False
        self._pid: int | None = None
        self._run: Callable[[], bool] | None = None
        self._delivered = False
        self._previous: Any = None

    def install(self) -> None:
        """Take over billiard's SIGUSR1 handler in a prefork child (nothing elsewhere)."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._depth, self._pending, self._run, self._delivered = 0, False, None, False
        if _SIGNAL is None or threading.current_thread() is not threading.main_thread():
            return
        try:
            from billiard.pool import soft_timeout_sighandler
        except ImportError:
            return
        if signal.getsignal(_SIGNAL) is soft_timeout_sighandler:
            self._previous = soft_timeout_sighandler
            signal.signal(_SIGNAL, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._depth:
            # Inside a store call, in a run or not (a run's claim comes before the
            # run): held back until the call returns, then raised or dropped.
            self._pending = True
            return
        if self._run is None:
            if callable(self._previous):
                self._previous(signum, frame)
            return
        if self._delivered or self._run():
            return
        self._delivered = True
        raise SoftTimeLimitExceeded()

    @contextmanager
    def running(self, cancelled: Callable[[], bool]) -> Iterator[None]:
        """Mark a queuestore run; ``cancelled`` tells whether it already knows it must stop."""
        self._run, self._delivered, self._pending = cancelled, False, False
        try:
            yield
        finally:
            self._run, self._pending = None, False

    @contextmanager
    def deferred(self, *, then_raise: bool = True) -> Iterator[None]:
        """Hold the signal back for the block; then raise it, or drop it if not ``then_raise``.

        Drop it where the run is over anyway (its outcome is being written,
        fenced by its lease): a cancelled task cannot be changed by that write.
        """
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending:
                self._pending = False
                if then_raise and not (self._run is not None and self._run()):
                    self._delivered = True
                    raise SoftTimeLimitExceeded()


interrupts = Interrupts()
"""This process's one instance (signal handlers are per process)."""
