"""What the HTTP API reads and writes: request bodies and the public view of a task.

A task's worker bookkeeping (lease, worker id, the answers given so far) stays
inside the store; everything a caller can act on is here. Durations are seconds;
times are RFC 3339 date-times with an offset.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from queuestore.core.callbacks import CallbackEvents, CallbackRequest, Delivery, DeliveryState
from queuestore.core.models import Artifact, Step, StepKind, StepStatus, Task, TaskError, TaskStatus
from queuestore.core.urls import MAX_URL_LENGTH
from queuestore.core.validation import NAME_PATTERN

NO_NUL_PATTERN: Final = r"^[^\x00]*$"
"""PostgreSQL cannot store the NUL character in a text."""


JSON_DOCUMENT_SCHEMA: Final[dict[str, Any]] = {
    "description": "Any JSON value whose texts and keys hold no NUL character.",
    "anyOf": [
        {"type": "string", "pattern": NO_NUL_PATTERN},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": {"$ref": "#/components/schemas/JsonDocument"}},
        {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL_PATTERN},
            "additionalProperties": {"$ref": "#/components/schemas/JsonDocument"},
        },
    ],
}
"""What the store accepts as a JSON document, as the OpenAPI component ``JsonDocument``."""

JsonDocument = Annotated[
    JsonValue, WithJsonSchema({"allOf": [{"$ref": "#/components/schemas/JsonDocument"}]})
]
"""A JSON value the store can keep (no NUL), stated in the OpenAPI document."""

MAX_SECONDS: Final = 10 * 365 * 86400
"""The longest ``ttl`` or ``delay``: ten years."""

_RFC3339: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)
_CALENDAR_ENDS_PATTERN: Final = r"^(?!0001-01-01|9999-12-31)"


def _rfc3339_text(value: object) -> object:
    # Pydantic would also read a number, or a text of digits, as seconds since 1970, so
    # a caller who meant a delay would get a start at once: only RFC 3339 is taken.
    if not isinstance(value, str) or _RFC3339.fullmatch(value) is None:
        raise ValueError("must be an RFC 3339 date-time with an offset, e.g. 2026-12-07T14:05:00Z")
    return value


def _within_the_calendar(value: datetime) -> datetime:
    # The store keeps a time in UTC, and Python's calendar stops at years 1 and 9999:
    # on the first or the last day, an offset may carry the time past either end.
    if value.date() in (date.min, date.max):
        raise ValueError("must fall between 0001-01-02 and 9999-12-30")
    return value


def _json_integer(value: object) -> object:
    # JSON Schema's integer is a number without a fraction (8.0 is one); pydantic's
    # lax int would also take "8" and true, which the document does not allow.
    if isinstance(value, bool | str):
        raise ValueError("must be an integer")
    return value


StartTime = Annotated[
    AwareDatetime,
    BeforeValidator(_rfc3339_text),
    AfterValidator(_within_the_calendar),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": _CALENDAR_ENDS_PATTERN}),
]
"""When a job may start: an RFC 3339 date-time with an offset, off the calendar's end days."""


def _json_object(description: str) -> Any:
    return Field(
        default_factory=dict,
        description=description,
        json_schema_extra={"propertyNames": {"pattern": NO_NUL_PATTERN}},
    )


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateCallback(_Body):
    """Where to send a task's status changes, and which, as Standard Webhooks calls."""

    url: str = Field(
        min_length=1,
        max_length=MAX_URL_LENGTH,
        description="An absolute http or https URL, ASCII, without credentials, whose host "
        "resolves to public addresses only (or to QUEUESTORE_CALLBACK_ALLOW_NETWORKS); "
        "any other is refused, 422 callback-refused.",
    )
    events: CallbackEvents = Field(
        CallbackEvents.TERMINAL,
        description="terminal (the default): only the change that ends the task; "
        "all: every status change.",
    )

    def request(self) -> CallbackRequest:
        """The callback as :meth:`~queuestore.TaskQueue.submit` takes it."""
        return CallbackRequest(url=self.url, events=self.events)


