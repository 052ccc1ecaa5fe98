"""Jobs: ``@job`` registers a function as a Celery task that runs a stored task.

The app's jobs in this process are kept here (:func:`registered_job`): the worker
finds a message's job, and the callers' side checks a task's input against its job
before anything is written (:meth:`Job.check_input`). One run of a job is: claim the
task (compare-and-set to ``working`` with a lease), call the function with a
:class:`TaskContext` and the task's input, and write the outcome back, fenced by the
lease so that a cancelled task, or one that another worker took over, cannot be
changed by this run.

A worker finds the store, the options and the publishing of its app's runs in
``Publisher.of(app)`` (:mod:`queuestore.broker.publisher`), which the app's
``TaskQueue`` bound; the run side never imports the callers' side.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

from queuestore.broker.publisher import Publisher
from queuestore.core import tracing
from queuestore.core import validation as check
from queuestore.core.errors import (
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    StoreUnavailable,
    TaskNotFound,
)
from queuestore.core.flow import RetryAfter
from queuestore.core.logs import ran_nothing, task_context
from queuestore.core.models import Task, TaskError, TaskStatus
from queuestore.core.retries import Retry
from queuestore.run import hold, workarounds
from queuestore.run.context import InputRequested, Suspended, TaskContext
from queuestore.run.heartbeat import Heartbeat, beat_from_start
from queuestore.run.inputs import JobInput
from queuestore.run.interrupts import interrupts
from queuestore.run.lease import JobCancelled, Run, RunTimedOut, riding_out_outages
from queuestore.run.pauses import pause_and_wait
from queuestore.run.steps import error_of
from queuestore.store.pending import is_pending

__all__ = [
    "InputRequested",
    "Job",
    "JobCancelled",
    "RunTimedOut",
    "TaskContext",
    "execute",
    "job",
    "registered_job",
    "registered_jobs",
    "registered_names",
]

log = logging.getLogger(__name__)


_EARLY_AGAIN = 0.5
"""The shortest wait before an early message's task is offered again, in seconds."""


