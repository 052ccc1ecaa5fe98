"""The caller's side of the Celery flow: submit, cancel, resume and wait for tasks.

``submit`` is a transactional outbox: the task is committed first and the
message published after, with the Celery task id equal to the task id. When
the broker is down the task stays ``submitted`` and the sweep (a
beat task) publishes it later; the worker's claim makes a second message
harmless, so nothing is lost and nothing runs twice.

A scheduled task (``run_at`` or ``delay``) keeps its start time in its row.
Its message goes out only as the start comes near, within ``schedule_ahead``,
with a countdown to the start: ``submit`` sends it when the start is that
close already, the sweep otherwise. No message waits in a broker or a worker
for longer than ``schedule_ahead``, so a long delay is as durable as the row.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError as KombuOperationalError
from pydantic import ValidationError

from queuestore.beat.schedule import JANITOR_TASK, REAPER_TASK, SWEEP_TASK
from queuestore.broker.marks import PublishMarks
from queuestore.core.callbacks import DEFAULT_CALLBACK_ID, CallbackRequest
from queuestore.core.concurrency import NO_LIMITS, ConcurrencyLimits
from queuestore.core.errors import (
    BrokerUnavailable,
    CallbackRefused,
    InvalidTaskData,
    QueueStoreError,
    StoreUnavailable,
)
from queuestore.core.logs import about
from queuestore.core.models import Task, new_task_id
from queuestore.core.owner import ANY, Owner
from queuestore.core.validation import MAX_PRIORITY
from queuestore.run.hold import REDIS_SCHEMES, follow_lease
from queuestore.run.registry import bind_settings, registered_job
from queuestore.store.base import TaskStore, lost_runs

log = logging.getLogger(__name__)

_PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}
_BROKER_ERRORS = (KombuOperationalError, ConnectionError, OSError)

_QUEUES: weakref.WeakKeyDictionary[Celery, TaskQueue] = weakref.WeakKeyDictionary()


class TaskQueue:
    """Joins a :class:`TaskStore` to a Celery app: tasks persist in one, run on the other.

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
        max_lost_runs: runs a task gets when its workers keep dying.
        terminate_on_cancel: send ``revoke(terminate=True, signal="SIGUSR1")``
            on cancel, which interrupts a job on the prefork pool at once (it
            sees :class:`celery.exceptions.SoftTimeLimitExceeded`). Turn it off
            for solo, threads or gevent pools, where the job sees the cancel at
            its next heartbeat or write.
        publish_grace: how old an unpublished task must be before the
            sweep publishes it, so it does not race ``submit``.
            A published task's publish mark is written after half of it,
            and only if no worker claimed the task by then.
        republish_after: publish again a task whose message went out this
            long ago and was never claimed (a broker that lost it); None never does.
        ack_after: how long a run goes before its message is acknowledged
            (once the store shows the task claimed), so that no broker timeout
            redelivers a long job; half the lease by default. On Redis the
            broker's visibility timeout is set to the lease unless the app sets
            one (see :func:`queuestore.run.hold.redis_transport_options`).
        priorities: the brokers honour task priorities (``submit(priority=...)``):
            the messages carry them, and the app's queues must be declared for
            them (``Settings(priorities=True)`` configures the app; see
            :func:`priority_config`). Without it the sweep still publishes
            the most urgent waiting tasks first, but the broker delivers in order.
        schedule_ahead: how long before a scheduled task's start its message
            is published, with a countdown to the start. It must be longer than
            the sweep's interval, so that every start is published
            on time, and shorter than ``lease - ack_after``, so that Redis does
            not hand a message waiting for its start to a second worker. By
            default 12 s, or less where the lease leaves less.
        limits: the most running tasks per owner and per job
            (:class:`~queuestore.core.concurrency.ConcurrencyLimits`); every process of the
            app (workers, submitters, beat) must use the same. A task at its
            limit waits in the store, with no message, until a run of its owner
            or job ends and hands the slot on.
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
    ) -> None:
        if not isinstance(limits, ConcurrencyLimits):
            raise TypeError("limits must be a queuestore.ConcurrencyLimits")
        if heartbeat_interval >= lease:
            raise ValueError("heartbeat_interval must be shorter than the lease")
        ack_after = lease / 2 if ack_after is None else ack_after
        if not timedelta(0) < ack_after < lease:
            raise ValueError("ack_after must be more than zero, and shorter than the lease")
        if not timedelta(0) <= report_interval < lease:
            raise ValueError("report_interval must be zero or more, and shorter than the lease")
        if schedule_ahead is None:
            schedule_ahead = min(timedelta(seconds=12), (lease - ack_after) * 0.9)
        if not timedelta(0) < schedule_ahead < lease - ack_after:
            raise ValueError(
                "schedule_ahead must be more than zero, and shorter than lease - ack_after"
            )
        self.store = store
        self.app = app
        self.lease = lease
        self.heartbeat_interval = heartbeat_interval
        self.report_interval = report_interval
        self.max_lost_runs = max_lost_runs
        self.terminate_on_cancel = terminate_on_cancel
        self.publish_grace = publish_grace
        self.republish_after = republish_after
        self.ack_after = ack_after
        self.schedule_ahead = schedule_ahead
        self.priorities = priorities
        self.limits = limits
        self._redis = str(app.conf.broker_url or "").startswith(REDIS_SCHEMES)
        self.publish_marks = PublishMarks(store, delay=publish_grace.total_seconds() / 2)
        _QUEUES[app] = self
        follow_lease(app, lease)
        if bind_settings(app, self):  # the app's jobs run with this queue's store and intervals
            _register_maintenance(app)

    @classmethod
    def of(cls, app: Celery) -> TaskQueue:
        """The queue made for ``app`` in this process.

        Raises:
            RuntimeError: no ``TaskQueue(store, app)`` was created; create it in
                the module that Celery loads with ``-A``.
        """
        try:
            return _QUEUES[app]
        except KeyError:
            raise RuntimeError(
                "no TaskQueue for this Celery app: create TaskQueue(store, app) "
                "in the module the worker loads"
            ) from None

    # -- caller's verbs -----------------------------------------------------

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

        Raises:
            CallbackRefused: the callback's URL is refused; nothing is written.
            InvalidTaskData: bad arguments, input the registered job cannot
                take, or both ``run_at`` and ``delay``.
        """
        registered = registered_job(self.app, name)
        if registered is not None:
            registered.check_input(input or {})
        if callback is not None:
            self.store.url_policy.check_url(callback.url)  # before anything is written
        if unique_key is not None and task_id is None:
            task_id = new_task_id()  # to tell a new task from the key's holder
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
        )
        joined = unique_key is not None and task.id != task_id
        if callback is not None:
            self._register(task, callback, owner, joined=joined)
        if joined:
            return task  # the live task that holds the key, already on its way
        starts_soon = task.run_at is None or task.run_at <= task.created_at + self.schedule_ahead
        if starts_soon and self._with_slots([task]):
            self.try_publish(task)
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

    def submit_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[Task]:
        """:meth:`submit` for many tasks: one transaction, then one broker connection.

        Each item holds :meth:`submit`'s arguments by name (``name`` is
        required; ``delay`` included). The tasks are committed together, all
        or none (:meth:`TaskStore.create_many <queuestore.TaskStore.create_many>`),
        then their messages are published on one connection, in the order
        given; if the broker fails part way, the rest wait in the store for the
        sweep, as for :meth:`submit`. An item whose ``unique_key`` a
        live task holds gives that task, published once already. An item's
        ``callback`` (a :class:`~queuestore.core.callbacks.CallbackRequest`, or a
        mapping of its fields) is registered after the commit and before any
        message goes out; if one cannot be, the batch's new tasks are deleted.

        Raises:
            InvalidTaskData: an item is invalid (the field says which, as
                ``tasks[3].input`` or ``tasks[3].callback.url``); nothing is written.
            TaskConflict: a ``task_id`` is already taken; nothing is written.
        """
        items = [self._creation(index, item) for index, item in enumerate(tasks)]
        callbacks = [item.pop("callback", None) for item in items]
        created = self.store.create_many(items)
        if any(callbacks):
            self._register_all(created, items, callbacks)
        new = [
            task
            for task, item in zip(created, items, strict=True)
            if task.id == item["task_id"]
            and (task.run_at is None or task.run_at <= task.created_at + self.schedule_ahead)
        ]
        self._publish_all(self._with_slots(new))
        return created

    def _with_slots(self, tasks: list[Task]) -> list[Task]:
        """Of new tasks to publish, those their owners' and jobs' free slots admit, in order.

        Under :attr:`limits` the others wait in the store without a message, as
        a task the claim refused at its limit waits, for a run that ends to hand
        its slot on: a flood of one owner's tasks puts no more messages in the
        broker than the owner has free slots. The tasks were committed before
        the count, so a run ending in between either is counted as ended, or
        sees them waiting when it hands its slot on.
        """
        if not self.limits or not any(self.limits.applies(task) for task in tasks):
            return tasks
        slots = self.limits.slots(self.store.running_counts())
        return [task for task in tasks if slots.take(task)]

    def _creation(self, index: int, item: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments of ``create`` for one item of :meth:`submit_many`."""
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise InvalidTaskData(
                "must be a mapping of submit's arguments, with name", field=f"tasks[{index}]"
            )
        arguments = dict(item)
        registered = registered_job(self.app, arguments["name"])
        try:
            if registered is not None:
                registered.check_input(arguments.get("input") or {})
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

    def _publish_all(self, tasks: list[Task]) -> None:
        """Publish the messages of ``tasks`` in kombu's publish batches on one connection.

        On Redis a batch is one pipeline of commands per :data:`_PUBLISH_BATCH`
        messages (kombu's ``Producer.batch``, kombu 5.7 and later; other
        transports and older kombus publish each at once). Only once every
        message went out are the publish marks taken: if the broker fails part
        way, none is marked, and the sweep publishes them all again
        (the claim drops a second message).
        """
        if not tasks:
            return
        connection = self.app.connection_for_write()
        failures = (
            BrokerUnavailable,
            *_BROKER_ERRORS,
            *connection.connection_errors,
            *connection.channel_errors,
        )
        try:
            with self.app.producer_or_acquire() as producer, _batch(producer):
                for task in tasks:
                    self.publish(task, countdown=_countdown(task, None), producer=producer)
        except failures as exc:
            log.warning("%d submitted tasks stay queued in the store: %s", len(tasks), exc)
            return
        finally:
            connection.release()
        for task in tasks:
            self.publish_marks.add(task)

    def cancel(self, task_id: str, *, owner: Owner = ANY, reason: str | None = None) -> Task:
        """Cancel a task: compare-and-set in the store, then revoke its job.

        A task that had not started never runs its job; a running job is
        interrupted (prefork pool) or stops at its next write or heartbeat.

        Raises:
            InvalidTransition: the task is already terminal.
            TaskNotFound: no such task visible to ``owner``.
        """
        task = self.store.cancel(task_id, owner=owner, reason=reason)
        try:
            if self.terminate_on_cancel:
                self.app.control.revoke(task_id, terminate=True, signal="SIGUSR1")
            else:
                self.app.control.revoke(task_id)
        except _BROKER_ERRORS as exc:
            log.warning(
                "revoke of %s not sent (%s); the worker sees the cancel itself", task_id, exc
            )
        return task

    def resume(self, task_id: str, answer: Any, *, owner: Owner = ANY) -> Task:
        """Answer a task in ``input_required`` and run its job again.

        Under :attr:`limits`, a task whose owner or job has no free slot waits
        for one, as a new task does.

        Raises:
            InvalidTransition: the task is not waiting for input.
            TaskNotFound: no such task visible to ``owner``.
        """
        task = self.store.provide_input(task_id, answer, owner=owner)
        if self._with_slots([task]):
            self.try_publish(task)
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

    # -- publishing --------------------------------------------------------

    def try_publish(
        self, task: Task, *, countdown: float | None = None, producer: Any = None
    ) -> bool:
        """Publish the message for the task's next run; False if the broker is down.

        A scheduled task's message waits (``countdown``) until its start.
        ``producer``: a kombu producer to publish with (one connection for many).
        """
        try:
            self.publish(task, countdown=_countdown(task, countdown), producer=producer)
        except BrokerUnavailable as exc:
            log.warning(
                "task %s stays queued in the store: %s", task.id, exc.__cause__, extra=about(task)
            )
            return False
        self.publish_marks.add(task)
        return True

    def publish(self, task: Task, *, countdown: float | None = None, producer: Any = None) -> None:
        """Send the Celery message for ``task``, whose Celery id is the task id.

        Raises:
            BrokerUnavailable: the broker did not take the message.
        """
        try:
            self.app.send_task(
                task.name,
                args=(task.id,),
                task_id=task.id,
                countdown=countdown,
                retry=True,
                retry_policy=_PUBLISH_RETRY,
                **({} if producer is None else {"producer": producer}),
                **({} if not self.priorities else {"priority": self._broker_priority(task)}),
            )
        except _BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"could not publish task {task.id}: {exc}") from exc

    def _broker_priority(self, task: Task) -> int:
        """The message priority of ``task`` as its broker reads it.

        AMQP delivers the highest number first, as queuestore counts; kombu's
        Redis transport pops its lowest priority first, so there it is turned over.
        """
        return MAX_PRIORITY - task.priority if self._redis else task.priority

    # -- maintenance (beat tasks) ------------------------------------------

    def sweep(self, *, limit: int = 500) -> int:
        """Publish tasks whose message never went out (broker down at submit) or was lost,
        and scheduled tasks that start within :attr:`schedule_ahead`; under
        :attr:`limits`, only as many of an owner's or a job's as it has free slots."""
        published = 0
        due = self.store.unpublished(
            self.publish_grace,
            republish_after=self.republish_after,
            ahead=self.schedule_ahead,
            limit=limit,
            limits=self.limits,
        )
        for task in due:
            if not self.try_publish(task):
                break
            published += 1
        self.publish_marks.flush()  # one write for the sweep, before the next can run
        if published:
            log.info("sweep published %d waiting tasks", published)
        return published

    def hand_off(self, ended: Task) -> int:
        """Publish the tasks waiting for the slot ``ended``'s run held; how many.

        Under :attr:`limits`, a run that ends (done, failed, parked, cancelled,
        retried or reaped) frees a slot of its owner and of its job: their
        waiting tasks are published now, as many as have free slots, the most
        urgent and longest waiting first, instead of at the next sweep. A task
        published twice this way is run once (the claim drops the second message).
        """
        if not self.limits.applies(ended):
            return 0
        waiting = self.store.unpublished(
            timedelta(0),
            ahead=self.schedule_ahead,
            limit=_HAND_OFF_LIMIT,
            limits=self.limits,
            freed_by=ended,
        )
        published = 0
        for task in waiting:
            if not self.try_publish(task):
                break
            published += 1
        return published

    def reap(self) -> list[Task]:
        """Retry or fail tasks whose worker died, and publish the retries.

        Under :attr:`limits`, a retry takes the slot its lost run held; a task
        that failed hands it on.
        """
        reaped = self.store.reap(max_lost_runs=self.max_lost_runs)
        for task in reaped:
            if task.is_terminal:
                log.warning("task %s failed: %s", task.id, task.error, extra=about(task))
            else:
                log.warning("task %s lost its worker; retrying", task.id, extra=about(task))
                self.try_publish(task, countdown=_reaper_backoff(lost_runs(task)))
        # After every retry is published: a hand-off would publish a retry again.
        for task in reaped:
            if task.is_terminal:
                self.hand_off(task)
        return reaped

    def install_beat_schedule(
        self,
        *,
        janitor_ttl: timedelta = timedelta(days=1),
        janitor_interval: timedelta = timedelta(minutes=1),
        janitor_batch_size: int = 1000,
        reaper_interval: timedelta = timedelta(seconds=10),
        sweep_interval: timedelta = timedelta(seconds=10),
    ) -> None:
        """Add the janitor, the reaper and the sweep to ``app.conf.beat_schedule``.

        Each entry expires after its own interval, so beats that pile up while
        no worker runs are dropped instead of all running at once.
        A ``sweep_interval`` no shorter than the queue's ``schedule_ahead``
        is logged as a warning: a scheduled task may then start up to the
        difference late.
        """
        if sweep_interval >= self.schedule_ahead:
            log.warning(
                "sweep_interval (%ss) is not shorter than the queue's schedule_ahead (%ss): "
                "scheduled tasks may start late",
                sweep_interval.total_seconds(),
                self.schedule_ahead.total_seconds(),
            )
        schedule = dict(self.app.conf.beat_schedule or {})
        schedule[JANITOR_TASK] = {
            "task": JANITOR_TASK,
            "schedule": janitor_interval,
            "kwargs": {
                "ttl_seconds": janitor_ttl.total_seconds(),
                "batch_size": janitor_batch_size,
            },
            "options": {"expires": janitor_interval.total_seconds()},
        }
        schedule[REAPER_TASK] = {
            "task": REAPER_TASK,
            "schedule": reaper_interval,
            "options": {"expires": reaper_interval.total_seconds()},
        }
        schedule[SWEEP_TASK] = {
            "task": SWEEP_TASK,
            "schedule": sweep_interval,
            "options": {"expires": sweep_interval.total_seconds()},
        }
        self.app.conf.beat_schedule = schedule