class CreateTask(_Body):
    """A task to create; its job runs on a worker."""

    name: str = Field(
        min_length=1,
        max_length=200,
        pattern=NAME_PATTERN,
        description="The job to run: no whitespace or control characters.",
    )
    input: dict[str, JsonDocument] = _json_object("The job's keyword arguments.")
    context_id: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        pattern=NO_NUL_PATTERN,
        description="Groups related tasks.",
    )
    ttl: float | None = Field(
        None,
        gt=0,
        le=MAX_SECONDS,
        description="Seconds the task is kept once finished; default: the janitor's TTL.",
    )
    metadata: dict[str, JsonDocument] = _json_object("Kept verbatim with the task.")
    run_at: StartTime | None = Field(
        None,
        description="When the job may start, with an offset (a time past: at once); "
        "not with delay.",
    )
    delay: float | None = Field(
        None,
        ge=0,
        le=MAX_SECONDS,
        description="Seconds from now until the job may start; not with run_at.",
    )
    unique_key: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        pattern=NO_NUL_PATTERN,
        description="While a live task of yours holds this key, that task is returned "
        "instead of a new one.",
    )
    priority: Annotated[int, BeforeValidator(_json_integer)] = Field(
        0,
        ge=0,
        le=9,
        description="0 (the default) to 9, the most urgent: waiting jobs run the most "
        "urgent first.",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "description": "run_at and delay, both given.",
                "required": ["run_at", "delay"],
                "properties": {"run_at": {"type": "string"}, "delay": {"type": "number"}},
            }
        }
    )

    @field_validator("delay")
    @classmethod
    def _not_with_run_at(cls, delay: float | None, info: ValidationInfo) -> float | None:
        # On delay, as the queue's own check, so that the error names the field.
        if delay is not None and info.data.get("run_at") is not None:
            raise ValueError("give run_at or delay, not both")
        return delay

    callback: CreateCallback | None = Field(
        None,
        description="Send the task's status changes to this URL, from its creation on "
        "(GET /tasks/{task_id}/deliveries shows each).",
    )
    start_by: StartTime | None = Field(
        None,
        description="If the job has not started by then, it never runs: the task fails "
        "with DeadlineExpired.",
    )
    deadline: StartTime | None = Field(
        None,
        description="If the task (or a child of it) is still live then, it fails with "
        "DeadlineExceeded.",
    )
    timeout: float | None = Field(
        None,
        ge=0.001,
        le=MAX_SECONDS,
        description="Seconds each run may take, in place of the job's own timeout; a run "
        "past it fails with RunTimedOut.",
    )


class CancelTask(_Body):
    """Why a task is cancelled (optional)."""

    reason: str | None = Field(
        None, max_length=10_000, pattern=NO_NUL_PATTERN, description="Becomes the status message."
    )


class ResumeTask(_Body):
    """The answer to a task waiting in ``input_required``."""

    answer: JsonDocument = Field(description="Handed to the job's request_input call.")


class TaskView(BaseModel):
    """A task as the store last committed it."""

    id: str
    name: str
    input: dict[str, JsonValue]
    owner: str | None
    context_id: str | None
    status: TaskStatus
    status_message: str | None
    progress: float | None = Field(description="From 0 to 1, when the job reports it.")
    result: JsonValue = Field(description="The job's return value, once completed.")
    error: TaskError | None
    artifacts: list[Artifact]
    metadata: dict[str, JsonValue]
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    ttl: float | None = Field(description="Seconds the task is kept once finished.")
    run_at: datetime | None = Field(description="When the job may start; null: at once.")
    unique_key: str | None = Field(description="The key no other live task of yours holds.")
    priority: int = Field(description="0 to 9, the most urgent.")
    errors: list[TaskError] = Field(
        description="The errors of the runs the job's retry policy retried, oldest first."
    )
    attempt: int
    version: int = Field(description="Grows by one on every write.")
    parent_id: str | None = Field(
        None, description="The task whose job spawned this one as a child; null: a root task."
    )
    spawn_key: str | None = Field(None, description="Its key among its parent's children.")
    depth: int = Field(0, description="How many parents it has above it: 0 for a root task.")
    waits_on: list[str] | None = Field(
        None,
        description="While its job waits for child tasks (working, no worker held): their "
        "ids, or [] for every child; null otherwise.",
    )
    start_by: datetime | None = Field(None, description="Not started by then, it never runs.")
    deadline_at: datetime | None = Field(None, description="Still live then, it fails.")
    run_timeout: float | None = Field(
        None, description="Seconds each run may take (null: the job's own timeout)."
    )
    run_deadline_at: datetime | None = Field(
        None, description="When the current (or last) run had to end."
    )

    @classmethod
    def of(cls, task: Task) -> TaskView:
        """The public view of ``task``."""
        return cls(
            id=task.id,
            name=task.name,
            input=task.input,
            owner=task.owner,
            context_id=task.context_id,
            status=task.status,
            status_message=task.status_message,
            progress=task.progress,
            result=task.result,
            error=task.error,
            artifacts=task.artifacts,
            metadata=task.metadata,
            created_at=task.created_at,
            updated_at=task.updated_at,
            started_at=task.started_at,
            finished_at=task.finished_at,
            ttl=None if task.ttl is None else task.ttl.total_seconds(),
            run_at=task.run_at,
            unique_key=task.unique_key,
            priority=task.priority,
            errors=task.errors,
            attempt=task.attempt,
            version=task.version,
            parent_id=task.parent_id,
            spawn_key=task.spawn_key,
            depth=task.depth,
            waits_on=task.waits_on,
            start_by=task.start_by,
            deadline_at=task.deadline_at,
            run_timeout=None if task.run_timeout is None else task.run_timeout.total_seconds(),
            run_deadline_at=task.run_deadline_at,
        )


