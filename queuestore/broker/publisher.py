"""Publishing: a task's Celery message goes out after its row is committed.

The row is the truth and the message only says "run it now": a message
whose publish fails is published again from the row by the sweep
(:mod:`queuestore.beat.sweep`), and a second message is harmless, since a
run claims its task before running it. A :class:`Publisher` joins a store
to a Celery app under one queue's :class:`~queuestore.core.options.QueueOptions`;
``Publisher.of(app)`` finds it, on every side of the app's process.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Celery
from kombu import exceptions as kombu_errors
from kombu.exceptions import OperationalError as KombuOperationalError

from queuestore.broker import bulk
from queuestore.broker.after_commit import AfterCommit
from queuestore.broker.marks import PublishMarks
from queuestore.broker.transports import broker_priority, follow_lease
from queuestore.core import tracing
from queuestore.core.errors import BrokerUnavailable
from queuestore.core.logs import about
from queuestore.core.messages import job_message
from queuestore.core.models import Task
from queuestore.core.options import QueueOptions
from queuestore.store.base import TaskStore

log = logging.getLogger(__name__)

BROKER_ERRORS = (KombuOperationalError, ConnectionError, OSError)
"""What a broker call raises when the broker cannot be reached."""

BATCH_FAILED: type[Exception] = getattr(kombu_errors, "BatchPublishError", KombuOperationalError)
"""What a publish batch whose pipeline failed raises (kombu 5.7 and later; some of
its messages may have gone out)."""

_PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}

_PUBLISH_BATCH = 1000
"""Messages :meth:`Publisher.publish_many` buffers per broker round trip where it batches."""

_HAND_OFF_LIMIT = 100
"""The most waiting tasks one ended run's hand-off reads (it publishes as many as are free)."""

_PUBLISHERS: weakref.WeakKeyDictionary[Celery, Publisher] = weakref.WeakKeyDictionary()
_PUBLISHERS_LOCK = threading.Lock()


