"""The worker's hold on a claimed task's message: acknowledged once the store owns the task.

Celery acknowledges a late-ack message only when its task returns, so a long
job keeps its message unacknowledged for as long as it runs. Brokers do not
wait forever for that: RabbitMQ closes the channel of a delivery unacknowledged
past its ``consumer_timeout`` (30 minutes by default) and redelivers it, and
Redis hands an unacknowledged message to another consumer after its visibility
timeout. Once a run's claim is committed the message has done its job: the
lease, the heartbeat and the reaper make the store, not the broker, the keeper
of the task (a run whose worker dies is retried by the reaper after its lease).

:class:`MessageHold` is a consumer bootstep that, on every tick of the worker's
event loop, acknowledges the message of each queuestore run that has been
running for ``ack_after`` and whose task the store shows claimed, and takes the
message's prefetch credit with it, so that an acknowledged run still fills its
pool slot: the broker sends no message the pool cannot start. When every pool
slot holds such a run, the worker stops consuming until one ends. A message is
acknowledged once, so a task that runs for hours is never redelivered.

It needs the worker's event loop (the prefork pool on RabbitMQ or Redis); on
the solo, threads or gevent pools it stays off and says so at start.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import Celery, bootsteps
from celery.signals import task_unknown
from celery.worker import state

from queuestore.broker.publisher import Publisher
from queuestore.broker.transports import is_redis
from queuestore.core.errors import InvalidTransition, StoreUnavailable, TaskConflict, TaskNotFound
from queuestore.core.messages import is_job_request
from queuestore.core.models import TaskStatus

log = logging.getLogger(__name__)

TICK_SECONDS = 0.5
"""How often the hold looks at the worker's running requests."""


def install(app: Celery) -> None:
    """Add :class:`MessageHold` to ``app``'s worker consumer (once per app)."""
    steps = app.steps["consumer"]
    if MessageHold not in steps:
        steps.add(MessageHold)
    task_unknown.connect(fail_unknown_job, weak=False, dispatch_uid="queuestore.unknown_job")


def fail_unknown_job(sender: Any = None, name: str = "", id: str = "", **_: Any) -> None:
    """Fail the task of a message for a job this worker does not know.

    Celery discards such a message ("unregistered task"), so the task would
    wait, ``submitted``, until the sweep's ``republish_after``: it fails now,
    with an ``UnknownJob`` error that names the job and the worker.
    """
    app = getattr(sender, "app", None)
    if app is None or not id:
        return
    try:
        store = Publisher.of(app).store
        task = store.get(id)
        if task.status is not TaskStatus.SUBMITTED or task.name != name:
            return
        store.update(
            id,
            status=TaskStatus.FAILED,
            error={
                "type": "UnknownJob",
                "message": f"the worker {getattr(sender, 'hostname', '?')} that received it "
                f"has no job named {name!r}: deploy a worker that registers it, then submit "
                "the task again",
            },
            expected_version=task.version,
        )
        log.error("task %s: no job named %r on this worker; the task failed", id, name)
    except (RuntimeError, TaskNotFound, InvalidTransition, TaskConflict, StoreUnavailable) as exc:
        log.info("task %s: unknown job %r left as it is (%s)", id, name, exc)


