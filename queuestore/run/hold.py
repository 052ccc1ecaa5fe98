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

What each pool does (Celery 5.7):

- **prefork** and **threads** on Redis or RabbitMQ: the worker has an event
  loop, which runs the hold's ticks while the jobs run in other processes or
  threads: a run's message is acknowledged once it has run ``ack_after``.
- **solo** on Redis or RabbitMQ: the job runs on the event loop's own thread,
  so no tick runs until it returns; the run's message is acknowledged as soon
  as its claim is committed (:func:`claimed`, called by the run). On RabbitMQ,
  which pushes the next message as soon as one is acknowledged, the consumer
  first stops consuming, so that no message waits behind the job, and
  consumes again as the job ends (:func:`released`); Redis's consumer fetches
  nothing while the job holds its thread.
- **gevent** and **eventlet**, and any pool on a broker without an event loop
  (the embedded filesystem broker): the hold stays off, and messages are
  acknowledged when their job returns. The worker says so at start: a warning
  where the broker redelivers a message unacknowledged too long (Redis,
  RabbitMQ), a note on the filesystem broker, which never does.

On every pool, the worker warns at start when its prefetch multiplier (from
the app's settings or ``--prefetch-multiplier``) is above 1.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, ClassVar

from celery import Celery, bootsteps
from celery.signals import task_unknown
from celery.worker import state
from kombu.transport import virtual

from queuestore.broker.publisher import Publisher
from queuestore.broker.transports import is_redis
from queuestore.core.errors import InvalidTransition, StoreUnavailable, TaskConflict, TaskNotFound
from queuestore.core.messages import is_job_request
from queuestore.core.models import TaskStatus

log = logging.getLogger(__name__)

TICK_SECONDS = 0.5
"""How often the hold looks at the worker's running requests."""


def claimed(task_id: str) -> None:
    """Tell the hold that a run claimed ``task_id`` (the run calls it after its claim).

    On the solo pool the job runs on the consumer's thread, where no tick runs
    until it returns: the message is acknowledged now. Elsewhere it does nothing.
    """
    hold = MessageHold.inline
    if hold is not None:
        hold.hold_now(task_id)


def released(task_id: str) -> None:
    """Tell the hold that the run of ``task_id`` ended (the run calls it as it ends).

    On the solo pool the consumer then consumes again at once, rather than at
    the next tick. Elsewhere it does nothing.
    """
    hold = MessageHold.inline
    if hold is not None:
        hold.release_now(task_id)


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

    inline: ClassVar[MessageHold | None] = None
    """This process's hold when its jobs run on the consumer's own thread (the solo pool)."""

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.held: dict[str, Any] = {}
        self.unapplied = 0
        self.paused = False
        self.capacity = 1
        self.timer: Any = None
        self.enabled = True
        self.consumer: Any = None
        self.thread: int | None = None
        self.pushed = True
        """Whether the broker pushes messages (RabbitMQ) rather than the consumer fetching them."""

    def start(self, c: Any) -> None:
        if self.enabled:  # once, not at each reconnection
            self._warn_about_settings(c)
        if c.hub is None:
            if self.enabled:
                _say_why_there_is_no_event_loop(c)
            self.enabled = False
            return
        self.consumer, self.thread = c, threading.get_ident()
        self.pushed = not isinstance(c.connection.transport, virtual.Transport)
        if _pool_name(c) == "solo":
            MessageHold.inline = self
        self.capacity = max(int(getattr(c.pool, "num_processes", 1) or 1), 1)
        # A restarted consumer (the connection was lost) has a fresh prefetch
        # count: take again the credit of runs still held.
        self.unapplied = 0
        self.paused = False
        for _ in self.held:
            self._take_credit(c)
        self._pause_or_resume(c)
        self.timer = c.timer.call_repeatedly(TICK_SECONDS, self.tick, (c,), priority=10)

    def stop(self, c: Any) -> None:
        if MessageHold.inline is self:
            MessageHold.inline = None
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

    def hold_now(self, task_id: str) -> None:
        """Hold the message of a run that just claimed ``task_id`` on the consumer's thread.

        Consuming stops first (the pool's one slot is taken), then the message
        is acknowledged: the broker sends nothing more while the job runs, and
        the next tick after it returns gives the slot back.
        """
        c = self.consumer
        if c is None or threading.get_ident() != self.thread or task_id in self.held:
            return
        request = next((r for r in state.active_requests if r.id == task_id), None)
        if request is None or request.acknowledged:
            return
        if self.pushed:
            # RabbitMQ would send the next message as soon as this one is acknowledged,
            # to wait unacknowledged behind the job; Redis's consumer fetches nothing
            # while the job holds its thread.
            self.held[task_id] = request
            self._take_credit(c)
            self._pause_or_resume(c, every_run=True)
        # Now, not through Request.acknowledge: that goes through the event loop,
        # which runs again only when the job returns.
        request.message.ack_log_error(log, request.connection_errors)
        request.acknowledged = True

    def release_now(self, task_id: str) -> None:
        """Give back the slot of a run :meth:`hold_now` held, and consume again."""
        c = self.consumer
        if c is None or threading.get_ident() != self.thread or task_id not in self.held:
            return
        del self.held[task_id]
        self._give_credit(c)
        self._pause_or_resume(c, every_run=True)

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

    def _pause_or_resume(self, c: Any, *, every_run: bool = False) -> None:
        # On the solo pool every run pauses and resumes: that is no news at INFO.
        level = logging.DEBUG if every_run else logging.INFO
        full = self.unapplied > 0 or len(self.held) >= self.capacity
        if full and not self.paused:
            c.task_consumer.cancel()
            self.paused = True
            log.log(level, "queuestore: every pool slot runs a held job; consuming paused")
        elif not full and self.paused:
            c.task_consumer.consume()
            self.paused = False
            log.log(level, "queuestore: a held job ended; consuming again")

    @staticmethod
    def _warn_about_settings(c: Any) -> None:
        conf = c.app.conf
        # The consumer's own: the app's setting, or --prefetch-multiplier.
        multiplier = getattr(c, "prefetch_multiplier", conf.worker_prefetch_multiplier)
        if multiplier != 1:
            log.warning(
                "queuestore: the prefetch multiplier is %s: messages prefetched behind a long "
                "job wait unacknowledged and may pass the broker's consumer or visibility "
                "timeout; queuestore's default is 1 (worker_prefetch_multiplier, "
                "--prefetch-multiplier)",
                multiplier,
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


def _pool_name(c: Any) -> str:
    """The worker's pool as ``--pool`` names it: prefork, solo, threads, gevent, eventlet."""
    module = type(c.pool).__module__.rsplit(".", 1)[-1]
    return {"thread": "threads"}.get(module, module)


def _say_why_there_is_no_event_loop(c: Any) -> None:
    """Say at start that messages wait for their job, and why: the pool or the broker."""
    broker = str(getattr(c.connection.transport, "driver_type", "this"))
    if broker == "filesystem":
        log.info(
            "queuestore: the filesystem broker has no event loop: a run's message is "
            "acknowledged when its job returns (this broker never redelivers a message "
            "on a timeout)"
        )
        return
    pool = _pool_name(c)
    cause = (
        f"the {pool} pool has no event loop"
        if pool in {"gevent", "eventlet"}
        else f"the {broker} broker has no event loop"
    )
    log.warning(
        "queuestore: %s: messages stay unacknowledged until their job returns, so a job "
        "longer than the broker's consumer timeout (RabbitMQ) or visibility timeout "
        "(Redis) is redelivered; use the prefork, threads or solo pool for long jobs",
        cause,
    )
