"""The worker side: ``@job`` turns a function into a Celery task that runs a stored task.

One run of a job is: claim the task (compare-and-set to ``working`` with a
lease), call the function with a :class:`TaskContext` and the task's input,
and write the outcome back, fenced by the lease so that a cancelled task, or
one that another worker took over, cannot be changed by this run.
"""

from __future__ import annotations

import inspect
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded
from pydantic import JsonValue

from queuestore import validation as check
from queuestore.errors import (
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    QueueStoreError,
    StoreUnavailable,
    TaskNotFound,
)
from queuestore.interrupts import interrupts
from queuestore.models import TERMINAL, Artifact, Task, TaskError, TaskStatus
from queuestore.store.base import UNSET, Unset

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
        # A revoke's signal must not land while the heartbeat's lock is held.
        with interrupts.deferred(), self._state:
            refused, self._refused = self._refused, None
            if refused is None:
                self._values.update(values)
                if artifact is not None:
                    self._artifacts.append(artifact)
        if refused is not None:
            # A batch the heartbeat wrote was refused (appended parts outgrew the limit).
            raise refused
        if self._interval <= 0:
            self._write_now()

    def _write_now(self) -> None:
        try:
            with interrupts.deferred():
                _riding_out_outages(self._write, self.task_id)
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


@dataclass
class Job:
    """A function registered as a queuestore job on a Celery app."""

    name: str
    function: Callable[..., Any]
    celery_task: Any = field(repr=False)

    def __call__(self, ctx: TaskContext, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (in tests), with a context of your own."""
        return self.function(ctx, *args, **kwargs)

    def check_input(self, payload: Mapping[str, Any]) -> None:
        """Refuse input the function cannot take, before anything is written.

        Raises:
            InvalidTaskData: unknown or missing keyword arguments.
        """
        try:
            inspect.signature(self.function).bind(None, **payload)
        except TypeError as exc:
            raise InvalidTaskData(f"does not fit job {self.name!r}: {exc}", field="input") from exc


def job(
    app: Celery, *, name: str | None = None, **celery_options: Any
) -> Callable[[Callable[..., Any]], Job]:
    """Register ``function(ctx, **input)`` as a job named ``name`` on ``app``.

    The Celery task it creates takes only the task id; the input is read from
    the store. Late acknowledgement is on, so a message is acknowledged only
    after the run wrote its outcome (or found the task was not its to run).

    Args:
        app: the Celery app whose :class:`~queuestore.queue.TaskQueue` runs it.
        name: the job's name, as given to ``TaskQueue.submit``; defaults to
            ``module.function``.
        **celery_options: passed to ``app.task`` (``queue``, ``time_limit``...).
    """

    def register(function: Callable[..., Any]) -> Job:
        job_name = name or f"{function.__module__}.{function.__qualname__}"
        options = {"acks_late": True, "ignore_result": True, "shared": False, **celery_options}

        def run(celery_task: Any, task_id: str) -> None:
            from queuestore.queue import TaskQueue

            TaskQueue.of(app).run(registered, celery_task, task_id)

        run.__name__ = run.__qualname__ = function.__name__
        run.__module__ = function.__module__
        celery_task = app.task(name=job_name, bind=True, **options)(run)
        registered: Job = Job(job_name, function, celery_task)
        _JOBS[(id(app), job_name)] = registered
        return registered

    return register


_JOBS: dict[tuple[int, str], Job] = {}


def registered_job(app: Celery, name: str) -> Job | None:
    """The job registered under ``name`` on ``app`` in this process, if any."""
    return _JOBS.get((id(app), name))


def new_worker_id() -> str:
    """A fencing token for one run: host, process and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def execute(queue: TaskQueue, registered: Job, task_id: str) -> Task | None:
    """Run one job for ``task_id`` if this run can claim it; return the task as left.

    Returns None when the claim failed: the message was a duplicate, or the task
    was cancelled, parked or deleted before it started.
    """
    interrupts.install()
    heartbeat = queue.heartbeat()
    with interrupts.deferred(then_raise=False):
        worker_id = new_worker_id()
        task = queue.store.claim(task_id, worker_id, queue.lease)
        if task is None:
            log.info("task %s is not claimable (duplicate or cancelled message); dropped", task_id)
            return None
        ctx = TaskContext(queue, task, worker_id)
        heartbeat.add(ctx)
    try:
        with interrupts.running(lambda: ctx.cancelled):
            outcome = _call(registered, ctx)
    finally:
        with interrupts.deferred(then_raise=False):
            heartbeat.discard(ctx)
    with interrupts.deferred(then_raise=False):
        return _record(queue, ctx, outcome)


@dataclass(frozen=True)
class _Outcome:
    status: TaskStatus | None
    values: dict[str, Any] = field(default_factory=dict)


def _call(registered: Job, ctx: TaskContext) -> _Outcome:
    try:
        value = registered.function(ctx, **ctx.task.input)
    except JobCancelled:
        return _Outcome(None)
    except InputRequested as request:
        return _Outcome(TaskStatus.INPUT_REQUIRED, {"status_message": request.prompt})
    except SoftTimeLimitExceeded as exc:
        # A revoke(terminate=True, signal="SIGUSR1") arrives as a soft time limit.
        if ctx.cancelled or _was_taken(ctx):
            return _Outcome(None)
        return _failure(exc)
    except Exception as exc:
        log.exception("job %s failed for task %s", registered.name, ctx.task_id)
        return _failure(exc)
    return _Outcome(TaskStatus.COMPLETED, {"result": value, "progress": 1.0})


def _failure(exc: BaseException) -> _Outcome:
    kind = type(exc)
    qualified = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else (f"{kind.__module__}.{kind.__qualname__}")
    )
    # The message is the job's text: keep it storable (PostgreSQL refuses NUL).
    error = TaskError(type=qualified, message=str(exc).replace("\x00", "\ufffd")[:10_000])
    return _Outcome(TaskStatus.FAILED, {"error": error})


def _was_taken(ctx: TaskContext) -> bool:
    try:
        ctx._observe(ctx._queue.store.get(ctx.task_id))
    except TaskNotFound:
        return True
    return ctx.cancelled


def _record(queue: TaskQueue, ctx: TaskContext, outcome: _Outcome) -> Task | None:
    """Write the outcome, riding out a database restart; a cancelled task stays cancelled."""
    if outcome.status is None:
        return ctx.task
    return _riding_out_outages(lambda: _write_outcome(queue, ctx, outcome), ctx.task_id)


def _riding_out_outages(write: Callable[[], T], task_id: str) -> T:
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


def _write_outcome(queue: TaskQueue, ctx: TaskContext, outcome: _Outcome) -> Task | None:
    """Write the outcome together with the reports the job made since the last write."""
    try:
        try:
            with ctx._state:
                refused, ctx._refused = ctx._refused, None
            if refused is not None and outcome.status is not TaskStatus.FAILED:
                # Reports the heartbeat could not write: the job would have seen this error.
                raise refused
            return ctx._write(status=outcome.status, **outcome.values)
        except InvalidTaskData as exc:
            # The job returned or reported something the store refuses (not JSON, too large).
            error = TaskError(type="InvalidTaskData", message=str(exc))
            return ctx._write(status=TaskStatus.FAILED, error=error)
    except (InvalidTransition, LeaseLost, TaskNotFound) as exc:
        log.info("task %s changed under its run (%s); outcome dropped", ctx.task_id, exc)
    return None


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
