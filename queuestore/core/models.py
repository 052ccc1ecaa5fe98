"""The task model: statuses, the one transition table, and the pydantic records."""

from __future__ import annotations

import base64
import re
import secrets
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cache
from typing import Annotated, Final

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, field_validator


class TaskStatus(StrEnum):
    """Where a task is in its life. Terminal statuses are sticky."""

    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    AUTH_REQUIRED = "auth_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"

    @property
    def is_terminal(self) -> bool:
        """Whether no further transition is possible."""
        return self in TERMINAL


TERMINAL: Final = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.REJECTED}
)
"""Statuses a task never leaves; the janitor may delete tasks in them."""

LIVE: Final = frozenset(TaskStatus) - TERMINAL
"""Statuses of tasks that are still in progress; the janitor never touches them."""

PARKED: Final = frozenset({TaskStatus.INPUT_REQUIRED, TaskStatus.AUTH_REQUIRED})
"""Statuses of tasks waiting for their caller (an answer, an authorization): no run holds them."""

TRANSITIONS: Final[dict[TaskStatus, frozenset[TaskStatus]]] = {
    TaskStatus.SUBMITTED: frozenset(
        {TaskStatus.WORKING, TaskStatus.CANCELLED, TaskStatus.REJECTED, TaskStatus.FAILED}
    ),
    TaskStatus.WORKING: frozenset(
        {
            TaskStatus.INPUT_REQUIRED,
            TaskStatus.AUTH_REQUIRED,
            TaskStatus.COMPLETED,
            TaskStatus.FAILED,
            TaskStatus.CANCELLED,
        }
    ),
    TaskStatus.INPUT_REQUIRED: frozenset(
        {TaskStatus.WORKING, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}
    ),
    TaskStatus.AUTH_REQUIRED: frozenset(
        {TaskStatus.WORKING, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}
    ),
    **{status: frozenset() for status in TERMINAL},
}
"""The only table of allowed status changes; every store checks writes against it."""


@cache
def sources_of(target: TaskStatus) -> frozenset[TaskStatus]:
    """Statuses from which a write may set ``target``.

    A live task may be rewritten in its own status (a progress write keeps
    ``working``); a terminal one may not.
    """
    sources = {status for status, targets in TRANSITIONS.items() if target in targets}
    if target not in TERMINAL:
        sources.add(target)
    return frozenset(sources)


TASK_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def new_task_id() -> str:
    """A fresh task id: url-safe base64 of 16 random bytes, without padding."""
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode("ascii")


JsonObject = dict[str, JsonValue]

SUMMARY_LENGTH: Final = 200
"""The longest :attr:`TaskError.summary`, in characters."""


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TaskError(Record):
    """Why a task failed: the exception type (or an error code) and its message."""

    type: Annotated[str, Field(min_length=1, max_length=200)]
    message: str = ""
    attempt: int | None = None
    """The run that raised it (``Task.attempt`` then): set for an error a run reported
    (kept in ``Task.errors`` by a retry, or the task's ``error``) and the reaper's."""

    @property
    def summary(self) -> str:
        """One line: the type, then the message's first line (``type: first line``).

        A finished task's ``status_message`` when an error ended it.
        """
        lines = self.message.strip().splitlines()
        text = f"{self.type}: {lines[0].strip()}" if lines else self.type
        return text if len(text) <= SUMMARY_LENGTH else text[: SUMMARY_LENGTH - 1] + "\u2026"


class Artifact(Record):
    """An output of a task; ``parts`` may be streamed in by appending chunks."""

    artifact_id: Annotated[str, Field(min_length=1, max_length=200)]
    name: str | None = None
    media_type: str | None = None
    parts: list[JsonValue] = Field(default_factory=list)
    metadata: JsonObject = Field(default_factory=dict)


class Task(Record):
    """A snapshot of one task, as the store last committed it."""

    id: str
    name: str
    input: JsonObject = Field(default_factory=dict)
    owner: str | None = None
    context_id: str | None = None
    status: TaskStatus = TaskStatus.SUBMITTED
    status_message: str | None = None
    progress: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    result: JsonValue = None
    error: TaskError | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
    metadata: JsonObject = Field(default_factory=dict)
    created_at: AwareDatetime
    updated_at: AwareDatetime
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    ttl: timedelta | None = None
    attempt: int = 0
    version: int = 1
    answers: list[JsonValue] = Field(default_factory=list)
    """Answers given through ``resume``, in order, for ``request_input``."""
    worker_id: str | None = None
    lease_expires_at: AwareDatetime | None = None
    run_at: AwareDatetime | None = None
    """When the task's job may start (``submit(run_at=...)`` or ``delay=``, or a
    retry's backoff); None: at once."""
    unique_key: str | None = None
    """The key no other live task of its owner holds (``submit(unique_key=...)``)."""
    priority: Annotated[int, Field(ge=0, le=9)] = 0
    """From 0 (the default) to 9, the most urgent: its job runs before lower ones waiting."""
    errors: list[TaskError] = Field(default_factory=list)
    """The errors of the runs its job's retry policy retried, oldest first; the
    error that ended the task, if one did, is ``error``."""
    suspends: int = 0
    """How many of its runs ended to wait for a time (``TaskStore.suspend``)."""
    traceparent: str | None = None
    """The W3C trace context of the submit that created it, which its runs continue."""

    @field_validator(
        "created_at", "updated_at", "started_at", "finished_at", "lease_expires_at", "run_at"
    )
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    @property
    def is_terminal(self) -> bool:
        """Whether the task has reached a status it never leaves."""
        return self.status in TERMINAL


class TaskPage(Record):
    """One page of a listing; ``next_cursor`` is None on the last page."""

    tasks: list[Task]
    next_cursor: str | None = None


PageOfTasks = list[Task]
"""A page of tasks as a listing reads it: the JSON array the page statement builds
(``queries.page_tasks_json``), parsed whole. The deepest a read parses a document."""


__all__ = [
    "LIVE",
    "TERMINAL",
    "TRANSITIONS",
    "Artifact",
    "JsonObject",
    "Task",
    "TaskError",
    "TaskPage",
    "TaskStatus",
    "new_task_id",
    "sources_of",
]
