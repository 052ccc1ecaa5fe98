"""queuestore: a durable task store whose tasks run as Celery jobs.

The public names are imported on first use (PEP 562), so that importing a
part of the package, such as the ``queuestore`` command, does not pay for
SQLAlchemy and Celery until it needs them. ``from queuestore import X`` works
as for any module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        ScheduleNotFound,
        StoreUnavailable,
        TaskConflict,
        TaskNotFound,
    )
    from queuestore.core.flow import (
        FlowControl,
        Pause,
        PauseKind,
        RateLimit,
        RateUse,
        RetryAfter,
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
    from queuestore.core.rollup import Rollup
    from queuestore.core.schedules import CatchUp, Schedule
    from queuestore.core.urls import UrlPolicy
    from queuestore.core.workers import Worker
    from queuestore.push.deliverer import Deliverer, DeliveryPolicy
    from queuestore.push.signing import SigningSecret
    from queuestore.run.jobs import InputRequested, Job, JobCancelled, RunTimedOut, TaskContext, job
    from queuestore.run.steps import step
    from queuestore.store import UNSET, InMemoryTaskStore, SqlTaskStore, TaskStore, make_engine
    from queuestore.submit.queue import TaskQueue

_HOMES = {
    "queuestore.config": ["Settings"],
    "queuestore.core.callbacks": [
        "Callback",
        "CallbackEvents",
        "CallbackFormat",
        "CallbackRequest",
        "Delivery",
        "DeliveryState",
    ],
    "queuestore.core.concurrency": ["ConcurrencyLimits"],
    "queuestore.core.flow": [
        "FlowControl",
        "Pause",
        "PauseKind",
        "RateLimit",
        "RateUse",
        "RetryAfter",
    ],
    "queuestore.core.errors": [
        "BrokerUnavailable",
        "CallbackRefused",
        "ChildFailed",
        "InvalidCursor",
        "InvalidTaskData",
        "InvalidTransition",
        "LeaseLost",
        "QueueStoreError",
        "ScheduleNotFound",
        "StoreUnavailable",
        "TaskConflict",
        "TaskNotFound",
    ],
    "queuestore.core.models": [
        "LIVE",
        "TERMINAL",
        "TRANSITIONS",
        "Artifact",
        "Step",
        "StepKind",
        "StepStatus",
        "Task",
        "TaskError",
        "TaskPage",
        "TaskStatus",
        "new_task_id",
    ],
    "queuestore.core.owner": ["ANY"],
    "queuestore.core.retries": ["Retry"],
    "queuestore.core.rollup": ["Rollup"],
    "queuestore.core.schedules": ["CatchUp", "Schedule"],
    "queuestore.core.urls": ["UrlPolicy"],
    "queuestore.core.workers": ["Worker"],
    "queuestore.push.deliverer": ["Deliverer", "DeliveryPolicy"],
    "queuestore.push.signing": ["SigningSecret"],
    "queuestore.run.jobs": [
        "InputRequested",
        "Job",
        "JobCancelled",
        "RunTimedOut",
        "TaskContext",
        "job",
    ],
    "queuestore.run.steps": ["step"],
    "queuestore.store": ["UNSET", "InMemoryTaskStore", "SqlTaskStore", "TaskStore", "make_engine"],
    "queuestore.submit.queue": ["TaskQueue"],
}
"""Where each public name lives: imported from there on first use."""

_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

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
    "CatchUp",
    "ChildFailed",
    "ConcurrencyLimits",
    "Deliverer",
    "Delivery",
    "DeliveryPolicy",
    "DeliveryState",
    "FlowControl",
    "InMemoryTaskStore",
    "InputRequested",
    "InvalidCursor",
    "InvalidTaskData",
    "InvalidTransition",
    "Job",
    "JobCancelled",
    "LeaseLost",
    "Pause",
    "PauseKind",
    "QueueStoreError",
    "RateLimit",
    "RateUse",
    "Retry",
    "RetryAfter",
    "Rollup",
    "RunTimedOut",
    "Schedule",
    "ScheduleNotFound",
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
    "Worker",
    "job",
    "make_engine",
    "new_task_id",
    "step",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module the first time it is asked for."""
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