def _skipped_in_outage(name: str, run: Callable[[], int]) -> int:
    """Run a beat task; while the database is down, log and let the next beat try again."""
    try:
        return run()
    except StoreUnavailable as exc:
        log.warning("%s skipped this beat: %s", name, exc)
        return 0


class _NoRevokeBookkeepingWithoutBackend(logging.Filter):
    """Drops Celery's warning that a revoke could not be stored without a result backend.

    Since Celery 5.6 every worker that receives a revoke broadcast records it in
    the result backend (celery/celery#9869); with results disabled, as queuestore
    runs Celery, each cancel then logs a warning on every worker. The store is
    where a cancel is recorded, so that one warning (NotImplementedError from the
    disabled backend) is dropped; a real backend's failures are still logged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (
            record.msg == "Failed to mark task %s as revoked in backend: %s"
            and len(args) == 2
            and isinstance(args[1], NotImplementedError)
        )


_REVOKE_FILTER = _NoRevokeBookkeepingWithoutBackend()


def _register_maintenance(app: Celery) -> None:
    from celery.signals import worker_process_init

    from queuestore.beat.janitor import run_janitor

    def janitor(ttl_seconds: float, batch_size: int = 1000) -> int:
        queue = TaskQueue.of(app)
        ttl = timedelta(seconds=ttl_seconds)
        return _skipped_in_outage(
            "janitor", lambda: run_janitor(queue.store, ttl, batch_size=batch_size)
        )

    def reaper() -> int:
        return _skipped_in_outage("reaper", lambda: len(TaskQueue.of(app).reap()))

    def sweep() -> int:
        return _skipped_in_outage("sweep", TaskQueue.of(app).sweep)

    def forget_parent_connections(**_: Any) -> None:
        queue = _QUEUES.get(app)
        if queue is not None:
            queue.store.after_fork()

    logging.getLogger("celery.worker.control").addFilter(_REVOKE_FILTER)  # a repeat is ignored
    app.task(name=JANITOR_TASK, ignore_result=True, shared=False)(janitor)
    app.task(name=REAPER_TASK, ignore_result=True, shared=False)(reaper)
    app.task(name=SWEEP_TASK, ignore_result=True, shared=False)(sweep)
    worker_process_init.connect(forget_parent_connections, weak=False)


_HAND_OFF_LIMIT = 100
"""The most waiting tasks one ended run's hand-off reads (it publishes as many as are free)."""

