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
    """How many of its runs ended to wait for a time or for child tasks (``TaskStore.suspend``)."""
    traceparent: str | None = None
    """The W3C trace context of the submit that created it, which its runs continue."""
    parent_id: str | None = None
    """The task whose run started this one (``TaskContext.spawn``); None for a root task."""
    spawn_key: str | None = None
    """The key that makes it one child of its parent: a second spawn with it returns this task."""
    depth: int = 0
    """How many parents it has above it: 0 for a root task."""
    waits_on: list[str] | None = None
    """While its run waits for child tasks (``TaskContext.wait``): their ids, or ``[]`` for
    every child. The task is ``working`` with no run and no message meanwhile."""
    start_by: AwareDatetime | None = None
    """Not started by then, it never runs: it fails with ``DeadlineExpired``."""
    deadline_at: AwareDatetime | None = None
    """Still live then, in any phase, it fails with ``DeadlineExceeded``."""
    run_timeout: timedelta | None = None
    """How long each run may take (``submit(timeout=...)``); None: its job's ``timeout``."""
    run_deadline_at: AwareDatetime | None = None
    """When its current (or last) run had to end, set by the claim: a run past it fails
    ``RunTimedOut``; None when it had no timeout and no deadline."""

    @field_validator(
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
        "lease_expires_at",
        "run_at",
        "start_by",
        "deadline_at",
        "run_deadline_at",
    )
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    @property
    def is_terminal(self) -> bool:
        """Whether the task has reached a status it never leaves."""
        return self.status in TERMINAL


class StepKind(StrEnum):
    """What a step records: a unit of work's result, or a durable sleep's wake time."""

    STEP = "step"
    SLEEP = "sleep"


class StepStatus(StrEnum):
    """How a step's last run ended."""

    COMPLETED = "completed"
    FAILED = "failed"


class Step(Record):
    """A named step of a task's job, as the store recorded it (``TaskContext.step``).

    A completed step's ``result`` is returned to every later run of the task
    instead of running the step again; a failed one keeps its ``error`` and
    runs again on the next run.
    """

    name: str
    kind: StepKind = StepKind.STEP
    status: StepStatus
    result: JsonValue = None
    error: TaskError | None = None
    attempt: int
    """The task's run (``Task.attempt``) that recorded it."""
    tries: int = 1
    """How many runs recorded it: its failures and its last outcome."""
    started_at: AwareDatetime
    finished_at: AwareDatetime

    @field_validator("started_at", "finished_at")
    @classmethod
    def _in_utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)


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
    "Step",
    "StepKind",
    "StepStatus",
    "Task",
    "TaskError",
    "TaskPage",
    "TaskStatus",
    "new_task_id",
    "sources_of",
]