class MessageHold(bootsteps.StartStopStep):  # type: ignore[misc]
    """Acknowledges claimed runs' messages early and keeps their prefetch credit taken."""

    requires = ("celery.worker.consumer.tasks:Tasks",)
    label = "queuestore message hold"

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.held: dict[str, Any] = {}
        self.unapplied = 0
        self.paused = False
        self.capacity = 1
        self.timer: Any = None
        self.enabled = True

    def start(self, c: Any) -> None:
        if c.hub is None:
            if self.enabled:
                log.warning(
                    "queuestore: this pool has no event loop (solo, threads or gevent): "
                    "messages stay unacknowledged until their job returns, so a job longer "
                    "than the broker's consumer timeout (RabbitMQ) or visibility timeout "
                    "(Redis) is redelivered; use the prefork pool for long jobs"
                )
            self.enabled = False
            return
        self.capacity = max(int(getattr(c.pool, "num_processes", 1) or 1), 1)
        # A restarted consumer (the connection was lost) has a fresh prefetch
        # count: take again the credit of runs still held.
        self.unapplied = 0
        self.paused = False
        for _ in self.held:
            self._take_credit(c)
        self._pause_or_resume(c)
        self._warn_about_settings(c)
        self.timer = c.timer.call_repeatedly(TICK_SECONDS, self.tick, (c,), priority=10)

    def stop(self, c: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def shutdown(self, c: Any) -> None:
        self.stop(c)

    def tick(self, c: Any) -> None:
        """Give back the credit of ended runs, hold the runs now due, pause or resume."""
        try:
            active = set(state.active_requests)
            for task_id, request in list(self.held.items()):
                if request not in active:
                    del self.held[task_id]
                    self._give_credit(c)
            due = [request for request in active if self._due(c.app, request)]
            for request in due:
                if self._claimed(c.app, request.id):
                    request.acknowledge()
                    self.held[request.id] = request
                    self._take_credit(c)
            self._pause_or_resume(c)
        except Exception:  # a tick must never take the consumer down
            log.exception("queuestore: message hold tick failed")

    def _due(self, app: Celery, request: Any) -> bool:
        if request.acknowledged or request.id in self.held or request.time_start is None:
            return False
        if not is_job_request(request):
            return False
        ack_after = Publisher.of(app).options.ack_after.total_seconds()
        return bool(time.time() - request.time_start >= ack_after)

    @staticmethod
    def _claimed(app: Celery, task_id: str) -> bool:
        """Whether the store owns the task now: a run claimed it, or it is already over."""
        try:
            task = Publisher.of(app).store.get(task_id)
        except TaskNotFound:
            return True  # deleted: nothing left for the message to deliver
        except StoreUnavailable:
            return False  # look again at the next tick
        return task.status is not TaskStatus.SUBMITTED

    def _take_credit(self, c: Any) -> None:
        # kombu never lowers a prefetch count below 1 (0 would mean unlimited):
        # what it cannot take is kept here, and consumption pauses instead.
        if c.qos.value > 1:
            c.qos.decrement_eventually()
        else:
            self.unapplied += 1

    def _give_credit(self, c: Any) -> None:
        if self.unapplied:
            self.unapplied -= 1
        else:
            c.qos.increment_eventually()

    def _pause_or_resume(self, c: Any) -> None:
        full = self.unapplied > 0 or len(self.held) >= self.capacity
        if full and not self.paused:
            c.task_consumer.cancel()
            self.paused = True
            log.info("queuestore: every pool slot runs a held job; consuming paused")
        elif not full and self.paused:
            c.task_consumer.consume()
            self.paused = False
            log.info("queuestore: a held job ended; consuming again")

    @staticmethod
    def _warn_about_settings(c: Any) -> None:
        conf = c.app.conf
        if conf.worker_prefetch_multiplier != 1:
            log.warning(
                "queuestore: worker_prefetch_multiplier=%s; messages prefetched behind a long "
                "job wait unacknowledged and may pass the broker's consumer or visibility "
                "timeout; queuestore's default is 1",
                conf.worker_prefetch_multiplier,
            )
        if is_redis(c.app):
            lease = Publisher.of(c.app).options.lease.total_seconds()
            visibility = (conf.broker_transport_options or {}).get("visibility_timeout", 3600)
            if visibility > 2 * lease:
                log.warning(
                    "queuestore: Redis visibility_timeout=%ss is more than twice the lease "
                    "(%ss): a killed worker's prefetched messages wait that long to run "
                    "elsewhere",
                    visibility,
                    lease,
                )
