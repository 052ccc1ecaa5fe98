"""Publish marks: which tasks' messages went out, written in batches off the caller's path."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections import deque
from typing import NamedTuple

from queuestore.core.errors import StoreUnavailable
from queuestore.core.models import Task
from queuestore.store.base import TaskStore

log = logging.getLogger(__name__)


class _Mark(NamedTuple):
    due: float  # time.monotonic() when the mark is written
    task_id: str
    version: int


class PublishMarks:
    """Publish marks of published tasks, written late and in batches by a background thread.

    With them ``submit`` costs one statement, the insert. A mark is written
    ``delay`` seconds after the publication, and only while the task is still
    at the version it was published at: a task claimed within ``delay`` (most
    tasks, on a queue that keeps up) never gets one, which spares its row a
    version and every index an entry. The marks that are due are written every
    ``interval``, at once when ``batch_size`` are due, and all of them at
    interpreter exit and on :meth:`flush`. A mark that is never written (the
    process was killed) only means the sweep publishes the task once
    more after ``publish_grace``, which must be longer than ``delay``; the
    worker's claim drops the second message.
    """

    def __init__(
        self,
        store: TaskStore,
        *,
        delay: float = 0.0,
        interval: float = 0.05,
        batch_size: int = 500,
    ) -> None:
        self.store = store
        self.delay = delay
        self.interval = interval
        self.batch_size = batch_size
        self._pending: deque[_Mark] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        _ALL_MARKS.add(self)

    def add(self, task: Task) -> None:
        """Mark ``task`` as published after ``delay``, unless it moved on by then."""
        self.add_many([task])

    def add_many(self, tasks: list[Task]) -> None:
        """:meth:`add` for each of ``tasks``, under one lock."""
        now = time.monotonic()
        due = now + self.delay
        with self._lock:
            if self._pid != os.getpid():
                # A forked child: the parent's marks are the parent's to write.
                self._pid, self._pending, self._thread = os.getpid(), deque(), None
            self._pending.extend(_Mark(due, task.id, task.version) for task in tasks)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="queuestore-publish-marks", daemon=True
                )
                self._thread.start()
            # Marks are queued in the order they fall due: a full batch is due
            # when its last one is.
            if len(self._pending) >= self.batch_size and (
                self._pending[self.batch_size - 1].due <= now
            ):
                self._wake.set()

    def flush(self) -> None:
        """Write every mark taken so far, due or not; on a store outage they wait."""
        self._write(self._take(due_by=None))

    def _take(self, due_by: float | None) -> list[_Mark]:
        with self._lock:
            if due_by is None:
                taken = list(self._pending)
                self._pending.clear()
            else:
                taken = []
                while self._pending and self._pending[0].due <= due_by:
                    taken.append(self._pending.popleft())
        return taken

    def _write(self, marks: list[_Mark]) -> None:
        if not marks:
            return
        try:
            self.store.mark_published_many([(mark.task_id, mark.version) for mark in marks])
        except StoreUnavailable as exc:
            log.warning("%d publish marks wait for the database: %s", len(marks), exc)
            with self._lock:
                self._pending.extendleft(reversed(marks[:_KEPT_IN_OUTAGE]))

    def _loop(self) -> None:
        idle = 0
        while idle < _IDLE_TICKS:
            self._wake.wait(self.interval)
            self._wake.clear()
            try:
                self._write(self._take(due_by=time.monotonic()))
            except Exception:  # the thread must outlive any one failure
                log.exception("publish marks not written; the sweep republishes those tasks")
            with self._lock:
                idle = 0 if self._pending else idle + 1
                if idle >= _IDLE_TICKS and self._thread is threading.current_thread():
                    self._thread = None


_KEPT_IN_OUTAGE = 10_000
"""Marks kept through a database outage; beyond them the sweep republishes (harmless)."""

_IDLE_TICKS = 20
"""Empty rounds after which the marks thread ends; the next mark starts another."""

_ALL_MARKS: weakref.WeakSet[PublishMarks] = weakref.WeakSet()


@atexit.register
def _flush_marks_at_exit() -> None:
    for marks in list(_ALL_MARKS):
        try:
            marks.flush()
        except Exception as exc:  # exiting: the sweep republishes what is not marked
            log.warning("publish marks not written at exit: %s", exc)
