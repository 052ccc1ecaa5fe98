"""The deliverer: sends the deliveries of task status changes to their callbacks.

Run one or more per deployment (``queuestore deliver``): each takes the due
deliveries from the store (:meth:`~queuestore.store.base.TaskStore.take_deliveries`),
sends them on a pool of threads and settles each: delivered on a 2xx answer,
tried again later with exponential backoff and jitter, or dead once the
receiver refuses it for good or it is older than :attr:`DeliveryPolicy.max_age`.

Nothing is sent by the process that changed the task, and nothing is lost
when a deliverer dies: a delivery taken and never settled is taken again when
its lease runs out (at least once; the receiver de-duplicates by
``webhook-id``). Deliveries of one callback go one at a time, in the order of
their task's changes.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from queuestore.core import tracing
from queuestore.core.callbacks import SNAPSHOT_FIELDS, Callback, CallbackFormat, Delivery
from queuestore.core.errors import StoreUnavailable, TaskNotFound
from queuestore.core.models import Task
from queuestore.push.sender import CallFailed, post
from queuestore.push.signing import SigningSecret, signature_headers
from queuestore.store.base import TaskStore
from queuestore.store.deliveries import Outgoing, Settlement

log = logging.getLogger(__name__)

Request = tuple[bytes, dict[str, str]]
"""A delivery as it goes on the wire: the body, and the headers beside the signature's."""

Formatter = Callable[[Delivery, Callback], Request]
"""Writes a delivery for its callback's format."""


def webhook_request(delivery: Delivery, callback: Callback) -> Request:
    """A Standard Webhooks event: ``{"type": "task.<status>", "timestamp", "data": <task>}``.

    ``data`` is the task as the change left it: its id, name, status, status
    message, progress, result, error, artifacts, metadata, timestamps,
    attempt and version.
    """
    task = delivery.task
    data = {} if task is None else task.model_dump(mode="json", include=set(SNAPSHOT_FIELDS))
    event = {
        "type": f"task.{delivery.status.value}",
        "timestamp": delivery.created_at.isoformat().replace("+00:00", "Z"),
        "data": data,
    }
    body = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
    return body, {}


@dataclass(frozen=True)
class DeliveryPolicy:
    """How a deliverer calls receivers, and when it gives up.

    Attributes:
        timeout: seconds one call may take, connection included.
        max_response_bytes: how much of a receiver's answer is read.
        backoff: seconds before the first retry; each retry waits twice the
            last, up to ``backoff_max``, less up to half of it at random (jitter).
        backoff_max: the longest wait between two tries, in seconds.
        max_age: a delivery still failing this long after its change is dead.
        lease: how long a taken delivery is its deliverer's; longer than
            ``timeout``. One that dies mid-call leaves it to others after this.
    """

    timeout: float = 10.0
    max_response_bytes: int = 64 * 1024
    backoff: float = 1.0
    backoff_max: float = 300.0
    max_age: timedelta = timedelta(hours=24)
    lease: timedelta = timedelta(seconds=60)

    def __post_init__(self) -> None:
        if self.timeout <= 0 or self.backoff <= 0 or self.backoff_max < self.backoff:
            raise ValueError("timeout and backoff must be positive, backoff_max >= backoff")
        if self.lease.total_seconds() <= self.timeout:
            raise ValueError("the lease must be longer than the timeout")

    def delay(self, tries: int) -> float:
        """Seconds before the try after ``tries`` failed ones, jittered."""
        ceiling = min(self.backoff_max, self.backoff * 2.0 ** max(tries - 1, 0))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def settle(self, delivery: Delivery, failure: CallFailed, now: datetime) -> Settlement:
        """What a failed try leads to: a retry, or death."""
        if not failure.retryable:
            return Settlement.dead(failure.reason, failure.status)
        retry_at = now + timedelta(seconds=self.delay(delivery.tries))
        if retry_at - delivery.created_at > self.max_age:
            return Settlement.dead(f"{failure.reason} (gave up at max age)", failure.status)
        return Settlement.retry(retry_at, failure.reason, failure.status)


class DeliveryObserver(Protocol):
    """What a deliverer reports, for metrics."""

    def delivered(self, delivery: Delivery, delay: float) -> None:
        """A delivery was taken by its receiver ``delay`` seconds after its change."""

    def retried(self, delivery: Delivery, error: str) -> None:
        """A try failed and the delivery will be tried again."""

    def failed(self, delivery: Delivery, error: str) -> None:
        """A delivery is dead."""


