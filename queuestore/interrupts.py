"""Keeps a prefork revoke from interrupting a run while it talks to the store.

``TaskQueue.cancel`` sends ``revoke(terminate=True, signal="SIGUSR1")``; in a
prefork child billiard turns SIGUSR1 into ``SoftTimeLimitExceeded``, raised
wherever the job happens to be. Raised inside a database call it can leave a
pool or driver lock taken (the exception lands between acquiring a lock and
the ``try`` that would release it), and the next store call in that process
then waits forever. Here the signal is held back while the run is inside a
store call and raised as soon as the call returns.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from celery.exceptions import SoftTimeLimitExceeded

_SIGNAL = getattr(signal, "SIGUSR1", None)


class Interrupts:
    """The soft-time-limit signal of this process, deferred inside :meth:`deferred` blocks."""

    def __init__(self) -> None:
        self._depth = 0
        self._pending = False
        self._pid: int | None = None

    def install(self) -> None:
        """Take over billiard's SIGUSR1 handler in a prefork child (nothing elsewhere)."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._depth, self._pending = 0, False
        if _SIGNAL is None or threading.current_thread() is not threading.main_thread():
            return
        try:
            from billiard.pool import soft_timeout_sighandler
        except ImportError:
            return
        if signal.getsignal(_SIGNAL) is soft_timeout_sighandler:
            signal.signal(_SIGNAL, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._depth:
            self._pending = True
            return
        raise SoftTimeLimitExceeded()

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
                if then_raise:
                    raise SoftTimeLimitExceeded()


interrupts = Interrupts()
"""This process's one instance (signal handlers are per process)."""
