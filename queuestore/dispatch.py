"""The outbox's dispatch marks, written in batches off the caller's path."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref

from queuestore.errors import StoreUnavailable
from queuestore.models import Task
from queuestore.store.base import TaskStore

log = logging.getLogger(__name__)


class DispatchMarks:
    """Dispatch marks of published tasks, written in batches by a background thread.

    With them ``submit`` costs one statement, the insert. Marks are written
    every ``interval``, at once when ``batch_size`` wait, and at interpreter
    exit. A mark that is never written (the process was killed) only means
    the dispatcher sweep publishes the task once more after ``dispatch_grace``;
    the worker's claim drops the second message. A mark is written only while
    the task is at the version it was published at.
    """

    def __init__(self, store: TaskStore, *, interval: float = 0.05, batch_size: int = 500) -> None:
        self.store = store
        self.interval = interval
        self.batch_size = batch_size
        self._pending: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        _ALL_MARKS.add(self)

    def add(self, task: Task) -> None:
        """Mark ``task`` as dispatched soon."""
        with self._lock:
            if self._pid != os.getpid():
                # A forked child: the parent's marks are the parent's to write.
                self._pid, self._pending, self._thread = os.getpid(), [], None
            self._pending.append((task.id, task.version))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="queuestore-dispatch-marks", daemon=True
                )
                self._thread.start()
            if len(self._pending) >= self.batch_size:
                self._wake.set()

    def flush(self) -> None:
        """Write the marks taken so far; on a store outage they wait for the next try."""
        with self._lock:
            marks, self._pending = self._pending, []
        if not marks:
            return
        try:
            self.store.mark_dispatched_many(marks)
        except StoreUnavailable as exc:
            log.warning("%d dispatch marks wait for the database: %s", len(marks), exc)
            with self._lock:
                self._pending[:0] = marks[:_KEPT_IN_OUTAGE]

    def _loop(self) -> None:
        idle = 0
        while idle < _IDLE_TICKS:
            self._wake.wait(self.interval)
            self._wake.clear()
            try:
                self.flush()
            except Exception:  # the thread must outlive any one failure
                log.exception("dispatch marks not written; the sweep republishes those tasks")
            with self._lock:
                idle = 0 if self._pending else idle + 1
                if idle >= _IDLE_TICKS and self._thread is threading.current_thread():
                    self._thread = None


_KEPT_IN_OUTAGE = 10_000
"""Marks kept through a database outage; beyond them the sweep republishes (harmless)."""

_IDLE_TICKS = 20
"""Empty rounds after which the marks thread ends; the next mark starts another."""

_ALL_MARKS: weakref.WeakSet[DispatchMarks] = weakref.WeakSet()


@atexit.register
def _flush_marks_at_exit() -> None:
    for marks in list(_ALL_MARKS):
        try:
            marks.flush()
        except Exception as exc:  # exiting: the sweep republishes what is not marked
            log.warning("dispatch marks not written at exit: %s", exc)
