"""What queuestore sets on a Celery app for its broker: Redis's timeouts and priorities.

A message a killed worker had fetched goes back to its Redis queue after the
visibility timeout, which follows the lease here; priorities need the
brokers' own settings (:func:`priority_config`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import Celery

from queuestore.core.validation import MAX_PRIORITY

REDIS_SCHEMES = ("redis://", "rediss://", "sentinel://", "redis+socket://")
"""Broker URLs of kombu's Redis transport."""


def is_redis(app: Celery) -> bool:
    """Whether ``app``'s broker is Redis (kombu's Redis transport)."""
    return str(app.conf.broker_url or "").startswith(REDIS_SCHEMES)


def redis_transport_options(lease: timedelta) -> dict[str, float]:
    """Kombu Redis options that follow the lease, so a dead worker's messages run again soon.

    A message a killed worker had fetched (running, or prefetched and waiting)
    goes back to its queue ``visibility_timeout`` after it was fetched; kombu
    looks for such messages every ``unacked_restore_interval``. The visibility
    timeout is the lease: a live run's message is acknowledged at ``ack_after``
    (half the lease by default), well before it.
    """
    seconds = lease.total_seconds()
    return {
        "visibility_timeout": seconds,
        "unacked_restore_interval": max(1.0, min(10.0, seconds / 3)),
        "unacked_restore_throttle": 1,
    }


def follow_lease(app: Celery, lease: timedelta) -> None:
    """Set ``app``'s Redis transport options from the lease, where the app set none."""
    if not is_redis(app):
        return
    options = dict(app.conf.broker_transport_options or {})
    for key, value in redis_transport_options(lease).items():
        options.setdefault(key, value)
    app.conf.broker_transport_options = options


def priority_config(broker_url: str) -> dict[str, Any]:
    """Celery settings under which ``broker_url``'s broker honours task priorities.

    RabbitMQ: every queue Celery declares gets ``x-max-priority`` 9. A queue
    that exists without it cannot be declared again with it: delete it (its
    messages are published again by the sweep after ``republish_after``, or
    drain it first) or move to a new queue name.
    Redis: ten priority steps, each a list of its own beside the queue's; the
    queue's own list then holds the most urgent messages and those without a
    priority (which kombu reads as its first step).
    """
    if broker_url.startswith(REDIS_SCHEMES):
        return {"broker_transport_options": {"priority_steps": list(range(MAX_PRIORITY + 1))}}
    return {"task_queue_max_priority": MAX_PRIORITY, "task_default_priority": 0}


def broker_priority(app: Celery, priority: int) -> int:
    """A task's priority as ``app``'s broker reads it.

    AMQP delivers the highest number first, as queuestore counts; kombu's
    Redis transport pops its lowest priority first, so there it is turned over.
    """
    return MAX_PRIORITY - priority if is_redis(app) else priority
