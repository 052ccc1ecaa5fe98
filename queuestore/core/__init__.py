"""The leaf every side builds on: the task model and the rules no one side owns.

It imports nothing else of queuestore. The task and its statuses
(:mod:`~queuestore.core.models`), the errors, owner scoping, the pagination
cursor, input validation, the options of a queue, concurrency limits and
retry policies, the change feed (:mod:`~queuestore.core.watch`), log fields,
the callback records and the callback URL policy, and the public view of a
task and of a delivery that every surface shows (:mod:`~queuestore.core.views`).
"""

from queuestore.core.callbacks import Callback, CallbackRequest, Delivery
from queuestore.core.concurrency import ConcurrencyLimits
from queuestore.core.errors import QueueStoreError
from queuestore.core.models import LIVE, PARKED, TERMINAL, TRANSITIONS, Artifact, Task, TaskStatus
from queuestore.core.options import QueueOptions
from queuestore.core.owner import ANY, Owner, OwnerScope
from queuestore.core.retries import Retry
from queuestore.core.urls import UrlPolicy

__all__ = [
    "ANY",
    "LIVE",
    "PARKED",
    "TERMINAL",
    "TRANSITIONS",
    "Artifact",
    "Callback",
    "CallbackRequest",
    "ConcurrencyLimits",
    "Delivery",
    "Owner",
    "OwnerScope",
    "QueueOptions",
    "QueueStoreError",
    "Retry",
    "Task",
    "TaskStatus",
    "UrlPolicy",
]
