"""The heartbeat: one thread per worker process that keeps running jobs' leases alive.

It also writes the process's row of the workers the operator's view lists
(``TaskStore.beat_worker``): from the process's start, busy or idle, with the
tasks it runs at each beat, until a clean shutdown removes it.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import threading
import time
import weakref
from typing import Any

from celery import Celery

from queuestore.broker.publisher import Publisher
from queuestore.core.errors import QueueStoreError, TaskNotFound
from queuestore.core.watch import Listener
from queuestore.run import timeouts
from queuestore.run.lease import Run

log = logging.getLogger(__name__)

CELERY_WORKER: dict[str, Any] = {}
"""What the Celery worker this process belongs to says of itself: its ``node``, ``pool``
and ``concurrency`` (set at its start by :func:`queuestore.run.jobs.prepare_worker`)."""


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
        self.host = socket.gethostname()[:200]
        self.worker_id = f"{self.host}:{self.pid}:{secrets.token_hex(4)}"
        self._retired = False

    @classmethod
    def of(cls, publisher: Publisher) -> Heartbeat:
        """This process's heartbeat for ``publisher``'s runs (made anew in a forked child)."""
        with _HEARTBEATS_LOCK:
            heartbeat = _HEARTBEATS.get(publisher)
            if heartbeat is None or heartbeat.pid != os.getpid():
                heartbeat = _HEARTBEATS[publisher] = cls(publisher)
        return heartbeat

    @classmethod
    def current(cls, publisher: Publisher) -> Heartbeat | None:
        """This process's heartbeat for ``publisher``'s runs, if it has one."""
        with _HEARTBEATS_LOCK:
            heartbeat = _HEARTBEATS.get(publisher)
        return heartbeat if heartbeat is not None and heartbeat.pid == os.getpid() else None

    def start(self) -> None:
        """Start beating (if not yet): the worker's row, then each run's lease."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._retired = False
                self._thread = threading.Thread(
                    target=self._loop, name="queuestore-heartbeat", daemon=True
                )
                self._thread.start()

    def add(self, run: Run) -> None:
        """Keep ``run``'s lease alive and tell it about a cancel until discarded."""
        with self._lock:
            self._running[run.task_id] = run
        self.start()

    def retire(self) -> None:
        """Remove the worker's row: the process shuts down cleanly."""
        with self._lock:
            self._retired = True
        try:
            self.publisher.store.forget_worker(self.worker_id)
        except QueueStoreError as exc:
            log.warning("heartbeat: the worker's row stays: %s", exc)

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
        self._beat_worker([run.task_id for run in running])

    def _beat_worker(self, running: list[str]) -> None:
        """Write the worker's row (after the leases: a failure here costs no run)."""
        with self._lock:
            if self._retired:
                return
        try:
            self.publisher.store.beat_worker(
                self.worker_id,
                host=self.host,
                pid=self.pid,
                node=CELERY_WORKER.get("node"),
                pool=CELERY_WORKER.get("pool"),
                concurrency=CELERY_WORKER.get("concurrency"),
                running=running,
            )
        except QueueStoreError as exc:
            log.debug("heartbeat: the worker's row is not written: %s", exc)


_HEARTBEATS: weakref.WeakKeyDictionary[Publisher, Heartbeat] = weakref.WeakKeyDictionary()
_HEARTBEATS_LOCK = threading.Lock()


def beat_from_start(app: Celery) -> None:
    """Start the heartbeat of each process of ``app``'s worker that runs jobs, at its start.

    The process's row of the workers is then written while it is idle too, and
    says which Celery worker it belongs to (its node, pool and concurrency);
    a clean shutdown removes it. Connect it after the store's ``after_fork``.
    """
    from celery.signals import (
        worker_init,
        worker_process_init,
        worker_process_shutdown,
        worker_ready,
        worker_shutdown,
    )

    signals = _WorkerSignals(app)
    worker_init.connect(signals.describe, weak=False)
    worker_process_init.connect(signals.start, weak=False)
    worker_ready.connect(signals.start_in_main_process, weak=False)
    worker_process_shutdown.connect(signals.retire, weak=False)
    worker_shutdown.connect(signals.retire, weak=False)


class _WorkerSignals:
    """What :func:`beat_from_start` does on each of a Celery worker's signals."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.worker = False
        """Whether this process is (or was forked from) a worker of ``app``."""

    def publisher(self) -> Publisher | None:
        try:
            return Publisher.of(self.app)
        except RuntimeError:
            return None

    def describe(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not self.app:
            return
        self.worker = True  # a forked pool process inherits it
        pool = sender.pool_cls
        named = pool if isinstance(pool, str) else pool.__module__.rpartition(".")[2]
        CELERY_WORKER.update(node=sender.hostname, pool=named, concurrency=sender.concurrency)

    def start(self, **_: Any) -> None:
        # worker_process_init names no app: only the app this worker runs beats.
        found = self.publisher() if self.worker else None
        if found is not None:
            Heartbeat.of(found).start()

    def start_in_main_process(self, **_: Any) -> None:
        if CELERY_WORKER.get("pool") not in ("prefork", "solo"):
            self.start()  # the threads and green pools run jobs in the main process

    def retire(self, **_: Any) -> None:
        found = self.publisher()
        heartbeat = None if found is None else Heartbeat.current(found)
        if heartbeat is not None:
            heartbeat.retire()
