"""The heartbeat: one thread per worker process that keeps running jobs' leases alive."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref

from queuestore.broker.publisher import Publisher
from queuestore.core.errors import QueueStoreError, TaskNotFound
from queuestore.core.watch import Listener
from queuestore.run import timeouts
from queuestore.run.lease import Run

log = logging.getLogger(__name__)


class Heartbeat:
    """One thread per worker process that keeps the leases of running jobs alive.

    It extends each lease every ``heartbeat_interval`` and, between beats,
    listens for runs stopped from outside (a cancel) so that the job hears of
    it at once; it is not woken by other tasks' completions. While jobs run it
    also writes their reports every ``report_interval``, and times out the
    runs that pass their deadlines (:mod:`queuestore.run.timeouts`).
    """

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self._running: dict[str, Run] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.pid = os.getpid()

    @classmethod
    def of(cls, publisher: Publisher) -> Heartbeat:
        """This process's heartbeat for ``publisher``'s runs (made anew in a forked child)."""
        with _HEARTBEATS_LOCK:
            heartbeat = _HEARTBEATS.get(publisher)
            if heartbeat is None or heartbeat.pid != os.getpid():
                heartbeat = _HEARTBEATS[publisher] = cls(publisher)
        return heartbeat

    def add(self, run: Run) -> None:
        """Keep ``run``'s lease alive and tell it about a cancel until discarded."""
        with self._lock:
            self._running[run.task_id] = run
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="queuestore-heartbeat", daemon=True
                )
                self._thread.start()

    def discard(self, run: Run) -> None:
        """Stop watching ``run``."""
        with self._lock:
            if self._running.get(run.task_id) is run:
                del self._running[run.task_id]

    def _loop(self) -> None:
        interval = self.publisher.options.heartbeat_interval.total_seconds()
        while True:
            try:
                with self.publisher.store.subscribe_stops() as listen:
                    self._beat_while(listen, interval)
            except QueueStoreError as exc:
                log.warning("heartbeat: %s; retrying", exc)
                time.sleep(interval)

    def _beat_while(self, listen: Listener, interval: float) -> None:
        next_beat = 0.0
        report_every = self.publisher.options.report_interval.total_seconds()
        while True:
            now = time.monotonic()
            if now >= next_beat:
                self._beat()
                next_beat = now + interval
            with self._lock:
                running = list(self._running.values())
            wake = next_beat
            if running and report_every > 0:
                for run in running:
                    run.write_if_due(now)
                wake = min(wake, time.monotonic() + report_every)
            wake = min(wake, self._watch(running))
            for task_id, _status in listen(max(wake - time.monotonic(), 0.0)):
                with self._lock:
                    stopped = self._running.get(task_id)
                if stopped is not None:
                    stopped.stop()

    @staticmethod
    def _watch(running: list[Run]) -> float:
        """Time out the runs past their deadlines; when the next one is due."""
        now = time.monotonic()
        wake = math.inf
        for run in running:
            timeouts.watch(run, now)
            due = timeouts.next_wake(run)
            if due is not None:
                wake = min(wake, due)
        return wake

    def _beat(self) -> None:
        with self._lock:
            running = list(self._running.values())
        store, lease = self.publisher.store, self.publisher.options.lease
        for run in running:
            try:
                run.observe(store.heartbeat(run.task_id, run.worker_id, lease))
            except TaskNotFound:
                run.stop()


_HEARTBEATS: weakref.WeakKeyDictionary[Publisher, Heartbeat] = weakref.WeakKeyDictionary()
_HEARTBEATS_LOCK = threading.Lock()