_PUBLISH_BATCH = 1000
"""Messages ``submit_many`` buffers per broker round trip where the transport batches."""


def _batch(producer: Any) -> contextlib.AbstractContextManager[Any]:
    """``producer.batch()`` (kombu 5.7 and later), or publishing at once before it."""
    batch = getattr(producer, "batch", None)
    return contextlib.nullcontext() if batch is None else batch(_PUBLISH_BATCH)


def priority_config(broker_url: str) -> dict[str, Any]:
    """Celery settings under which ``broker_url``'s broker honours task priorities.

    RabbitMQ: every queue Celery declares gets ``x-max-priority`` 9. A queue
    that exists without it cannot be declared again with it: delete it (its
    messages are republished by the sweep after
    ``republish_after``, or drain it first) or move to a new queue name.
    Redis: ten priority steps, each a list of its own beside the queue's; the
    queue's own list then holds the most urgent messages and those without a
    priority (which kombu reads as its first step).
    """
    if broker_url.startswith(REDIS_SCHEMES):
        return {"broker_transport_options": {"priority_steps": list(range(MAX_PRIORITY + 1))}}
    return {"task_queue_max_priority": MAX_PRIORITY, "task_default_priority": 0}


def _countdown(task: Task, countdown: float | None) -> float | None:
    """``countdown``, or longer for a task whose start (``run_at``) is further away."""
    if task.run_at is not None:
        until_start = (task.run_at - datetime.now(UTC)).total_seconds()
        if until_start > (countdown or 0):
            return until_start
    return countdown


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


def _reaper_backoff(lost: int) -> float | None:
    """The countdown of a retry after ``lost`` lost runs: none after the first.

    A run lost once is most likely its node's death: run it again at once, so a
    dead worker's tasks run elsewhere within the lease and one reaper interval.
    Runs that keep dying (a job that kills its worker) back off 2 s, doubling,
    up to a minute.
    """
    return None if lost <= 1 else min(2.0 ** (lost - 1), 60.0)