@dataclass
class Deliverer:
    """Sends a store's deliveries, on ``concurrency`` threads, until stopped.

    Args:
        store: the store whose deliveries it sends.
        secrets: the signing secrets; every delivery carries one signature per
            secret (to rotate, add the new one first, drop the old later).
            With none, deliveries are sent unsigned.
        policy: timeouts, backoff, maximum age and lease.
        formats: how each callback format is written; ``webhook`` is built
            in, :mod:`queuestore.a2a` adds ``a2a``.
        concurrency: calls in flight at once (each to a different callback).
        poll_interval: seconds between looks for due deliveries when nothing wakes
            the deliverer (PostgreSQL NOTIFY wakes it at each change).
        observer: told of each delivery, retry and death.
    """

    store: TaskStore
    secrets: Sequence[SigningSecret] = ()
    policy: DeliveryPolicy = field(default_factory=DeliveryPolicy)
    formats: Mapping[CallbackFormat, Formatter] = field(default_factory=dict)
    concurrency: int = 8
    poll_interval: float = 1.0
    observer: DeliveryObserver | None = None

    def __post_init__(self) -> None:
        self.formats = {CallbackFormat.WEBHOOK: webhook_request, **self.formats}
        self._wake = threading.Event()
        self._wake.set()  # look at once
        self._stop = threading.Event()
        self._free = threading.Semaphore(self.concurrency)

    def run_once(self) -> int:
        """Take what is due (up to the free threads' worth), send it, settle it; how many."""
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="deliver") as pool:
            return len(self._take_and_send(pool, self._free_slots()))

    def run(self) -> None:
        """Deliver until :meth:`stop` is called (from another thread or a signal handler)."""
        listener = threading.Thread(target=self._listen, name="deliver-listen", daemon=True)
        listener.start()
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="deliver") as pool:
            while not self._stop.is_set():
                self._wake.wait(self.poll_interval)
                self._wake.clear()
                free = self._free_slots()
                if free and len(self._take_and_send(pool, free)) == free:
                    self._wake.set()  # a full batch: more may be due
        listener.join(timeout=self.poll_interval + 1)

    def start(self) -> threading.Thread:
        """Run in a thread of this process (a daemon); :meth:`stop` ends it."""
        thread = threading.Thread(target=self.run, name="deliverer", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop taking deliveries; :meth:`run` returns once the calls in flight end."""
        self._stop.set()
        self._wake.set()

    def _listen(self) -> None:
        """Wake the loop at each committed delivery (where the store announces them)."""
        while not self._stop.is_set():
            try:
                with self.store.subscribe_deliveries() as listen:
                    while not self._stop.is_set():
                        if listen(self.poll_interval):
                            self._wake.set()
            except StoreUnavailable as exc:
                log.warning("deliveries: listening failed, polling meanwhile: %s", exc)
                self._stop.wait(self.poll_interval)

    def _free_slots(self) -> int:
        free = 0
        while self._free.acquire(blocking=False):
            free += 1
        return free

    def _take_and_send(self, pool: ThreadPoolExecutor, free: int) -> list[Future[None]]:
        """Take up to ``free`` deliveries and start sending each on the pool."""
        if not free:
            return []
        try:
            taken = self.store.take_deliveries(limit=free, lease=self.policy.lease)
        except StoreUnavailable as exc:
            log.warning("deliveries: the store is unavailable: %s", exc)
            taken = []
        for _ in range(free - len(taken)):
            self._free.release()
        return [pool.submit(self._try, outgoing) for outgoing in taken]

    def _try(self, outgoing: Outgoing) -> None:
        try:
            self._send(outgoing)
        except Exception:  # a bug must not stop the deliverer; the lease retries it
            log.exception("deliveries: try of %s failed", outgoing.delivery.event_id)
        finally:
            self._free.release()
            self._wake.set()

    def _send(self, outgoing: Outgoing) -> None:
        """Send one try, in a ``queuestore.deliver`` span of its task's trace (traces on)."""
        task = self._traced(outgoing.delivery)
        if task is None:
            self._send_try(outgoing)
            return
        attributes = {
            "queuestore.delivery_id": outgoing.delivery.id,
            "queuestore.tries": outgoing.delivery.tries,
            "url.full": outgoing.callback.url,
        }
        with tracing.of_task("queuestore.deliver", task, kind="client", attributes=attributes):
            self._send_try(outgoing)

    def _traced(self, delivery: Delivery) -> Task | None:
        """The delivery's task, to trace its try in; None with traces off (or no task)."""
        if not tracing.enabled():
            return None
        try:
            return self.store.get(delivery.task_id)
        except (TaskNotFound, StoreUnavailable):
            return None

    def _send_try(self, outgoing: Outgoing) -> None:
        delivery, callback = outgoing.delivery, outgoing.callback
        formatter = self.formats.get(callback.format)
        if formatter is None:
            missing = f"this deliverer cannot write {callback.format.value!r} deliveries"
            self._settle(delivery, Settlement.dead(missing))
            return
        body, headers = formatter(delivery, callback)
        headers = signature_headers(self.secrets, delivery.event_id, body) | headers
        try:
            response = post(
                callback.url,
                body,
                headers,
                policy=self.store.url_policy,
                timeout=self.policy.timeout,
                max_response_bytes=self.policy.max_response_bytes,
            )
        except CallFailed as failure:
            settlement = self.policy.settle(delivery, failure, datetime.now(UTC))
            self._settle(delivery, settlement)
            return
        self._settle(delivery, Settlement.delivered(response.status))

    def _settle(self, delivery: Delivery, settlement: Settlement) -> None:
        if not self.store.settle_delivery(delivery, settlement):
            return  # its lease ran out and another deliverer has it
        if self.observer is None:
            return
        if settlement.error is None:
            delay = (datetime.now(UTC) - delivery.created_at).total_seconds()
            self.observer.delivered(delivery, max(delay, 0.0))
        elif settlement.retry_at is not None:
            self.observer.retried(delivery, settlement.error)
        else:
            self.observer.failed(delivery, settlement.error)


__all__ = ["Deliverer", "DeliveryObserver", "DeliveryPolicy", "Formatter", "webhook_request"]
