"""Publishing after the caller's commit: tasks submitted in a transaction not ours.

``TaskQueue.submit(..., connection=conn)`` inserts the task on the caller's
connection, so the row commits or rolls back with the caller's own writes.
Its message must go out only after that commit, which queuestore does not
see: SQLAlchemy's ``Connection`` and psycopg have no after-commit hook
(``ConnectionEvents.commit`` fires before the commit). So a thread of the
queue's waits for the rows to become visible from outside the caller's
transaction -- on the store's own connections -- and publishes them then.

A batch still invisible after the queue's ``publish_grace`` is dropped: it
was rolled back (no row, nothing to publish), or it is in a transaction that
commits later, whose rows the sweep publishes as any unpublished task (they
are older than the grace by then). If the process dies before publishing,
the sweep does it too: the rows are the truth, the message only says "now".
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from queuestore.core.errors import QueueStoreError, TaskNotFound
from queuestore.core.models import Task
from queuestore.core.options import QueueOptions
from queuestore.store.base import TaskStore


class Publisher(Protocol):
    """What the watcher needs of :class:`~queuestore.broker.publisher.Publisher`."""

    store: TaskStore
    options: QueueOptions

    def publish_many(self, tasks: list[Task]) -> None: ...

    def admitted(self, tasks: list[Task]) -> list[Task]: ...


log = logging.getLogger(__name__)

_FIRST_LOOK = 0.01
_LONGEST_WAIT = 0.2
"""The watcher looks every 10 ms at first, backing off to 200 ms while batches wait."""


@dataclass
class _Batch:
    tasks: list[Task]
    give_up_at: float


class AfterCommit:
    """Publishes the tasks of a caller's transaction once it committed (one per publisher).

    Args:
        publisher: the queue's publisher: its store, and how it publishes.
    """

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._batches: list[_Batch] = []
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def add(self, tasks: list[Task]) -> None:
        """Publish ``tasks`` (inserted in one transaction) once it commits."""
        if not tasks:
            return
        grace = self._publisher.options.publish_grace.total_seconds()
        with self._changed:
            self._batches.append(_Batch(tasks, time.monotonic() + grace))
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._watch, name="queuestore-after-commit", daemon=True
                )
                self._thread.start()
            self._changed.notify()

    def pending(self) -> int:
        """How many batches wait for their commit."""
        with self._changed:
            return len(self._batches)

    def _watch(self) -> None:
        delay = _FIRST_LOOK
        while True:
            with self._changed:
                while not self._batches:
                    self._changed.wait()
                    delay = _FIRST_LOOK
                batches = list(self._batches)
            settled = [batch for batch in batches if self._settled(batch)]
            with self._changed:
                self._batches = [batch for batch in self._batches if batch not in settled]
                if self._batches:
                    self._changed.wait(delay)
            delay = _FIRST_LOOK if settled else min(delay * 2, _LONGEST_WAIT)

    def _settled(self, batch: _Batch) -> bool:
        """Publish ``batch`` if its transaction committed; whether it is done with."""
        try:
            self._publisher.store.get(batch.tasks[0].id)  # they commit together
        except TaskNotFound:
            if time.monotonic() < batch.give_up_at:
                return False
            log.info("%d tasks submitted in a transaction were not committed", len(batch.tasks))
            return True
        except QueueStoreError as exc:
            log.warning("tasks submitted in a transaction wait for the sweep: %s", exc)
            return True
        publisher = self._publisher
        publisher.publish_many(publisher.admitted(batch.tasks))
        return True
