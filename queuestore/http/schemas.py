"""What the HTTP API reads and writes: request bodies and the public view of a task.

A task's worker bookkeeping (lease, worker id, the answers given so far) stays
inside the store; everything a caller can act on is here. Durations are seconds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, JsonValue, WithJsonSchema

from queuestore.models import Artifact, Task, TaskError, TaskStatus
from queuestore.validation import NAME_PATTERN

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


def _json_object(description: str) -> Any:
    return Field(
        default_factory=dict,
        description=description,
        json_schema_extra={"propertyNames": {"pattern": NO_NUL_PATTERN}},
    )


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
        le=10 * 365 * 86400,
        description="Seconds the task is kept once finished; default: the janitor's TTL.",
    )
    metadata: dict[str, JsonDocument] = _json_object("Kept verbatim with the task.")


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
    attempt: int
    version: int = Field(description="Grows by one on every write.")

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
            attempt=task.attempt,
            version=task.version,
        )


class TaskList(BaseModel):
    """One page of tasks, newest first."""

    tasks: list[TaskView]
    next_cursor: str | None = Field(
        description="Pass as ``cursor`` for the next page; null on the last page."
    )


class Health(BaseModel):
    """A health probe's answer."""

    status: str
