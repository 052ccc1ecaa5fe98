"""queuestore: a durable task store whose tasks run as Celery jobs."""

from queuestore.errors import (
    BrokerUnavailable,
    InvalidCursor,
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    QueueStoreError,
    StoreUnavailable,
    TaskConflict,
    TaskNotFound,
)
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
from queuestore.store import UNSET, InMemoryTaskStore, SqlTaskStore, TaskStore, make_engine

__all__ = [
    "ANY",
    "LIVE",
    "TERMINAL",
    "TRANSITIONS",
    "UNSET",
    "Artifact",
    "BrokerUnavailable",
    "InMemoryTaskStore",
    "InvalidCursor",
    "InvalidTaskData",
    "InvalidTransition",
    "LeaseLost",
    "QueueStoreError",
    "SqlTaskStore",
    "StoreUnavailable",
    "Task",
    "TaskConflict",
    "TaskError",
    "TaskNotFound",
    "TaskPage",
    "TaskStatus",
    "TaskStore",
    "make_engine",
    "new_task_id",
]
