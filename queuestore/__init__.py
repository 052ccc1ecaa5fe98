"""queuestore: a durable task store whose tasks run as Celery jobs."""

from queuestore.callbacks import (
    Callback,
    CallbackEvents,
    CallbackFormat,
    CallbackRequest,
    Delivery,
    DeliveryState,
)
from queuestore.config import Settings
from queuestore.deliver import Deliverer, DeliveryPolicy
from queuestore.errors import (
    BrokerUnavailable,
    CallbackRefused,
    InvalidCursor,
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    QueueStoreError,
    StoreUnavailable,
    TaskConflict,
    TaskNotFound,
)
from queuestore.limits import ConcurrencyLimits
from queuestore.models import (
    LIVE,
    TERMINAL,
    TRANSITIONS,
    Artifact,
    Task,
    TaskError,
    TaskPage,
    TaskStatus,
    new_task_id,
)
from queuestore.owner import ANY
from queuestore.queue import TaskQueue
from queuestore.retries import Retry
from queuestore.store import UNSET, InMemoryTaskStore, SqlTaskStore, TaskStore, make_engine
from queuestore.webhooks import SigningSecret, UrlPolicy
from queuestore.worker import InputRequested, Job, JobCancelled, TaskContext, job

__all__ = [
    "ANY",
    "LIVE",
    "TERMINAL",
    "TRANSITIONS",
    "UNSET",
    "Artifact",
    "BrokerUnavailable",
    "Callback",
    "CallbackEvents",
    "CallbackFormat",
    "CallbackRefused",
    "CallbackRequest",
    "ConcurrencyLimits",
    "Deliverer",
    "Delivery",
    "DeliveryPolicy",
    "DeliveryState",
    "InMemoryTaskStore",
    "InputRequested",
    "InvalidCursor",
    "InvalidTaskData",
    "InvalidTransition",
    "Job",
    "JobCancelled",
    "LeaseLost",
    "QueueStoreError",
    "Retry",
    "Settings",
    "SigningSecret",
    "SqlTaskStore",
    "StoreUnavailable",
    "Task",
    "TaskConflict",
    "TaskContext",
    "TaskError",
    "TaskNotFound",
    "TaskPage",
    "TaskQueue",
    "TaskStatus",
    "TaskStore",
    "UrlPolicy",
    "job",
    "make_engine",
    "new_task_id",
]
