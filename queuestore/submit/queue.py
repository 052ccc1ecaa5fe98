"""The callers' verbs: submit, cancel, resume and wait for tasks.

``submit`` is a transactional outbox: the task is committed first and the
message published after (:mod:`queuestore.broker.publisher`), with the Celery
task id equal to the task id. When the broker is down the task stays
``submitted`` and the sweep (a beat task, :mod:`queuestore.beat.sweep`)
publishes it later; the worker's claim makes a second message harmless, so
nothing is lost and nothing runs twice.

A scheduled task (``run_at`` or ``delay``) keeps its start time in its row.
Its message goes out only as the start comes near, within ``schedule_ahead``,
with a countdown to the start: ``submit`` sends it when the start is that
close already, the sweep otherwise. No message waits in a broker or a worker
for longer than ``schedule_ahead``, so a long delay is as durable as the row.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from celery import Celery
from pydantic import ValidationError

from queuestore.beat import schedule
from queuestore.beat.deadlines import enforce
from queuestore.beat.reaper import reap
from queuestore.beat.sweep import sweep
from queuestore.broker.publisher import BROKER_ERRORS, Publisher
from queuestore.core import tracing
from queuestore.core.callbacks import DEFAULT_CALLBACK_ID, CallbackRequest
from queuestore.core.concurrency import NO_LIMITS, ConcurrencyLimits
from queuestore.core.errors import (
    CallbackRefused,
    InvalidTaskData,
    InvalidTransition,
    QueueStoreError,
)
from queuestore.core.flow import NO_FLOW, FlowControl
from queuestore.core.logs import quiet_revoke_bookkeeping
from queuestore.core.models import Task, TaskStatus, new_task_id
from queuestore.core.options import QueueOptions
from queuestore.core.owner import ANY, Owner
from queuestore.core.validation import json_kind
from queuestore.run.jobs import (
    Job,
    prepare_worker,
    registered_job,
    registered_jobs,
    registered_names,
)
from queuestore.store.base import TaskStore
from queuestore.store.durable import Enforced
from queuestore.store.schedules import DEFAULT_GRACE
from queuestore.submit.schedules import ScheduleCalls

log = logging.getLogger(__name__)


RESUBMITTED_FROM: Final = "queuestore.resubmitted_from"
"""The metadata key of a resubmitted task that names the task it ran again."""

RESUBMITTABLE: Final = frozenset({TaskStatus.FAILED, TaskStatus.CANCELLED})
"""The statuses of the tasks :meth:`TaskQueue.resubmit` submits again."""


class TaskQueue(ScheduleCalls):
    """Joins a :class:`TaskStore` to a Celery app: tasks persist in one, run on the other.

    Its schedules' verbs (``create_schedule``, ``trigger_schedule``...) are in
    :class:`~queuestore.submit.schedules.ScheduleCalls`.

    Args:
        store: where tasks live.
        app: the Celery app whose workers run the jobs (see :func:`queuestore.job`).
        lease: how long a run holds its task without a heartbeat before the
            reaper may give it to another worker.
        heartbeat_interval: how often a running job renews its lease.
        report_interval: how often a running job's progress, message and
            artifacts are written, batched, by the worker's heartbeat thread;
            whatever is left goes with the outcome. Zero writes each report
            before the job's call returns.
        max_lost_runs: runs a task may lose to dying workers before it fails
            with ``WorkerLost``.
        terminate_on_cancel: send ``revoke(terminate=True, signal="SIGUSR1")``
            on cancel, which interrupts a job on the prefork pool at once (it
            sees :class:`celery.exceptions.SoftTimeLimitExceeded`). Turn it off
            for solo, threads or gevent pools, where the job sees the cancel at
            its next heartbeat or write.
        publish_grace: how old an unpublished task must be before the sweep
            publishes it, so it does not race ``submit``. A published task's
            publish mark is written after half of it, and only if no worker
            claimed the task by then.
        republish_after: publish again a task whose message went out this
            long ago and was never claimed (a broker that lost it); None never does.
        ack_after: how long a run goes before its message is acknowledged
            (once the store shows the task claimed), so that no broker timeout
            redelivers a long job; half the lease by default. On Redis the
            broker's visibility timeout is set to the lease unless the app sets
            one (see :func:`queuestore.broker.transports.redis_transport_options`).
        priorities: the brokers honour task priorities (``submit(priority=...)``):
            the messages carry them, and the app's queues must be declared for
            them (``Settings(priorities=True)`` configures the app; see
            :func:`~queuestore.broker.transports.priority_config`). Without it
            the sweep still publishes the most urgent waiting tasks first, but
            the broker delivers in order.
        schedule_ahead: how long before a scheduled task's start its message
            is published, with a countdown to the start. It must be longer than
            the sweep's interval, so that every start is published on time,
            and shorter than ``lease - ack_after``, so that Redis does not hand
            a message waiting for its start to a second worker. By default
            12 s, or less where the lease leaves less.
        limits: the most running tasks per owner and per job
            (:class:`~queuestore.core.concurrency.ConcurrencyLimits`); every process
            of the app (workers, submitters, beat) must use the same. A task at its
            limit waits in the store, with no message, until a run of its owner
            or job ends and hands the slot on.
        flow: the rate limits of jobs (:class:`~queuestore.FlowControl`);
            every process of the app must use the same. A task over its rate,
            or paused (:meth:`TaskStore.pause <queuestore.TaskStore.pause>`),
            waits in the store with no message until it may start.
        pause_recheck: how often a task waiting for a pause with no end is
            tried again: a resume is heard within it.

    Raises:
        ValueError: durations that do not fit together.
    """

    def __init__(
        self,
        store: TaskStore,
        app: Celery,
        *,
        lease: timedelta = timedelta(seconds=30),
        heartbeat_interval: timedelta = timedelta(seconds=1),
        report_interval: timedelta = timedelta(milliseconds=200),
        max_lost_runs: int = 3,
        terminate_on_cancel: bool = True,
        publish_grace: timedelta = timedelta(seconds=10),
        republish_after: timedelta | None = timedelta(hours=1),
        ack_after: timedelta | None = None,
        schedule_ahead: timedelta | None = None,
        priorities: bool = False,
        limits: ConcurrencyLimits = NO_LIMITS,
        timeout_grace: timedelta = timedelta(seconds=10),
        timeout_interrupt: bool = True,
        flow: FlowControl = NO_FLOW,
        pause_recheck: timedelta = timedelta(seconds=10),
    ) -> None:
        options = QueueOptions.build(
            lease=lease,
            heartbeat_interval=heartbeat_interval,
            report_interval=report_interval,
            max_lost_runs=max_lost_runs,
            terminate_on_cancel=terminate_on_cancel,
            publish_grace=publish_grace,
            republish_after=republish_after,
            ack_after=ack_after,
            schedule_ahead=schedule_ahead,
            priorities=priorities,
            limits=limits,
            timeout_grace=timeout_grace,
            timeout_interrupt=timeout_interrupt,
            flow=flow,
            pause_recheck=pause_recheck,
        )
        self.publisher = Publisher(store, app, options)
        if self.publisher.bind():  # the app's jobs and beat tasks run with this queue
            schedule.register(app)
            prepare_worker(app)
            quiet_revoke_bookkeeping()

    @classmethod
    def of(cls, app: Celery) -> TaskQueue:
        """The queue made for ``app`` in this process (the same publisher, store and options).

        Raises:
            RuntimeError: no ``TaskQueue(store, app)`` was created; create it in
                the module that Celery loads with ``-A``.
        """
        queue = cls.__new__(cls)
        queue.publisher = Publisher.of(app)
        return queue

    @property
    def store(self) -> TaskStore:
        """Where the queue's tasks live."""
        return self.publisher.store

    @property
    def app(self) -> Celery:
        """The Celery app whose workers run the queue's jobs."""
        return self.publisher.app

    @property
    def options(self) -> QueueOptions:
        """The queue's durations and limits, as given to the constructor."""
        return self.publisher.options

    @property
    def jobs(self) -> dict[str, Job]:
        """The jobs registered on the queue's app in this process, by name."""
        return registered_jobs(self.app)

    @property
    def job_names(self) -> frozenset[str]:
        """The names of the jobs registered on the queue's app in this process."""
        return registered_names(self.app)

    def check_input(self, name: str, input: Mapping[str, Any] | None) -> None:
        """Refuse input the job ``name`` cannot take, where the job is registered here.

        Raises:
            InvalidTaskData: the input does not fit the job's function.
        """
        if input is not None and not isinstance(input, Mapping):
            raise InvalidTaskData(
                f"must be a JSON object of the keyword arguments of job {name!r} "
                f'({{"argument": value, ...}}), not {json_kind(input)}',
                field="input",
            )
        registered = registered_job(self.app, name)
        if registered is not None:
            registered.check_input(input or {})

    # -- callers' verbs -----------------------------------------------------

    def submit(
        self,
        name: str,
        input: Mapping[str, Any] | None = None,
        *,
        owner: str | None = None,
        context_id: str | None = None,
        ttl: timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
        task_id: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | None = None,
        unique_key: str | None = None,
        priority: int = 0,
        callback: CallbackRequest | None = None,
        start_by: datetime | None = None,
        deadline: datetime | None = None,
        timeout: timedelta | None = None,
        connection: Any = None,
    ) -> Task:
        """Persist a task and enqueue the job that runs it.

        The task is committed before its message is published. If the broker
        is unreachable the task is still returned, ``submitted``, and the
        sweep publishes it once the broker is back.

        ``run_at`` (a timezone-aware time) or ``delay`` (from now, on this
        process's clock) schedules the start: the task waits ``submitted``,
        with ``Task.run_at`` set, and its job starts no earlier. Its message
        is published :attr:`schedule_ahead` before the start at most, by this
        call or by the sweep, so scheduling needs the sweep running
        (:meth:`install_beat_schedule`). A cancel before the start means the
        job never runs.

        ``unique_key``: while a live task of the same owner holds this key (a
        task submitted with it that has not ended), that task is returned as
        it is and nothing is written or published: a second submit of the
        same work joins the first. Two racing submits create one task.

        ``priority``, from 0 (the default) to 9, the most urgent: waiting jobs
        run the most urgent first, on brokers where :attr:`priorities` is on.

        Under :attr:`limits`, a task whose owner or job has no free slot is not
        published: it waits in the store, ``submitted``, until a run of its
        owner or job ends and hands the slot on.

        ``callback``: the task's status changes (``terminal`` or ``all``) are
        sent to its URL (:meth:`TaskStore.add_callback
        <queuestore.TaskStore.add_callback>`, id ``default``), registered
        before the job is published; on a task a ``unique_key`` joins, it is
        added beside the callbacks the task has.

        Deadlines, which the store enforces in every pool (the reaper fails
        the task): ``start_by``, a job not started by then never runs
        (``DeadlineExpired``); ``deadline``, the task and its children still
        live then fail (``DeadlineExceeded``); ``timeout``, how long each run
        may take, in place of the job's own (``RunTimedOut``).

        ``connection``: submit inside the caller's transaction. An SQLAlchemy
        ``Connection`` or ``Session``, or a psycopg ``Connection``, to the
        store's database (:class:`~queuestore.SqlTaskStore`): the task is
        inserted on it, so it exists if and only if the caller's transaction
        commits, and its message is published only after that commit (by a
        thread of the queue that sees the row appear; if the process dies
        first, the sweep publishes it). Not with ``callback``.

        Raises:
            CallbackRefused: the callback's URL is refused; nothing is written.
            InvalidTaskData: bad arguments, input the registered job cannot
                take, both ``run_at`` and ``delay``, or a ``connection`` the
                store cannot join.
        """
        self.check_input(name, input)
        if connection is not None and callback is not None:
            raise InvalidTaskData("is not taken with a connection", field="callback")
        if callback is not None:
            self.store.url_policy.check_url(callback.url)  # before anything is written
        if unique_key is not None and task_id is None:
            task_id = new_task_id()  # to tell a new task from the key's holder
        with tracing.span("queuestore.submit", kind="producer", attributes={tracing.JOB: name}):
            task = self.store.create(
                name,
                input,
                owner=owner,
                context_id=context_id,
                ttl=ttl,
                metadata=metadata,
                task_id=task_id,
                run_at=_start(run_at, delay),
                unique_key=unique_key,
                priority=priority,
                traceparent=tracing.traceparent(),
                start_by=start_by,
                deadline=deadline,
                timeout=timeout,
                on=connection,
            )
            tracing.annotate(task)
            joined = unique_key is not None and task.id != task_id
            if connection is not None:
                if not joined and self.publisher.starts_soon(task):
                    self.publisher.after_commit.add([task])
                return task
            if callback is not None:
                self._register(task, callback, owner, joined=joined)
            if joined:
                return task  # the live task that holds the key, already on its way
            if self.publisher.starts_soon(task) and self.publisher.admitted([task]):
                self.publisher.try_publish(task)
        return task

    def _register(
        self, task: Task, callback: CallbackRequest, owner: str | None, *, joined: bool
    ) -> None:
        """Add a submit's callback to its task; a new task that cannot have it is deleted."""
        try:
            self.store.add_callback(
                task.id,
                callback.url,
                events=callback.events,
                callback_id=f"join-{new_task_id()}" if joined else DEFAULT_CALLBACK_ID,
                owner=owner,
            )
        except QueueStoreError:
            if not joined:
                self.store.delete(task.id)  # never published: nothing ran
            raise

    def _register_all(
        self,
        created: list[Task],
        items: list[dict[str, Any]],
        callbacks: list[CallbackRequest | None],
    ) -> None:
        """Register a batch's callbacks; if one fails, delete the batch's new tasks."""
        new = [
            task.id for task, item in zip(created, items, strict=True) if task.id == item["task_id"]
        ]
        try:
            for task, item, callback in zip(created, items, callbacks, strict=True):
                if callback is not None:
                    joined = task.id != item["task_id"]
                    self._register(task, callback, item.get("owner"), joined=joined)
        except QueueStoreError:
            for task_id in new:
                self.store.delete(task_id)  # never published: nothing ran
            raise

    def submit_many(
        self, tasks: Iterable[Mapping[str, Any]], *, connection: Any = None
    ) -> list[Task]:
        """:meth:`submit` for many tasks: one transaction, then one broker connection.

        Each item holds :meth:`submit`'s arguments by name (``name`` is
        required; ``delay`` included). The tasks are committed together, all
        or none (:meth:`TaskStore.create_many <queuestore.TaskStore.create_many>`),
        then their messages are published on one connection, in the order
        given; if the broker cannot be reached, or fails part way, the tasks
        wait in the store for the sweep and nothing is raised, as for
        :meth:`submit`. An item whose ``unique_key`` a
        live task holds gives that task, published once already. An item's
        ``callback`` (a :class:`~queuestore.core.callbacks.CallbackRequest`, or a
        mapping of its fields) is registered after the commit and before any
        message goes out; if one cannot be, the batch's new tasks are deleted.

        ``connection``: submit inside the caller's transaction, as for
        :meth:`submit` (no item may have a callback then).

        Raises:
            InvalidTaskData: an item is invalid (the field says which, as
                ``tasks[3].input`` or ``tasks[3].callback.url``); nothing is written.
            TaskConflict: a ``task_id`` is already taken; nothing is written.
        """
        items = [self._creation(index, item) for index, item in enumerate(tasks)]
        callbacks = [item.pop("callback", None) for item in items]
        with tracing.span("queuestore.submit", kind="producer"):
            context = tracing.traceparent()
            if context:
                items = [item | {"traceparent": context} for item in items]
            if connection is not None:
                return self._submit_many_on(connection, items, callbacks)
            return self._submit_all(items, callbacks)

    def _submit_all(
        self, items: list[dict[str, Any]], callbacks: list[CallbackRequest | None]
    ) -> list[Task]:
        """:meth:`submit_many` once its items are checked."""
        created = self.store.create_many(items)
        if any(callbacks):
            self._register_all(created, items, callbacks)
        new = [
            task
            for task, item in zip(created, items, strict=True)
            if task.id == item["task_id"] and self.publisher.starts_soon(task)
        ]
        self.publisher.publish_many(self.publisher.admitted(new))
        return created

    def _submit_many_on(
        self,
        connection: Any,
        items: list[dict[str, Any]],
        callbacks: list[CallbackRequest | None],
    ) -> list[Task]:
        """:meth:`submit_many` inside the caller's transaction: published after its commit."""
        if any(callbacks):
            raise InvalidTaskData("is not taken with a connection", field="callback")
        created = self.store.create_many(items, on=connection)
        new = [
            task
            for task, item in zip(created, items, strict=True)
            if task.id == item["task_id"] and self.publisher.starts_soon(task)
        ]
        self.publisher.after_commit.add(new)
        return created

    def _creation(self, index: int, item: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments of ``create`` for one item of :meth:`submit_many`."""
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise InvalidTaskData(
                "must be a mapping of submit's arguments, with name", field=f"tasks[{index}]"
            )
        arguments = dict(item)
        try:
            self.check_input(arguments["name"], arguments.get("input"))
            arguments["run_at"] = _start(arguments.get("run_at"), arguments.pop("delay", None))
        except InvalidTaskData as exc:
            field = f"tasks[{index}]" if exc.field is None else f"tasks[{index}].{exc.field}"
            raise InvalidTaskData(str(exc).removeprefix(f"{exc.field}: "), field=field) from None
        if arguments.get("callback") is not None:
            arguments["callback"] = self._checked_callback(index, arguments["callback"])
        if arguments.get("task_id") is None:
            arguments["task_id"] = new_task_id()  # to tell a new task from a key's holder
        return arguments

    def _checked_callback(self, index: int, value: object) -> CallbackRequest:
        """An item's callback, its URL checked, before anything is written."""
        field = f"tasks[{index}].callback"
        try:
            callback = CallbackRequest.model_validate(value)
        except ValidationError as exc:
            raise InvalidTaskData(exc.errors()[0]["msg"], field=field) from None
        try:
            self.store.url_policy.check_url(callback.url)
        except CallbackRefused as exc:
            raise CallbackRefused(exc.url, exc.reason, field=f"{field}.url") from None
        return callback

    def cancel(self, task_id: str, *, owner: Owner = ANY, reason: str | None = None) -> Task:
        """Cancel a task: compare-and-set in the store, then revoke its job.

        A task that had not started never runs its job; a running job is
        interrupted (prefork pool) or stops at its next write or heartbeat.
        Its live child tasks, and theirs, are cancelled and revoked with it;
        a parent waiting for it as a child runs again.

        Raises:
            InvalidTransition: the task is already terminal.
            TaskNotFound: no such task visible to ``owner``.
        """
        cancelled = self.store.cancel_tree(task_id, owner=owner, reason=reason)
        ids: str | list[str] = [task.id for task in cancelled]
        if len(ids) == 1:
            ids = ids[0]
        try:
            if self.options.terminate_on_cancel:
                self.app.control.revoke(ids, terminate=True, signal="SIGUSR1")
            else:
                self.app.control.revoke(ids)
        except BROKER_ERRORS as exc:
            log.warning(
                "revoke of %s not sent (%s); the worker sees the cancel itself", task_id, exc
            )
        self.publisher.wake_parents(cancelled[:1])
        return cancelled[0]

    def resubmit(self, task_id: str, *, owner: Owner = ANY) -> Task:
        """Submit a failed or cancelled task's job again, as a new task linked to the old one.

        A finished task stays as it ended (terminal is sticky): the new task
        has its job, input, owner, context, ttl and priority, and its metadata
        with :data:`RESUBMITTED_FROM` set to the old task's id. It is
        submitted as :meth:`submit` does, with no start time, unique key or
        callback (register one on the new task).

        Raises:
            InvalidTransition: the task is not ``failed`` or ``cancelled``.
            InvalidTaskData: the task's input no longer fits its registered job.
            TaskNotFound: no such task visible to ``owner``.
        """
        old = self.store.get(task_id, owner=owner)
        if old.status not in RESUBMITTABLE:
            raise InvalidTransition(old.id, old.status, None, RESUBMITTABLE)
        return self.submit(
            old.name,
            old.input,
            owner=old.owner,
            context_id=old.context_id,
            ttl=old.ttl,
            metadata={**old.metadata, RESUBMITTED_FROM: old.id},
            priority=old.priority,
        )

    def resume(self, task_id: str, answer: Any, *, owner: Owner = ANY) -> Task:
        """Answer a task in ``input_required`` and run its job again.

        Under :attr:`limits`, a task whose owner or job has no free slot waits
        for one, as a new task does.

        Raises:
            InvalidTransition: the task is not waiting for input.
            TaskNotFound: no such task visible to ``owner``.
        """
        task = self.store.provide_input(task_id, answer, owner=owner)
        if self.publisher.admitted([task]):
            self.publisher.try_publish(task)
        return task

    def result(self, task_id: str, *, timeout: float, owner: Owner = ANY) -> Task:
        """Wait until the task is terminal and return it (``.result``, ``.error``...).

        Raises:
            TimeoutError: the task is still live after ``timeout`` seconds.
            TaskNotFound: no such task visible to ``owner``.
        """
        task = self.store.wait(task_id, timeout=timeout, owner=owner)
        if not task.is_terminal:
            raise TimeoutError(f"task {task_id!r} is still {task.status} after {timeout}s")
        return task

    # -- publishing and maintenance, for operators and tests ----------------

    def publish(self, task: Task, *, countdown: float | None = None, producer: Any = None) -> None:
        """Send the Celery message for ``task`` (see :meth:`Publisher.publish
        <queuestore.broker.publisher.Publisher.publish>`).

        Raises:
            BrokerUnavailable: the broker did not take the message.
        """
        self.publisher.publish(task, countdown=countdown, producer=producer)

    def try_publish(self, task: Task, *, countdown: float | None = None) -> bool:
        """Publish the message for the task's next run; False if the broker is down
        (the task then waits for the sweep)."""
        return self.publisher.try_publish(task, countdown=countdown)

    def sweep(self, *, limit: int = 500) -> int:
        """Publish the tasks whose message never went out, or was lost, now (see
        :func:`queuestore.beat.sweep.sweep`); how many went out."""
        return sweep(self.publisher, limit=limit)

    def reap(self) -> list[Task]:
        """Retry or fail the tasks whose worker died, now (see
        :func:`queuestore.beat.reaper.reap`)."""
        return reap(self.publisher)

    def enforce_deadlines(self) -> Enforced:
        """Fail the tasks past their deadlines and stop their runs, now (see
        :func:`queuestore.beat.deadlines.enforce`; the reaper's beat does it)."""
        return enforce(self.publisher)

    def hand_off(self, ended: Task) -> int:
        """Publish the tasks waiting for the slot ``ended``'s run held; how many."""
        return self.publisher.hand_off(ended)

    def install_beat_schedule(
        self,
        *,
        janitor_ttl: timedelta = timedelta(days=1),
        janitor_interval: timedelta = timedelta(minutes=1),
        janitor_batch_size: int = 1000,
        reaper_interval: timedelta = timedelta(seconds=10),
        sweep_interval: timedelta = timedelta(seconds=10),
        schedules_interval: timedelta = timedelta(seconds=5),
        schedules_grace: timedelta = DEFAULT_GRACE,
    ) -> None:
        """Add the janitor, the reaper, the sweep and the schedules' tick to
        ``app.conf.beat_schedule``.

        The schedules' tick (``queuestore.schedules``, every ``schedules_interval``)
        makes the tasks of the schedules kept in the store
        (:meth:`create_schedule`); a tick seen more than ``schedules_grace`` late
        counts as missed (the ``skip`` policy drops it).

        Each entry expires after its own interval, so beats that pile up while
        no worker runs are dropped instead of all running at once.
        A ``sweep_interval`` no shorter than the queue's ``schedule_ahead``
        is logged as a warning: a scheduled task may then start up to the
        difference late.
        """
        schedule.install(
            self.app,
            self.options,
            janitor_ttl=janitor_ttl,
            janitor_interval=janitor_interval,
            janitor_batch_size=janitor_batch_size,
            reaper_interval=reaper_interval,
            sweep_interval=sweep_interval,
            schedules_interval=schedules_interval,
            schedules_grace=schedules_grace,
        )


def _start(run_at: datetime | None, delay: timedelta | None) -> datetime | None:
    """The start time ``submit`` was given, as ``run_at`` or as a ``delay`` from now.

    Raises:
        InvalidTaskData: both are given, or ``delay`` is not a timedelta of zero or more.
    """
    if delay is None:
        return run_at
    if run_at is not None:
        raise InvalidTaskData("give run_at or delay, not both", field="delay")
    if not isinstance(delay, timedelta) or delay < timedelta(0):
        raise InvalidTaskData("must be a timedelta of zero or more", field="delay")
    return datetime.now(UTC) + delay
