"""One run of a job: its claim on a task, the reports it has yet to write, and its stop.

A :class:`Run` is what the run side shares: the job sees it through a
:class:`~queuestore.run.context.TaskContext`, the worker's heartbeat thread
(:mod:`queuestore.run.heartbeat`) renews its lease, writes its reports and stops
it, and :func:`queuestore.run.jobs.execute` writes its outcome. Reports are
checked at the job's call and batched here; each write is one compare-and-set
fenced by the run's lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from queuestore.broker.publisher import Publisher
from queuestore.core.errors import (
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    StoreUnavailable,
    TaskNotFound,
)
from queuestore.core.logs import about
from queuestore.core.models import TERMINAL, Artifact, Task, TaskStatus
from queuestore.run.interrupts import interrupts

log = logging.getLogger(__name__)

T = TypeVar("T")

STORE_RETRY_SECONDS = 60.0
"""How long a run keeps retrying a write while the database is unreachable."""


class JobCancelled(BaseException):
    """Raised inside a job whose task was cancelled, or whose lease another worker took.

    It derives from BaseException so that a job's ``except Exception`` does not
    swallow it; let it propagate (``finally`` blocks still run).
    """


class RunTimedOut(JobCancelled):
    """Raised inside a job whose run passed its timeout (``@job(timeout=...)``, or
    ``submit(timeout=...)``) or its task's deadline: the store failed the task.

    A ``JobCancelled``: let it propagate. In every pool it is raised in the
    job's thread even when the job never reports (a CPU-bound loop); a job
    blocked in C sees it when the call returns.
    """


class Run:
    """One run of a job on a claimed task, shared by the job's thread and the heartbeat's.

    Args:
        publisher: the app's publisher: its store, options and publishing.
        task: the task as the claim returned it.
        worker_id: the run's fencing token, the one it claimed the task with.
    """

    def __init__(self, publisher: Publisher, task: Task, worker_id: str) -> None:
        self.publisher = publisher
        self.worker_id = worker_id
        self._task = task
        self._stopped = threading.Event()
        self._interval = publisher.options.report_interval.total_seconds()
        # What the job reported and no write carried yet, guarded by _state.
        self._state = threading.Lock()
        self._values: dict[str, Any] = {}
        self._artifacts: list[tuple[Artifact, bool]] = []
        self._refused: InvalidTaskData | None = None
        # One write at a time (the job's thread or the heartbeat's), in order.
        self._writing = threading.Lock()
        self._written_at = self._claimed_monotonic = time.monotonic()
        self.claimed_at = (
            datetime.now(UTC)
            if task.lease_expires_at is None
            else task.lease_expires_at - publisher.options.lease
        )
        """When the claim took the task, on the store's clock (from the claim's row)."""
        self.deadline: float | None = None
        """When the run must end, on this process's monotonic clock (None: never)."""
        if task.run_deadline_at is not None:
            remaining = (task.run_deadline_at - self.claimed_at).total_seconds()
            self.deadline = self._claimed_monotonic + remaining
        self.thread_id = threading.get_ident()
        """The thread that runs the job (the one that claimed the task)."""
        self._timed_out = False
        self.killed = False
        """The worker gave up on the run's thread (past its deadline and the grace)."""

    @property
    def task(self) -> Task:
        """The task as this run last wrote or saw it."""
        return self._task

    @property
    def task_id(self) -> str:
        """The id of the task this run works on."""
        return self._task.id

    def store_now(self) -> datetime:
        """The store's clock now, as this run reckons it: its claim's time plus the
        time elapsed since (a monotonic clock: no skew between the two machines)."""
        return self.claimed_at + timedelta(seconds=time.monotonic() - self._claimed_monotonic)

    # -- stopping -------------------------------------------------------

    @property
    def stopped(self) -> bool:
        """Whether the task was cancelled (or taken from this run) as far as this run knows."""
        return self._stopped.is_set()

    @property
    def timed_out(self) -> bool:
        """Whether the run passed its deadline: its next report raises RunTimedOut."""
        return self._timed_out

    def stop(self, *, timed_out: bool = False) -> None:
        """Take note that the task is no longer this run's: its next report raises."""
        self._timed_out = self._timed_out or timed_out
        self._stopped.set()

    def stopped_error(self) -> JobCancelled:
        """What a stopped run's next report raises."""
        return RunTimedOut(self.task_id) if self._timed_out else JobCancelled(self.task_id)

    def observe(self, task: Task) -> None:
        """Take note of the task as read from the store; stop unless it is still this run's."""
        if task.status is not TaskStatus.WORKING or task.worker_id != self.worker_id:
            self.stop()

    # -- reports --------------------------------------------------------

    def report(self, values: dict[str, Any], artifact: tuple[Artifact, bool] | None = None) -> None:
        """Add checked values (and an ``(artifact, append)`` change) to the next write.

        With a ``report_interval`` of zero the write happens before returning.

        Raises:
            JobCancelled: the task was cancelled or its lease lost.
            InvalidTaskData: an earlier batch was refused (appended parts outgrew the limit).
        """
        if self.stopped:
            raise self.stopped_error()
        refused = self.take_refused()
        if refused is not None:
            raise refused
        # A revoke's signal must not land while the heartbeat's lock is held.
        with interrupts.deferred(), self._state:
            self._values.update(values)
            if artifact is not None:
                self._artifacts.append(artifact)
        if self._interval <= 0:
            self.flush()

    def take_refused(self) -> InvalidTaskData | None:
        """The error of a batch the heartbeat could not write, once."""
        with interrupts.deferred(), self._state:
            refused, self._refused = self._refused, None
        return refused

    def flush(self) -> None:
        """Write the pending reports now, riding out a database restart.

        Raises:
            JobCancelled: the task was cancelled or its lease lost.
        """
        try:
            with interrupts.deferred():
                riding_out_outages(self.write, self.task_id)
        except (InvalidTransition, LeaseLost, TaskNotFound) as exc:
            self.stop()
            raise self.stopped_error() from exc

    def write(self, **outcome: Any) -> Task:
        """Write the reports not written yet, with ``outcome`` (status and values) if given.

        An outcome that ends the task leaves out the job's last unwritten
        message: the store gives a finished task the message of its end
        (:meth:`TaskStore.report <queuestore.TaskStore.report>`). What was taken
        for the write is put back when the store is unreachable, so a later
        write carries it; any other failure drops it.

        Raises:
            InvalidTaskData, InvalidTransition, LeaseLost, TaskNotFound,
            StoreUnavailable: as ``TaskStore.report``.
        """
        with self._writing:
            with self._state:
                values, artifacts = self._values, self._artifacts
                self._values, self._artifacts = {}, []
            if not values and not artifacts and not outcome:
                return self._task
            if outcome.get("status") in TERMINAL:
                values.pop("status_message", None)
            try:
                task = self.publisher.store.report(
                    self.task_id,
                    self.worker_id,
                    known=self._task,
                    artifacts=artifacts,
                    **(values | outcome),
                )
            except StoreUnavailable:
                with self._state:
                    self._values = values | self._values
                    self._artifacts = artifacts + self._artifacts
                raise
            self._task = task
            self._written_at = time.monotonic()
            return task

    def write_if_due(self, now: float) -> None:
        """Write pending reports that waited ``report_interval`` (the heartbeat calls it)."""
        if self._interval <= 0 or now - self._written_at < self._interval:
            return
        with self._state:
            if not self._values and not self._artifacts:
                return
        try:
            self.write()
        except (InvalidTransition, LeaseLost, TaskNotFound):
            self.stop()
        except InvalidTaskData as exc:
            with self._state:
                self._refused = exc
        except StoreUnavailable as exc:
            log.warning(
                "reports of task %s kept for the next write: %s",
                self.task_id,
                exc,
                extra=about(self._task),
            )


def riding_out_outages(write: Callable[[], T], task_id: str) -> T:
    """Retry ``write`` with backoff while the store is unreachable, for a bounded time.

    If the outage outlasts :data:`STORE_RETRY_SECONDS` the error propagates;
    the run's lease then expires and the reaper gives the task another run.
    """
    deadline = time.monotonic() + STORE_RETRY_SECONDS
    delay = 0.1
    while True:
        try:
            return write()
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise
            log.warning("store unavailable writing task %s; retrying in %.1fs", task_id, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
