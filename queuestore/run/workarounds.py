"""Workarounds for bugs of the Celery and kombu releases queuestore supports, set at worker start.

Each one is small, applied once per process by :func:`apply` (from Celery's
``worker_init`` signal, which only a worker sends), and says which bug it
covers and how it behaves once the bug is fixed upstream, so it can be
removed when the releases it covers are no longer supported.

**A Redis restart takes a prefork worker down** (Celery 5.7, kombu 5.4 to
5.7). When the broker connection breaks, the consumer first collects the old
connection (``Connection.collect``: it closes the channels and drops the
transport's client), then closes it (``Connection.close``). If the consumer
was waiting on Redis (``BRPOP``, a pool slot free), closing its default
channel in the collect fails with a connection error, which kombu ignores,
so the channel stays open; the close then tries again, and the channel, to
give back its unacknowledged messages, builds a new Redis connection pool
from the transport's client, which is gone: ``AttributeError: 'NoneType'
object has no attribute 'hostname'``. That is not a connection error, so the
consumer does not reconnect and the worker exits (``Unrecoverable error``).
The same error fails the acknowledgement of a run that ends after the
reconnect on such a channel. The workaround makes a Redis channel whose
transport was closed raise the connection error it is (Redis's
``ConnectionError``) when it needs a new pool: kombu and Celery already
handle that one, the channel closes, and the consumer reconnects. A message
it could not give back stays in Redis's unacknowledged set, which Redis
redelivers after its visibility timeout (the lease), and the claim drops a
copy of a task already run.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_APPLIED: set[str] = set()
_LOCK = threading.Lock()


def apply(**_: Any) -> None:
    """Apply every workaround this process needs (a ``worker_init`` receiver)."""
    with _LOCK:
        if "redis-closed-channel" not in _APPLIED:
            _APPLIED.add("redis-closed-channel")
            _closed_redis_channels_raise_connection_errors()


_CONNPARAMS = "_connparams"
"""The Redis channel's method that reads its connection's parameters, to build a pool."""


def _closed_redis_channels_raise_connection_errors() -> None:
    from kombu.transport import redis as transport

    client: Any = getattr(transport, "redis", None)
    if client is None:
        return  # no redis client installed: no Redis broker to ride out
    connparams = getattr(transport.Channel, _CONNPARAMS)
    checked = _refusing_without_client(connparams, client.exceptions.ConnectionError)
    setattr(transport.Channel, _CONNPARAMS, checked)


def _refusing_without_client(
    connparams: Callable[..., dict[str, Any]], error: type[Exception]
) -> Callable[..., dict[str, Any]]:
    """``Channel._connparams``, raising ``error`` once the channel's transport is closed."""

    @functools.wraps(connparams)
    def checked(channel: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if channel.connection is None or channel.connection.client is None:
            raise error("the broker connection of this channel was closed")
        return connparams(channel, *args, **kwargs)

    return checked
