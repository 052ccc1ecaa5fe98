"""Publishing: a task's Celery message, sent after its row is committed.

:class:`Publisher` (one per Celery app in a process, found with
``Publisher.of(app)``) publishes, hands a freed concurrency slot on and keeps
the publish marks (:mod:`~queuestore.broker.marks`);
:mod:`~queuestore.broker.transports` sets Redis's timeouts and the brokers'
priorities; :mod:`~queuestore.broker.filesystem` is the embedded broker.
It imports :mod:`queuestore.store` and :mod:`queuestore.core`.
"""

from queuestore.broker.publisher import Publisher
from queuestore.broker.transports import priority_config, redis_transport_options

__all__ = ["Publisher", "priority_config", "redis_transport_options"]