class Publisher:
    """Publishes the messages of ``store``'s tasks on ``app``, as ``options`` say.

    Args:
        store: where the tasks live.
        app: the Celery app whose workers run them.
        options: the queue's durations and limits.
    """

    def __init__(self, store: TaskStore, app: Celery, options: QueueOptions) -> None:
        self.store = store
        self.app = app
        self.options = options
        self.marks = PublishMarks(store, delay=options.publish_grace.total_seconds() / 2)
        self.after_commit = AfterCommit(self)
        """Publishes the tasks submitted in a caller's transaction once it commits."""
        follow_lease(app, options.lease)

    @classmethod
    def of(cls, app: Celery) -> Publisher:
        """The publisher bound to ``app`` in this process (by its ``TaskQueue``).

        Raises:
            RuntimeError: no ``TaskQueue(store, app)`` was created; create it in
                the module that Celery loads with ``-A``.
        """
        try:
            return _PUBLISHERS[app]
        except KeyError:
            raise RuntimeError(
                "no TaskQueue for this Celery app: create TaskQueue(store, app) "
                "in the module the worker loads"
            ) from None

    def bind(self) -> bool:
        """Make this the app's publisher in this process; True the first time the app is bound."""
        with _PUBLISHERS_LOCK:
            first = self.app not in _PUBLISHERS
            _PUBLISHERS[self.app] = self
        return first

    def publish(self, task: Task, *, countdown: float | None = None, producer: Any = None) -> None:
        """Send the Celery message for ``task``, whose Celery id is the task id.

        With traces on, the message is published in a ``queuestore.publish``
        span of the task's trace, whose context goes in its ``traceparent`` header.

        Raises:
            BrokerUnavailable: the broker did not take the message.
        """
        with tracing.of_task("queuestore.publish", task, kind="producer") as made:
            headers = tracing.headers(tracing.traceparent() if made is not None else None)
            self._send(task, countdown, producer, headers)

    def _send(
        self, task: Task, countdown: float | None, producer: Any, headers: dict[str, str]
    ) -> None:
        try:
            self.app.send_task(
                task.name,
                **job_message(task.id),
                **({"headers": headers} if headers else {}),
                countdown=countdown,
                retry=True,
                retry_policy=_PUBLISH_RETRY,
                **({} if producer is None else {"producer": producer}),
                **(
                    {"priority": broker_priority(self.app, task.priority)}
                    if self.options.priorities
                    else {}
                ),
            )
        except BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"could not publish task {task.id}: {exc}") from exc

    def try_publish(
        self, task: Task, *, countdown: float | None = None, producer: Any = None
    ) -> bool:
        """Publish the message for the task's next run; False if the broker is down.

        A scheduled task's message waits (``countdown``) until its start. A
        task whose message went out gets its publish mark (late, in a batch);
        one whose message did not stays unpublished in the store, for the sweep.
        ``producer``: a kombu producer to publish with (one connection for many).
        """
        try:
            self.publish(task, countdown=countdown_for(task, countdown), producer=producer)
        except BrokerUnavailable as exc:
            log.warning(
                "task %s stays queued in the store: %s", task.id, exc.__cause__, extra=about(task)
            )
            return False
        self.marks.add(task)
        return True

    def publish_many(self, tasks: list[Task]) -> None:
        """Publish the messages of ``tasks`` in kombu's publish batches on one connection.

        On Redis the messages of new tasks are made from one template per job
        and pushed in one pipeline (:mod:`~queuestore.broker.bulk`); otherwise
        a batch is one pipeline of commands per :data:`_PUBLISH_BATCH`
        messages (kombu's ``Producer.batch``, kombu 5.7 and later; other
        transports and older kombus publish each at once). Only once every
        message went out are the publish marks taken: if the broker fails part
        way, none is marked, and the sweep publishes them all again (the
        claim drops a second message). As with :meth:`try_publish`, a broker
        that cannot be reached raises nothing: the tasks stay in the store,
        unpublished, for the sweep. That covers a batch whose pipeline failed
        (kombu's ``BatchPublishError``: some of its messages may have gone out)
        and every connection or channel error of the transport.
        """
        if not tasks:
            return
        connection = self.app.connection_for_write()
        failures = (
            BrokerUnavailable,
            BATCH_FAILED,
            *BROKER_ERRORS,
            *connection.connection_errors,
            *connection.channel_errors,
        )
        try:
            with self.app.producer_or_acquire() as producer:
                rest = self._push_templated(tasks, producer)
                with _batch(producer):
                    for task in rest:
                        self.publish(task, countdown=countdown_for(task, None), producer=producer)
        except failures as exc:
            log.warning("%d submitted tasks stay queued in the store: %s", len(tasks), exc)
            return
        finally:
            connection.release()
        self.marks.add_many(tasks)

    def _push_templated(self, tasks: list[Task], producer: Any) -> list[Task]:
        """Push the messages :mod:`~queuestore.broker.bulk` can make from a template, in
        one pipeline; the tasks left for ``send_task`` (all of them where it cannot)."""
        if len(tasks) < 2 or not bulk.usable(self.app, producer):
            return tasks
        templates: dict[tuple[str, int], bulk.Template | None] = {}
        messages: list[tuple[str, str]] = []
        rest: list[Task] = []
        for task in tasks:
            shape = bulk.shape(task)
            if countdown_for(task, None) is not None:
                rest.append(task)
            elif shape in templates:
                made = templates[shape]
                if made is None:
                    rest.append(task)
                else:
                    messages.append((made.key, made.text(task.id)))
            else:
                caught = bulk.catch(
                    producer, functools.partial(self.publish, task, producer=producer), task.id
                )
                templates[shape] = None if isinstance(caught, bool) else caught
                if isinstance(caught, bulk.Template):
                    messages.append((caught.key, caught.text(task.id)))
                elif not caught:
                    rest.append(task)  # its message was made and dropped: send it
        if messages:
            bulk.push(producer, messages)
        return rest

    def admitted(self, tasks: list[Task]) -> list[Task]:
        """Of new tasks to publish, those their owners' and jobs' free slots admit, in order.

        Under the queue's concurrency limits the others wait in the store
        without a message, as a task the claim refused at its limit waits, for
        a run that ends to hand its slot on: a flood of one owner's tasks puts
        no more messages in the broker than the owner has free slots. The
        tasks were committed before the count, so a run ending in between
        either is counted as ended, or sees them waiting when it hands its
        slot on.
        """
        limits = self.options.limits
        if not limits or not any(limits.applies(task) for task in tasks):
            return tasks
        slots = limits.slots(self.store.running_counts())
        return [task for task in tasks if slots.take(task)]

    def starts_soon(self, task: Task) -> bool:
        """Whether ``task`` starts within ``schedule_ahead`` of its creation (publish it now)."""
        return task.run_at is None or task.run_at <= task.created_at + self.options.schedule_ahead

    def hand_off(self, ended: Task) -> int:
        """Publish the tasks waiting for the slot ``ended``'s run held; how many.

        Under the concurrency limits, a run that ends (done, failed, parked,
        cancelled, retried or reaped) frees a slot of its owner and of its
        job: their waiting tasks are published now, as many as have free
        slots, the most urgent and longest waiting first, instead of at the
        next sweep. A task published twice this way is run once (the claim
        drops the second message).
        """
        limits = self.options.limits
        if not limits.applies(ended):
            return 0
        waiting = self.store.unpublished(
            timedelta(0),
            ahead=self.options.schedule_ahead,
            limit=_HAND_OFF_LIMIT,
            limits=limits,
            freed_by=ended,
        )
        published = 0
        for task in waiting:
            if not self.try_publish(task):
                break
            published += 1
        return published

    def wake_parents(self, ended: Iterable[Task]) -> list[Task]:
        """Wake the parents parked on these ended tasks, and publish them; the ones woken.

        A parent waiting for its children (``TaskContext.wait``) runs again once
        none it waits for is live: whoever ends a child calls this, so the
        parent runs at once; the sweep wakes any parent whose waker died
        (:meth:`TaskStore.wake_due <queuestore.TaskStore.wake_due>`).
        """
        parents = {task.parent_id for task in ended if task.parent_id and task.is_terminal}
        if not parents:
            return []
        woken = self.store.wake(parents)
        for task in self.admitted(woken):
            self.try_publish(task)
        return woken


def countdown_for(task: Task, countdown: float | None) -> float | None:
    """``countdown``, or longer for a task whose start (``run_at``) is further away."""
    if task.run_at is not None:
        until_start = (task.run_at - datetime.now(UTC)).total_seconds()
        if until_start > (countdown or 0):
            return until_start
    return countdown


def _batch(producer: Any) -> contextlib.AbstractContextManager[Any]:
    """``producer.batch()`` (kombu 5.7 and later), or publishing at once before it."""
    batch = getattr(producer, "batch", None)
    return contextlib.nullcontext() if batch is None else batch(_PUBLISH_BATCH)
