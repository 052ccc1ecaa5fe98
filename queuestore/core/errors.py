"""The exceptions queuestore raises: one root, one child per kind of failure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from queuestore.core.models import Task


class QueueStoreError(Exception):
    """Root of every error queuestore raises on purpose."""

    task_id: str | None = None

    def __init__(self, message: str, *, task_id: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id


class TaskNotFound(QueueStoreError):
    """No task with that id is visible to the caller.

    Raised both for ids that do not exist and for tasks owned by someone else,
    so that existence never leaks across owners.
    """

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id!r} not found", task_id=task_id)


class ScheduleNotFound(QueueStoreError):
    """No schedule with that id is visible to the caller (missing, or another owner's)."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"schedule {schedule_id!r} not found")
        self.schedule_id = schedule_id


class InvalidTransition(QueueStoreError):
    """The task's current status does not allow the requested change."""

    def __init__(
        self,
        task_id: str,
        current: str,
        requested: str | None,
        allowed_from: Iterable[str] = (),
    ) -> None:
        self.current = str(current)
        self.requested = None if requested is None else str(requested)
        self.allowed_from = tuple(sorted(str(status) for status in allowed_from))
        target = f"moving to {self.requested!r}" if self.requested else "a write"
        expected = ", ".join(self.allowed_from) or "none"
        super().__init__(
            f"task {task_id!r} is {self.current!r}: {target} needs one of [{expected}]",
            task_id=task_id,
        )


class TaskConflict(QueueStoreError):
    """A concurrent writer won: the version or owner of the lease moved on."""

    def __init__(
        self,
        message: str,
        *,
        task_id: str | None = None,
        expected_version: int | None = None,
        actual_version: int | None = None,
    ) -> None:
        super().__init__(message, task_id=task_id)
        self.expected_version = expected_version
        self.actual_version = actual_version


class LeaseLost(TaskConflict):
    """A worker wrote to a task whose lease now belongs to another worker (or none)."""


class InvalidCursor(QueueStoreError):
    """A pagination cursor that is malformed, tampered with, or from other filters."""


class InvalidTaskData(QueueStoreError, ValueError):
    """Input that the store refuses before writing anything.

    Attributes:
        field: the name of the offending field, when there is one.
    """

    def __init__(self, message: str, *, field: str | None = None, task_id: str | None = None):
        super().__init__(f"{field}: {message}" if field else message, task_id=task_id)
        self.field = field


class CallbackRefused(InvalidTaskData):
    """A callback URL queuestore will not call: its scheme, its form, or where it resolves to.

    Raised when a callback is registered, before anything is written. ``field`` is
    ``"callback.url"``.

    Attributes:
        url: the refused URL, as given.
        reason: a short phrase such as ``"resolves to a private address 10.0.0.5"``.
    """

    def __init__(self, url: str, reason: str, *, field: str = "callback.url") -> None:
        super().__init__(f"callback URL {url!r} refused: {reason}", field=field)
        self.url = url
        self.reason = reason


class ChildFailed(QueueStoreError):
    """A child task a job waited for did not complete (``TaskContext.wait_results``).

    Attributes:
        child: the child task as it ended: failed, cancelled or rejected.
    """

    def __init__(self, child: Task) -> None:
        reason = f": {child.error.type}: {child.error.message}" if child.error else ""
        super().__init__(f"child task {child.id!r} ended {child.status}{reason}", task_id=child.id)
        self.child = child


class StoreUnavailable(QueueStoreError):
    """The storage backend cannot be reached; the original exception is chained."""


class BrokerUnavailable(QueueStoreError):
    """The message broker cannot be reached; the original exception is chained."""


__all__ = [
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
]
