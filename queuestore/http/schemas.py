"""What the HTTP API reads and writes: request bodies, and the public views of tasks.

The view of one task and of one delivery (``TaskView``, ``DeliveryView``) is
the one every surface shows, in :mod:`queuestore.core.views`; the pages and
answers built from them are here. Durations are seconds; times are RFC 3339
date-times with an offset.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
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

from queuestore import Job
from queuestore.core.callbacks import CallbackEvents, CallbackRequest
from queuestore.core.models import Step, StepKind, StepStatus, TaskError
from queuestore.core.urls import MAX_URL_LENGTH
from queuestore.core.validation import NAME_PATTERN
from queuestore.core.views import DeliveryView, TaskView

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


Instant = Annotated[
    AwareDatetime,
    BeforeValidator(_rfc3339_text),
    AfterValidator(_within_the_calendar),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": _CALENDAR_ENDS_PATTERN}),
]
"""An instant (``run_at``, ``updated_after``): an RFC 3339 date-time with an offset, off
the calendar's end days; never a number of seconds."""


def _json_object(description: str) -> Any:
    return Field(
        default_factory=dict,
        description=description,
        json_schema_extra={"propertyNames": {"pattern": NO_NUL_PATTERN}},
    )


_JSON_DOCUMENT_REF: Final = {"$ref": "#/components/schemas/JsonDocument"}
_NOTHING_FITS: Final[dict[str, Any]] = {"not": {}}

_Parameter = inspect.Parameter
_TAKES_THE_CONTEXT: Final = (
    _Parameter.POSITIONAL_ONLY,
    _Parameter.POSITIONAL_OR_KEYWORD,
    _Parameter.VAR_POSITIONAL,
)
_BY_KEYWORD: Final = (_Parameter.POSITIONAL_OR_KEYWORD, _Parameter.KEYWORD_ONLY)

_CREATE_BODIES: Final = ("CreateTask", "CreateTaskItem")
"""The components whose ``name`` and ``input`` :func:`state_jobs` states."""


def state_jobs(schemas: dict[str, Any], jobs: Mapping[str, Job]) -> None:
    """State the server's ``jobs`` in the create bodies' ``schemas`` (OpenAPI components).

    ``name`` becomes an ``enum`` of the jobs, and one ``oneOf`` branch a job
    says the ``input`` its function takes (:func:`job_input_schema`), so that
    the document refuses what the server refuses. Nothing changes without jobs:
    a server that does not know the workers' jobs takes any name.
    """
    if not jobs:
        return
    branches = []
    for name, job in sorted(jobs.items()):
        takes, definitions = job_input_schema(job)
        for model, definition in definitions.items():
            schemas.setdefault(model, definition)
        needed = ["name", "input"] if "required" in takes or "not" in takes else ["name"]
        branches.append(
            {"properties": {"name": {"const": name}, "input": takes}, "required": needed}
        )
    for component in _CREATE_BODIES:
        schemas[component]["properties"]["name"]["enum"] = sorted(jobs)
        schemas[component]["oneOf"] = branches


def job_input_schema(job: Job) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON Schema of the input ``job`` takes, and the components its ``$ref``s name.

    The rule is the worker's (:class:`~queuestore.run.inputs.JobInput`): the keyword
    parameters after the context, each with its annotation's schema (any JSON value
    without one), those without a default required, no other key unless the function
    takes ``**kwargs``. A function that cannot take the context and its input by
    keyword takes nothing.
    """
    parameters = list(inspect.signature(job.function).parameters.values())
    if not parameters or parameters[0].kind not in _TAKES_THE_CONTEXT:
        return dict(_NOTHING_FITS), {}
    if parameters[0].kind is not _Parameter.VAR_POSITIONAL:
        parameters = parameters[1:]
    if any(p.kind is _Parameter.POSITIONAL_ONLY and p.default is p.empty for p in parameters):
        return dict(_NOTHING_FITS), {}  # a positional-only parameter cannot be given by keyword
    return job.input.json_schema("#/components/schemas/{model}")


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
    run_at: Instant | None = Field(
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
    start_by: Instant | None = Field(
        None,
        description="If the job has not started by then, it never runs: the task fails "
        "with DeadlineExpired.",
    )
    deadline: Instant | None = Field(
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
    total: int | None = Field(
        None,
        description="How many tasks the filters match, on every page, when asked with "
        "``total=true``; null otherwise.",
    )


class Whoami(BaseModel):
    """Who the server takes the caller for."""

    principal: str | None = Field(
        description="The caller's principal, the owner of the tasks it creates and sees; "
        "null for an anonymous caller."
    )
    admin: bool = Field(
        False,
        description="Whether the caller operates the server (http_admins): it sees and acts "
        "on every owner's tasks and reads the operator's views.",
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


class DeliveryList(BaseModel):
    """A task's deliveries, oldest first."""

    deliveries: list[DeliveryView]


class Health(BaseModel):
    """A health probe's answer."""

    status: str
