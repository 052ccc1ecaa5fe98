"""What a running job sees of its task: :class:`TaskContext`, and the signals that end a run.

Reports are checked at the call and batched; the worker's heartbeat thread
(:mod:`queuestore.heartbeat`) writes them while the job runs, and the outcome
carries whatever is left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import JsonValue

from queuestore import validation as check
from queuestore.errors import (
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    StoreUnavailable,
    TaskNotFound,
)
from queuestore.interrupts import interrupts
from queuestore.models import Artifact, Task, TaskStatus
from queuestore.store.rules import UNSET, Unset

if TYPE_CHECKING:
    from queuestore.queue import TaskQueue

log = logging.getLogger(__name__)

T = TypeVar("T")

STORE_RETRY_SECONDS = 60.0
"""How long a run keeps retrying a write while the database is unreachable."""


class JobCancelled(BaseException):
    """Raised inside a job whose task was cancelled, or whose lease another worker took.

    It derives from BaseException so that a job's ``except Exception`` does not
    swallow it; let it propagate (``finally`` blocks still run).
    """


class InputRequested(BaseException):
    """Ends the current run in ``input_required``; raised by :meth:`TaskContext.request_input`."""

    def __init__(self, prompt: str) -> None:
        super().__init__(prompt)
        self.prompt = prompt


class TaskContext:
    """What a running job sees of its task, and how it reports back.

    Reports (:meth:`progress`, :meth:`set_message`, :meth:`add_artifact`) are
    checked at once and written in batches: at most every
    ``TaskQueue.report_interval``, by the worker's heartbeat thread, and
    finally together with the job's outcome, so a job never waits on the
    database to report. Each batch is one compare-and-set fenced by this run's
    lease; :meth:`flush` writes the batch now. With a ``report_interval`` of
    zero every report is written before the call returns.

    When the task was cancelled (or reassigned after a lost lease) the next
    report or :meth:`raise_if_cancelled` raises :class:`JobCancelled`.
    """

    def __init__(self, queue: TaskQueue, task: Task, worker_id: str) -> None:
        self._queue = queue
        self._task = task
        self.worker_id = worker_id
        self._stop = threading.Event()
        self._questions = 0
        self._interval = queue.report_interval.total_seconds()
        # What the job reported and no write carried yet, guarded by _state.
        self._state = threading.Lock()
        self._values: dict[str, Any] = {}
        self._artifacts: list[tuple[Artifact, bool]] = []
        self._refused: InvalidTaskData | None = None
        # One write at a time (the job's thread or the heartbeat's), in order.
        self._writing = threading.Lock()
        self._written_at = time.monotonic()

    @property
    def task(self) -> Task:
        """The task as this run last wrote or saw it."""
        return self._task

    @property
    def task_id(self) -> str:
        """The id of the task this run works on."""
        return self._task.id

    @property
    def attempt(self) -> int:
        """Which run this is: 1 for the first; each answered question and each
        retry after a lost worker starts another."""
        return self._task.attempt

    @property
    def cancelled(self) -> bool:
        """Whether the task was cancelled (or taken from this run) as far as this run knows."""
        return self._stop.is_set()

    def raise_if_cancelled(self) -> None:
        """Stop here if the task was cancelled; call it in long loops.

        Raises:
            JobCancelled: the task was cancelled or its lease lost.
        """
        if self._stop.is_set():
            raise JobCancelled(self.task_id)

    def progress(self, fraction: float | None, message: str | Unset | None = UNSET) -> None:
        """Report how far the job got (0..1), optionally with a status message.

        Raises:
            InvalidTaskData: ``fraction`` is not within 0..1, or the message is invalid.
        """
        values: dict[str, Any] = {"progress": check.progress(fraction)}
        if message is not UNSET:
            values["status_message"] = check.message(message)
        self._report(values)

    def set_message(self, message: str | None) -> None:
        """Set the human-readable status message.

        Raises:
            InvalidTaskData: the message is invalid.
        """
        self._report({"status_message": check.message(message)})

    def add_artifact(self, artifact: Artifact | Mapping[str, Any], *, append: bool = False) -> None:
        """Publish an artifact; with ``append`` its parts extend the one with the same id.

        Raises:
            InvalidTaskData: the artifact is invalid or over the payload limit.
        """
        checked = check.artifact(artifact, self._queue.store.max_payload_bytes)
        self._report({}, (checked, append))

    def flush(self) -> None:
        """Write what the job reported and was not written yet, before returning.

        Raises:
            JobCancelled: the task was cancelled or its lease lost.
        """
        self.raise_if_cancelled()
        self._write_now()

    def request_input(self, prompt: str) -> JsonValue:
        """Ask the caller a question and return the answer.

        The first time, this ends the run: the task goes to ``input_required``
        with ``prompt`` as its message, and no worker waits. ``TaskQueue.resume``
        stores the answer and runs the job again from the start; this call then
        returns the answer. A job may ask several questions: each call returns
        the answer to the question asked at the same point.
        """
        index = self._questions
        self._questions += 1
        if index < len(self._task.answers):
            return self._task.answers[index]
        raise InputRequested(prompt)

    def _report(
        self, values: dict[str, Any], artifact: tuple[Artifact, bool] | None = None
    ) -> None:
        self.raise_if_cancelled()
        refused = self._take_refused()
        if refused is not None:
            # A batch the heartbeat wrote was refused (appended parts outgrew the limit).
            raise refused
        # A revoke's signal must not land while the heartbeat's lock is held.
        with interrupts.deferred(), self._state:
            self._values.update(values)
            if artifact is not None:
                self._artifacts.append(artifact)
        if self._interval <= 0:
            self._write_now()

    def _take_refused(self) -> InvalidTaskData | None:
        """The error of a batch the heartbeat could not write, once."""
        with interrupts.deferred(), self._state:
            refused, self._refused = self._refused, None
        return refused

    def _write_now(self) -> None:
        try:
            with interrupts.deferred():
                riding_out_outages(self._write, self.task_id)
        except (InvalidTransition, LeaseLost, TaskNotFound) as exc:
            self._stop.set()
            raise JobCancelled(self.task_id) from exc

    def _write(self, **outcome: Any) -> Task:
        """Write the reports not written yet, with ``outcome`` (status and values) if given.

        What was taken for the write is put back when the store is unreachable,
        so a later write carries it; any other failure drops it.
        """
        with self._writing:
            with self._state:
                values, artifacts = self._values, self._artifacts
                self._values, self._artifacts = {}, []
            if not values and not artifacts and not outcome:
                return self._task
            try:
                task = self._queue.store.report(
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

    def _write_if_due(self, now: float) -> None:
        """Write pending reports that waited ``report_interval`` (the heartbeat calls it)."""
        if self._interval <= 0 or now - self._written_at < self._interval:
            return
        with self._state:
            if not self._values and not self._artifacts:
                return
        try:
            self._write()
        except (InvalidTransition, LeaseLost, TaskNotFound):
            self._stop.set()
        except InvalidTaskData as exc:
            with self._state:
                self._refused = exc
        except StoreUnavailable as exc:
            log.warning("reports of task %s kept for the next write: %s", self.task_id, exc)

    def _observe(self, task: Task) -> None:
        """Take note of the task as the heartbeat saw it."""
        if task.status is not TaskStatus.WORKING or task.worker_id != self.worker_id:
            self._stop.set()


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
