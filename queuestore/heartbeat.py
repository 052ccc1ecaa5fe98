"""The heartbeat: one thread per worker process that keeps running jobs' leases alive."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from queuestore.context import TaskContext
from queuestore.errors import QueueStoreError, TaskNotFound
from queuestore.models import TERMINAL, TaskStatus

if TYPE_CHECKING:
    from queuestore.queue import TaskQueue

log = logging.getLogger(__name__)


class Heartbeat:
    """One thread per worker process that keeps the leases of running jobs alive.

    It extends each lease every ``interval`` and, between beats, listens to the
    store's status changes so that a cancel reaches the job at once. While jobs
    run it also writes their reports every ``report_interval``.
    """

    def __init__(self, queue: TaskQueue) -> None:
        self._queue = queue
        self._running: dict[str, TaskContext] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.pid = os.getpid()

    def add(self, ctx: TaskContext) -> None:
        """Keep ``ctx``'s lease alive and tell it about a cancel until discarded."""
        with self._lock:
            self._running[ctx.task_id] = ctx
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="queuestore-heartbeat", daemon=True
                )
                self._thread.start()

    def discard(self, ctx: TaskContext) -> None:
        """Stop watching ``ctx``."""
        with self._lock:
            if self._running.get(ctx.task_id) is ctx:
                del self._running[ctx.task_id]

    def _loop(self) -> None:
        interval = self._queue.heartbeat_interval.total_seconds()
        while True:
            try:
                with self._queue.store.subscribe() as listen:
                    self._beat_while(listen, interval)
            except QueueStoreError as exc:
                log.warning("heartbeat: %s; retrying", exc)
                time.sleep(interval)

    def _beat_while(
        self, listen: Callable[[float], list[tuple[str, TaskStatus]]], interval: float
    ) -> None:
        next_beat = 0.0
        report_every = self._queue.report_interval.total_seconds()
        while True:
            now = time.monotonic()
            if now >= next_beat:
                self._beat()
                next_beat = now + interval
            with self._lock:
                running = list(self._running.values())
            wake = next_beat
            if running and report_every > 0:
                for ctx in running:
                    ctx._write_if_due(now)
                wake = min(wake, time.monotonic() + report_every)
            for task_id, status in listen(max(wake - time.monotonic(), 0.0)):
                if status in TERMINAL:
                    with self._lock:
                        stopped = self._running.get(task_id)
                    if stopped is not None:
                        stopped._stop.set()

    def _beat(self) -> None:
        with self._lock:
            running = list(self._running.values())
        for ctx in running:
            try:
                ctx._observe(
                    self._queue.store.heartbeat(ctx.task_id, ctx.worker_id, self._queue.lease)
                )
            except TaskNotFound:
                ctx._stop.set()
