"""What the HTTP API reads and writes: request bodies and the public view of a task.

A task's worker bookkeeping (lease, worker id, the answers given so far) stays
inside the store; everything a caller can act on is here. Durations are seconds.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from queuestore.models import Artifact, Task, TaskError, TaskStatus


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateTask(_Body):
    """A task to create; its job runs on a worker."""

    name: str = Field(min_length=1, max_length=200, description="The job to run.")
    input: dict[str, JsonValue] = Field(
        default_factory=dict, description="The job's keyword arguments."
    )
    context_id: str | None = Field(
        None, min_length=1, max_length=256, description="Groups related tasks."
    )
    ttl: float | None = Field(
        None,
        gt=0,
        le=10 * 365 * 86400,
        description="Seconds the task is kept once finished; default: the janitor's TTL.",
    )
    metadata: dict[str, JsonValue] = Field(
        default_factory=dict, description="Kept verbatim with the task."
    )


class CancelTask(_Body):
    """Why a task is cancelled (optional)."""

    reason: str | None = Field(None, max_length=10_000, description="Becomes the status message.")


class ResumeTask(_Body):
    """The answer to a task waiting in ``input_required``."""

    answer: JsonValue = Field(description="Handed to the job's request_input call.")


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