class StepView(BaseModel):
    """A named step (or durable sleep) of a task's job, as a run recorded it."""

    name: str
    kind: StepKind = Field(description="step, or sleep (its result holds the wake time).")
    status: StepStatus = Field(description="completed (with a result) or failed (an error).")
    result: JsonValue = Field(description="What the step returned; every later run gets it.")
    error: TaskError | None
    attempt: int = Field(description="The task's run that recorded it.")
    tries: int = Field(description="How many runs recorded it: its failures and the last.")
    started_at: datetime
    finished_at: datetime

    @classmethod
    def of(cls, step: Step) -> StepView:
        """The public view of ``step``."""
        return cls.model_validate(step.model_dump())


class StepList(BaseModel):
    """A task's steps, oldest first."""

    steps: list[StepView]


class TaskList(BaseModel):
    """One page of tasks, newest first."""

    tasks: list[TaskView]
    next_cursor: str | None = Field(
        description="Pass as ``cursor`` for the next page; null on the last page."
    )


class JobRunning(BaseModel):
    """The caller's running tasks of one job, and the job's limit."""

    running: int = Field(description="The caller's tasks of this job a worker holds now.")
    limit: int | None = Field(
        description="The most running tasks of this job, every owner's counted "
        "(QUEUESTORE_JOB_CONCURRENCY); null: no limit."
    )


class Running(BaseModel):
    """The caller's running tasks, beside the concurrency limits on them."""

    running: int = Field(description="The caller's tasks a worker holds now.")
    limit: int | None = Field(
        description="The most the caller may run at once (QUEUESTORE_OWNER_CONCURRENCY); "
        "null: no limit. The caller's tasks beyond it wait, submitted."
    )
    jobs: dict[str, JobRunning] = Field(
        description="By job name: the caller's running tasks of it, and the jobs "
        "with a limit of their own."
    )


class DeliveryView(BaseModel):
    """One status change of a task, to be sent, sent, or given up on, to one callback."""

    id: int = Field(description="The delivery's id, for redeliver.")
    event_id: str = Field(
        description="The same on every try (the webhook-id header): receivers de-duplicate by it."
    )
    task_id: str
    callback_id: str = Field(
        description="The callback's id within the task: default for a create's callback."
    )
    url: str = Field(description="Where it is sent.")
    status: TaskStatus = Field(description="The status the change left the task in.")
    version: int = Field(description="The task's version the change left.")
    state: DeliveryState = Field(
        description="pending: still to be sent; delivered; dead: refused for good, or "
        "still failing at its maximum age."
    )
    tries: int = Field(description="The tries made so far.")
    created_at: datetime = Field(description="When the change was committed.")
    next_try_at: datetime | None = Field(
        description="When it is tried next (pending; while a try runs, when it may be "
        "taken again); null once delivered or dead."
    )
    delivered_at: datetime | None
    last_error: str | None = Field(description="Why the last try failed.")
    response_status: int | None = Field(description="The receiver's last HTTP status.")

    @classmethod
    def of(cls, delivery: Delivery) -> DeliveryView:
        """The public view of ``delivery``: all but the task snapshot it carries."""
        return cls.model_validate(delivery.model_dump(exclude={"task"}))


class DeliveryList(BaseModel):
    """A task's deliveries, oldest first."""

    deliveries: list[DeliveryView]


class Health(BaseModel):
    """A health probe's answer."""

    status: str
