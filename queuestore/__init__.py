"""queuestore: a durable task store whose tasks run as Celery jobs."""

from queuestore.config import Settings
from queuestore.core.callbacks import (
    Callback,
    CallbackEvents,
    CallbackFormat,
    CallbackRequest,
    Delivery,
    DeliveryState,
)
from queuestore.core.concurrency import ConcurrencyLimits
from queuestore.core.errors import (
    BrokerUnavailable,
    CallbackRefused,
    ChildFailed,
    InvalidCursor,
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    QueueStoreError,
    StoreUnavailable,
    TaskConflict,
    TaskNotFound,
)
from queuestore.core.models import (
    LIVE,
    TERMINAL,
    TRANSITIONS,
    Artifact,
    Step,
    StepKind,
    StepStatus,
    Task,
    TaskError,
    TaskPage,
    TaskStatus,
    new_task_id,
)
from queuestore.core.owner import ANY
from queuestore.core.retries import Retry
from queuestore.core.urls import UrlPolicy
from queuestore.push.deliverer import Deliverer, DeliveryPolicy
from queuestore.push.signing import SigningSecret
from queuestore.run.jobs import InputRequested, Job, JobCancelled, RunTimedOut, TaskContext, job
from queuestore.run.steps import step
from queuestore.store import UNSET, InMemoryTaskStore, SqlTaskStore, TaskStore, make_engine
from queuestore.submit.queue import TaskQueue

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
    "ChildFailed",
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
    "RunTimedOut",
    "Settings",
    "SigningSecret",
    "SqlTaskStore",
    "Step",
    "StepKind",
    "StepStatus",
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
    "step",
]
