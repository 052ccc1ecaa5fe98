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

A run past its timeout is stopped in every pool by an exception raised in
the job's own thread (:meth:`Interrupts.interrupt`, CPython's
``PyThreadState_SetAsyncExc``): it lands at the thread's next bytecode, so a
CPU-bound loop in pure Python stops within milliseconds, and a call blocked in
C when it returns. It follows the same two rules: held back while the thread
is inside a store call (raised when the call returns), and never raised
after the job returned.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

_SIGNAL = getattr(signal, "SIGUSR1", None)


@dataclass
class _JobThread:
    """A thread running a job, as the async interrupts see it (guarded by their lock)."""

    depth: int = 0
    """How deep inside store calls (:meth:`Interrupts.deferred`) it is."""
    posted: type[BaseException] | None = None
    """An interrupt handed to CPython for it and maybe not delivered yet."""
    pending: type[BaseException] | None = None
    """An interrupt to raise when its store call returns."""
    spent: bool = False
    """An interrupt was delivered: none is raised again."""
    run: object = None
    """The run whose job it runs: an interrupt for another (an earlier run) is dropped."""


def _set_async_exc(thread_id: int, exception: type[BaseException] | None) -> None:
    """Raise ``exception`` in the thread at its next bytecode (None: take one back)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), None if exception is None else ctypes.py_object(exception)
    )


class Interrupts:
    """The soft-time-limit signal of this process, made safe around queuestore runs."""

    def __init__(self) -> None:
        self._depth = 0
        self._pending = False
        self._pid: int | None = None
        self._run: Callable[[], bool] | None = None
        self._delivered = False
        self._previous: Any = None
        self._threads: dict[int, _JobThread] = {}
        self._lock = threading.Lock()
        self.prefork = False
        """Whether this process is a prefork pool's child (its job runs on its main thread)."""

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
            self.prefork = True
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
    def running(self, cancelled: Callable[[], bool], run: object = None) -> Iterator[None]:
        """Mark a queuestore run; ``cancelled`` tells whether it already knows it must stop.

        The block runs ``run``'s job on this thread; :meth:`interrupt` may stop it.
        """
        self._run, self._delivered, self._pending = cancelled, False, False
        ident = threading.get_ident()
        with self._lock:
            self._threads[ident] = _JobThread(run=run)
        try:
            yield
        finally:
            with self._lock:
                job = self._threads.pop(ident)
                if job.posted is not None:  # never delivered after the job returned
                    _set_async_exc(ident, None)
            self._run, self._pending = None, False

    def interrupt(self, thread_id: int, exception: type[BaseException], run: object = None) -> bool:
        """Raise ``exception`` in ``run``'s job on ``thread_id``, once; whether it was posted.

        Held back while the thread is inside a store call; nothing when the
        thread runs no job, or another run's (``run``'s returned), or was
        interrupted already.
        """
        with self._lock:
            job = self._threads.get(thread_id)
            if job is None or job.run is not run or job.spent or job.posted or job.pending:
                return False
            if job.depth:
                job.pending = exception
                return True
            job.posted = _delivery_noted(exception, job)
            _set_async_exc(thread_id, job.posted)
            return True

    @contextmanager
    def deferred(self, *, then_raise: bool = True) -> Iterator[None]:
        """Hold the signal back for the block; then raise it, or drop it if not ``then_raise``.

        Drop it where the run is over anyway (its outcome is being written,
        fenced by its lease): a cancelled task cannot be changed by that write.
        An interrupt of this thread's job is held back and raised the same way.
        """
        self._depth += 1
        job = self._entered()
        try:
            yield
        finally:
            self._depth -= 1
            interrupt = self._left(job)
            if not self._depth and self._pending:
                self._pending = False
                if then_raise and not (self._run is not None and self._run()):
                    self._delivered = True
                    raise SoftTimeLimitExceeded()
            if interrupt is not None and then_raise:
                raise interrupt()

    def _entered(self) -> _JobThread | None:
        """Enter a store call on this thread: an interrupt not delivered yet waits for its end."""
        ident = threading.get_ident()
        with self._lock:
            job = self._threads.get(ident)
            if job is None:
                return None
            job.depth += 1
            if job.posted is not None:
                _set_async_exc(ident, None)
                job.pending, job.posted = job.posted, None
            return job

    def _left(self, job: _JobThread | None) -> type[BaseException] | None:
        """Leave a store call: the interrupt to raise now, if it was the outermost."""
        if job is None:
            return None
        with self._lock:
            job.depth -= 1
            if job.depth or job.pending is None or job.spent:
                return None
            interrupt, job.pending = job.pending, None
            job.spent = True
            return interrupt


def _delivery_noted(exception: type[BaseException], job: _JobThread) -> type[BaseException]:
    """``exception`` as a subclass that notes its delivery: CPython builds the exception
    when the thread first handles it, so its ``__init__`` runs on delivery."""

    def delivered(self: BaseException, *args: object) -> None:
        exception.__init__(self, *args)
        job.spent, job.posted = True, None

    return type(exception.__name__, (exception,), {"__init__": delivered})


interrupts = Interrupts()
"""This process's one instance (signal handlers are per process)."""
