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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

from queuestore.context import (
    InputRequested,
    JobCancelled,
    TaskContext,
    riding_out_outages,
)
from queuestore.errors import InvalidTaskData, InvalidTransition, LeaseLost, TaskNotFound
from queuestore.interrupts import interrupts
from queuestore.models import Task, TaskError, TaskStatus

if TYPE_CHECKING:
    from queuestore.queue import TaskQueue

__all__ = ["InputRequested", "Job", "JobCancelled", "TaskContext", "execute", "job"]

log = logging.getLogger(__name__)


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
        return _record(ctx, outcome)


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


def _record(ctx: TaskContext, outcome: _Outcome) -> Task | None:
    """Write the outcome, riding out a database restart; a cancelled task stays cancelled."""
    if outcome.status is None:
        return ctx.task
    return riding_out_outages(lambda: _write_outcome(ctx, outcome), ctx.task_id)


def _write_outcome(ctx: TaskContext, outcome: _Outcome) -> Task | None:
    """Write the outcome together with the reports the job made since the last write."""
    try:
        try:
            refused = ctx._take_refused()
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