@dataclass
class Job:
    """A function registered as a queuestore job on a Celery app."""

    name: str
    function: Callable[..., Any]
    celery_task: Any = field(repr=False)
    retry: Retry | None = None
    """Its retry policy: which errors run it again (see :class:`queuestore.Retry`)."""
    timeout: timedelta | None = None
    """How long each run may take, unless the task gives its own (``submit(timeout=...)``)."""
    input: JobInput = field(init=False, repr=False, compare=False)
    """What its function takes: its parameters' names, annotations and defaults."""

    def __post_init__(self) -> None:
        self.input = JobInput(self.function, self.name)

    def __call__(self, ctx: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (in tests), with a context of your own."""
        return self.function(ctx, *args, **kwargs)

    def check_input(self, payload: Mapping[str, Any]) -> None:
        """Refuse input the function cannot take, before anything is written.

        Raises:
            InvalidTaskData: an unknown or missing argument, or a value that does
                not fit its annotation; ``field`` names it (``input.month``).
        """
        self.input.arguments(payload)


_JOBS: weakref.WeakKeyDictionary[Celery, dict[str, Job]] = weakref.WeakKeyDictionary()


def register_job(app: Celery, registered: Job) -> None:
    """Make ``registered`` the job named ``registered.name`` on ``app`` in this process."""
    _JOBS.setdefault(app, {})[registered.name] = registered


def registered_job(app: Celery, name: str) -> Job | None:
    """The job registered under ``name`` on ``app`` in this process, if any."""
    return _JOBS.get(app, {}).get(name)


def registered_names(app: Celery) -> frozenset[str]:
    """The names of the jobs registered on ``app`` in this process."""
    return frozenset(_JOBS.get(app, {}))


def registered_jobs(app: Celery) -> dict[str, Job]:
    """The jobs registered on ``app`` in this process, by name (a copy)."""
    return dict(_JOBS.get(app, {}))


def job(
    app: Celery,
    *,
    name: str | None = None,
    retry: Retry | None = None,
    timeout: timedelta | None = None,
    **celery_options: Any,
) -> Callable[[Callable[..., Any]], Job]:
    """Register ``function(ctx, **input)`` as a job named ``name`` on ``app``.

    The Celery task it creates takes only the task id; the input is read from
    the store. Late acknowledgement is on, so a message is not acknowledged
    before its run claimed the task: a run that ends sooner than ``ack_after``
    acknowledges with its outcome, a longer one once the store shows the task
    claimed (:mod:`queuestore.run.hold`), so no broker timeout redelivers it.
    If the store cannot be reached to claim the task, the message is retried
    later rather than acknowledged and lost.

    Args:
        app: the Celery app whose :class:`~queuestore.submit.queue.TaskQueue` runs it.
        name: the job's name, as given to ``TaskQueue.submit``; defaults to
            ``module.function``.
        retry: which errors run the job again, how often and after what wait
            (:class:`~queuestore.core.retries.Retry`); by default an error fails the task.
        timeout: how long each run may take; a task's own (``submit(timeout=...)``)
            wins. The store fails a run past it with ``RunTimedOut``, in every
            pool, and the job is interrupted (:mod:`queuestore.run.timeouts`).
        **celery_options: passed to ``app.task`` (``queue``, ``time_limit``...).
    """

    def register(function: Callable[..., Any]) -> Job:
        job_name = name or f"{function.__module__}.{function.__qualname__}"
        options = {"acks_late": True, "ignore_result": True, "shared": False, **celery_options}

        def run(celery_task: Any, task_id: str) -> None:
            try:
                with task_context(task_id, job_name):
                    parent = tracing.header_of(celery_task.request)
                    execute(Publisher.of(app), registered, task_id, parent=parent)
            except StoreUnavailable as exc:
                # Below ack_after: a message held for its countdown (unacknowledged)
                # must not outlive the broker's visibility timeout, set from the lease.
                cap = max(Publisher.of(app).options.ack_after.total_seconds(), 1.0)
                countdown = min(2.0**celery_task.request.retries, cap)
                log.warning(
                    "task %s: store unavailable (%s); retry in %.0fs",
                    task_id,
                    exc,
                    countdown,
                    extra={"task_id": task_id, "job": job_name},
                )
                raise celery_task.retry(exc=exc, countdown=countdown, max_retries=None) from exc

        run.__name__ = run.__qualname__ = function.__name__
        run.__module__ = function.__module__
        celery_task = app.task(name=job_name, bind=True, **options)(run)
        if retry is not None and not isinstance(retry, Retry):
            raise TypeError("retry must be a queuestore.Retry")
        registered = Job(job_name, function, celery_task, retry, check.timeout(timeout))
        register_job(app, registered)
        hold.install(app)
        return registered

    return register


def new_worker_id() -> str:
    """A fencing token for one run: host, process and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def execute(
    publisher: Publisher, registered: Job, task_id: str, *, parent: str | None = None
) -> Task | None:
    """Run one job for ``task_id`` if this run can claim it; return the task as left.

    ``publisher`` is the app's (``Publisher.of(app)``): its store, options and
    publishing. Returns None when the claim failed: the message was a
    duplicate, the task was cancelled, parked or deleted before it started, or
    its owner or job was at its concurrency limit (the task waits for a slot).
    A run that ends hands its slot on to a task waiting for it.

    With traces on, the run is a ``queuestore.run`` span continuing ``parent``
    (the ``traceparent`` of the message), or else the context the task keeps.
    """
    context = parent if parent is not None else _kept_context(publisher, task_id)
    named = {tracing.TASK_ID: task_id, tracing.JOB: registered.name}
    with tracing.continuing("queuestore.run", context, kind="consumer", attributes=named):
        return _execute(publisher, registered, task_id)


def _kept_context(publisher: Publisher, task_id: str) -> str | None:
    """The trace context ``task_id`` keeps, for a message without one (traces on only)."""
    if not tracing.enabled():
        return None
    try:
        return publisher.store.get(task_id).traceparent
    except (TaskNotFound, StoreUnavailable):
        return None


def _execute(publisher: Publisher, registered: Job, task_id: str) -> Task | None:
    """:func:`execute`, in its span."""
    interrupts.install()
    heartbeat = Heartbeat.of(publisher)
    with interrupts.deferred(then_raise=False):
        worker_id = new_worker_id()
        with tracing.child("queuestore.claim"):
            task = publisher.store.claim(
                task_id,
                worker_id,
                publisher.options.lease,
                limits=publisher.options.limits,
                timeout=registered.timeout,
                flow=publisher.options.flow,
            )
        if task is None:
            ran_nothing(task_id)  # Celery's "succeeded" line would say it ran
            _after_refusal(publisher, task_id)
            return None
        tracing.annotate(task, attempt=True)
        run = Run(publisher, task, worker_id)
        heartbeat.add(run)
        hold.claimed(task_id)
    try:
        outcome = _interrupted_call(registered, run)
    finally:
        with interrupts.deferred(then_raise=False):
            heartbeat.discard(run)
            hold.released(task_id)
    with interrupts.deferred(then_raise=False):
        policy = _retrying(registered, run, outcome)
        written = {"queuestore.status": None if outcome.status is None else outcome.status.value}
        with tracing.child("queuestore.write", written):
            if outcome.suspended is not None:
                left = _record_suspend(run, outcome.suspended)
            elif policy is not None:
                left = _record_retry(run, outcome, policy)
            else:
                left = _record(run, outcome)
            if run.stopped and _past_deadline(run):
                left = _released(run)
        _hand_off(publisher, run.task if left is None else left)
        if left is not None and left.parent_id is not None:
            _wake_parent(publisher, left)
        return left


def _interrupted_call(registered: Job, run: Run) -> _Outcome:
    """:func:`_call` in a block a time-out may interrupt; an interrupt that lands after
    the job returned, before the block closed, is a stopped run too."""
    try:
        with interrupts.running(lambda: run.stopped, run):
            return _call(registered, run)
    except RunTimedOut:
        return _Outcome(None)


def _past_deadline(run: Run) -> bool:
    """Whether the run passed its deadline: the store may have failed it holding its slot."""
    return run.timed_out or (run.deadline is not None and time.monotonic() >= run.deadline)


def _released(run: Run) -> Task | None:
    """After a run stopped from outside (a cancel, a time-out): free the slot a time-out
    keeps held, and read the task as it ended."""
    store = run.publisher.store
    try:
        store.release_held(run.task_id, run.worker_id)
        return store.get(run.task_id)
    except TaskNotFound:
        return None
    except StoreUnavailable as exc:  # the reaper frees it after the grace
        log.warning("task %s: its stopped run's slot is not freed (%s)", run.task_id, exc)
        return None


def _after_refusal(publisher: Publisher, task_id: str) -> None:
    """After a refused claim: let a task at its limit wait, or publish an early one again.

    A task refused at its concurrency limit waits in the store without a
    message until a slot is free (a run that ends hands it on). A message
    comes early when its publisher's clock runs ahead of the store's, or when
    something published it without the countdown ``TaskQueue.try_publish``
    gives: it is published again for its start. Any other refusal (a duplicate
    message, a cancelled, parked or deleted task) drops the message.
    """
    try:
        task = publisher.store.get(task_id)
    except TaskNotFound:
        task = None
    if task is None or not is_pending(task):
        log.info("task %s is not claimable (duplicate or cancelled message); dropped", task_id)
        return
    # Unclaimed and pending, yet refused: before its start, at its limit, paused or
    # over its rate.
    if task.run_at is not None and task.run_at > datetime.now(UTC):
        _early(publisher, task)
        return
    if _waits_for_flow(publisher, task):
        return
    if publisher.options.limits.applies(task) and (
        task.run_at is None or _at_limit(publisher, task)
    ):
        log.info("task %s waits for a slot: its owner or job is at its concurrency limit", task_id)
        waits = publisher.store.wait_for_slot(task.id, version=task.version) is not None
        # A run that ended since the claim's count may have handed its slot to no one.
        if waits and not _at_limit(publisher, task):
            _hand_off(publisher, task)
        return
    if task.run_at is None:
        log.info("task %s is not claimable (duplicate or cancelled message); dropped", task_id)
        return
    _early(publisher, task)


def _early(publisher: Publisher, task: Task) -> None:
    """Publish again a task whose message came before its start on the store's clock.

    This process's clock may be ahead of the store's: wait at least a moment,
    not a busy loop.
    """
    assert task.run_at is not None
    wait = max((task.run_at - datetime.now(UTC)).total_seconds(), _EARLY_AGAIN)
    log.info("task %s: its message came before its start; published again in %.3fs", task.id, wait)
    publisher.try_publish(task, countdown=wait)


def _waits_for_flow(publisher: Publisher, task: Task) -> bool:
    """Leave a task a pause or its rate limit holds back waiting until it may start;
    whether one did. Its message is published now with a countdown when that time
    comes within ``schedule_ahead``, else by the sweep."""
    options = publisher.options
    waiting = publisher.store.wait_for_flow(
        task.id, version=task.version, flow=options.flow, recheck=options.pause_recheck
    )
    if waiting is None or waiting.run_at is None:
        return False
    log.info("task %s waits until %s: paused, or over its rate", task.id, waiting.run_at)
    if waiting.run_at - datetime.now(UTC) <= options.schedule_ahead:
        publisher.try_publish(waiting)
    return True


def _at_limit(publisher: Publisher, task: Task) -> bool:
    """Whether ``task``'s owner or job has no free slot now."""
    return publisher.options.limits.slots(publisher.store.running_counts()).full(task)


def _hand_off(publisher: Publisher, ended: Task) -> None:
    """Publish the tasks waiting for the slot ``ended`` held; in a store outage the
    sweep does it later."""
    try:
        publisher.hand_off(ended)
    except StoreUnavailable as exc:
        log.warning("the slot of task %s is not handed on (%s); the sweep will", ended.id, exc)


def _wake_parent(publisher: Publisher, ended: Task) -> None:
    """Wake the parent parked on the child ``ended``; in a store outage the sweep does."""
    try:
        publisher.wake_parents([ended])
    except StoreUnavailable as exc:
        log.warning("the parent of task %s is not woken (%s); the sweep will", ended.id, exc)


@dataclass(frozen=True)
class _Outcome:
    status: TaskStatus | None
    values: dict[str, Any] = field(default_factory=dict)
    raised: BaseException | None = None
    """What the job raised, for a failure its retry policy may retry."""
    suspended: Suspended | None = None
    """The job asked to wait: the run ends, and the task waits for its time."""


def _call(registered: Job, run: Run) -> _Outcome:
    try:
        arguments = registered.input.arguments(run.task.input)
    except InvalidTaskData as exc:
        # Not checked at submit (the job was not registered there): the job never runs.
        log.error("task %s: its input does not fit job %s: %s", run.task_id, registered.name, exc)
        return _Outcome(
            TaskStatus.FAILED, {"error": TaskError(type="InvalidTaskData", message=str(exc))}
        )
    try:
        app = run.publisher.app
        context = TaskContext(run, find_job=lambda name: registered_job(app, name))
        value = registered.function(context, **arguments)
    except JobCancelled:
        return _Outcome(None)
    except InputRequested as request:
        return _Outcome(TaskStatus.INPUT_REQUIRED, {"status_message": request.prompt})
    except Suspended as suspended:
        return _Outcome(None, suspended=suspended)
    except RetryAfter as told:
        return _Outcome(None, suspended=pause_and_wait(run, told.key, told.until))
    except SoftTimeLimitExceeded as exc:
        # A revoke(terminate=True, signal="SIGUSR1") arrives as a soft time limit.
        if run.stopped or _was_taken(run):
            return _Outcome(None)
        return _failure(exc)
    except Exception as exc:
        log.exception("job %s failed for task %s", registered.name, run.task_id)
        return _failure(exc)
    return _Outcome(TaskStatus.COMPLETED, {"result": value, "progress": 1.0})


def _failure(exc: BaseException) -> _Outcome:
    return _Outcome(TaskStatus.FAILED, {"error": error_of(exc)}, raised=exc)


def _was_taken(run: Run) -> bool:
    try:
        run.observe(run.publisher.store.get(run.task_id))
    except TaskNotFound:
        return True
    return run.stopped


def _retrying(registered: Job, run: Run, outcome: _Outcome) -> Retry | None:
    """The job's retry policy if it runs the job again after this outcome, else None."""
    policy, raised = registered.retry, outcome.raised
    if policy is None or raised is None or run.stopped:
        return None
    return policy if policy.retries(raised, runs=len(run.task.errors) + 1) else None


def _record_retry(run: Run, outcome: _Outcome, policy: Retry) -> Task | None:
    """End the run as a retry: the reports first, then the error and the next run's start.

    The next run is published with a countdown when it starts within the
    queue's ``schedule_ahead``, as ``submit`` publishes a scheduled task;
    otherwise (or with the broker down) the sweep publishes it.
    """
    wait = policy.wait(len(run.task.errors) + 1)
    error: TaskError = outcome.values["error"]

    def write() -> Task:
        run.write()
        return run.publisher.store.retry(
            run.task_id,
            run.worker_id,
            error=error,
            run_at=datetime.now(UTC) + wait,
            known=run.task,
        )

    try:
        task = riding_out_outages(write, run.task_id)
    except (InvalidTaskData, InvalidTransition, LeaseLost, TaskNotFound) as exc:
        log.info("task %s changed under its run (%s); retry dropped", run.task_id, exc)
        return None
    log.warning(
        "task %s: %s; retry %d of %d in %.1fs",
        run.task_id,
        error.type,
        len(task.errors),
        policy.max_runs - 1,
        wait.total_seconds(),
        extra={"task_id": run.task_id, "job": task.name},
    )
    if wait <= run.publisher.options.schedule_ahead:
        run.publisher.try_publish(task)
    return task


def _record_suspend(run: Run, suspended: Suspended) -> Task | None:
    """End the run to wait: the reports first, then the wait (``TaskStore.suspend``).

    A wait for a time is published with a countdown when it ends within the
    queue's ``schedule_ahead``, as for a retry; otherwise the sweep publishes
    it. A wait for children that all ended meanwhile (the store refuses the
    park) ends the run as a wait for now: the next run finds them ended.
    """

    def write() -> Task | None:
        run.write()
        return run.publisher.store.suspend(
            run.task_id,
            run.worker_id,
            until=suspended.until,
            message=suspended.message,
            waits_on=suspended.waits_on,
            known=run.task,
        )

    try:
        task = riding_out_outages(write, run.task_id)
        if task is None:  # nothing it waits for is live any more
            suspended = Suspended(datetime.now(UTC), suspended.message)
            task = riding_out_outages(write, run.task_id)
    except (InvalidTaskData, InvalidTransition, LeaseLost, TaskNotFound) as exc:
        log.info("task %s changed under its run (%s); suspend dropped", run.task_id, exc)
        return None
    assert task is not None  # a wait for a time is never refused without an error
    until = suspended.until
    if until is not None and until - datetime.now(UTC) <= run.publisher.options.schedule_ahead:
        run.publisher.try_publish(task)
    return task


def _record(run: Run, outcome: _Outcome) -> Task | None:
    """Write the outcome, riding out a database restart; a cancelled task stays cancelled."""
    if outcome.status is None:
        return run.task
    return riding_out_outages(lambda: _write_outcome(run, outcome), run.task_id)


def _write_outcome(run: Run, outcome: _Outcome) -> Task | None:
    """Write the outcome together with the reports the job made since the last write."""
    try:
        try:
            refused = run.take_refused()
            if refused is not None and outcome.status is not TaskStatus.FAILED:
                # Reports the heartbeat could not write: the job would have seen this error.
                raise refused
            return run.write(status=outcome.status, **outcome.values)
        except InvalidTaskData as exc:
            # The job returned or reported something the store refuses (not JSON, too large).
            error = TaskError(type="InvalidTaskData", message=str(exc))
            return run.write(status=TaskStatus.FAILED, error=error)
    except (InvalidTransition, LeaseLost, TaskNotFound) as exc:
        log.info("task %s changed under its run (%s); outcome dropped", run.task_id, exc)
    return None


def prepare_worker(app: Celery) -> None:
    """Make ``app``'s worker processes ready for runs, and seen by the operator's view.

    A forked pool process drops the connections its store inherited from the
    parent before its first run; each process that runs jobs beats from its
    start (:func:`queuestore.run.heartbeat.beat_from_start`); and a worker
    applies the workarounds of :mod:`queuestore.run.workarounds` as it starts.
    """
    from celery.signals import worker_init, worker_process_init

    worker_init.connect(workarounds.apply, weak=False, dispatch_uid="queuestore.workarounds")

    def forget_parent_connections(**_: Any) -> None:
        try:
            publisher = Publisher.of(app)
        except RuntimeError:
            return
        publisher.store.after_fork()

    worker_process_init.connect(forget_parent_connections, weak=False)
    beat_from_start(app)
