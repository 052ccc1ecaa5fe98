"""The public view of a task, a delivery and a schedule: what every surface shows of them.

The HTTP API answers with these, and ``queuestore tasks ... --json`` prints
them. A task's worker bookkeeping (its lease, worker id, the answers given so
far, its suspends) stays inside the store; everything a caller can act on is
here. Durations are seconds; times are RFC 3339 date-times with an offset.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field, JsonValue

from queuestore.core.callbacks import Delivery, DeliveryState
from queuestore.core.models import Artifact, Task, TaskError, TaskStatus
from queuestore.core.schedules import CatchUp, Schedule


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
    traceparent: str | None = Field(
        None, description="The W3C trace context of its submit, when traces are on."
    )
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
            traceparent=task.traceparent,
            parent_id=task.parent_id,
            spawn_key=task.spawn_key,
            depth=task.depth,
            waits_on=task.waits_on,
            start_by=task.start_by,
            deadline_at=task.deadline_at,
            run_timeout=None if task.run_timeout is None else task.run_timeout.total_seconds(),
            run_deadline_at=task.run_deadline_at,
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


class ScheduleView(BaseModel):
    """A schedule: the job it submits, when it ticks, its next and last run."""

    id: str
    name: str = Field(description="The job each tick submits.")
    input: dict[str, JsonValue]
    owner: str | None = Field(description="The owner of the schedule and of its tasks.")
    cron: str | None = Field(description="A cron expression, read in timezone; or null.")
    every: float | None = Field(description="Seconds between ticks, in place of cron; or null.")
    timezone: str = Field(description="The IANA timezone of cron.")
    catch_up: CatchUp = Field(
        description="Ticks no beat saw in time: skip (dropped when seen more than the "
        "grace late), once (one task for all), each (one each, the latest catch_up_limit)."
    )
    catch_up_limit: int
    paused: bool
    next_run_at: datetime | None = Field(description="The next tick; null while paused.")
    last_run_at: datetime | None = Field(description="The tick (or trigger) of its last task.")
    last_task_id: str | None
    last_status: TaskStatus | None = Field(
        description="The last task's status now; null before its first task or once the "
        "janitor deleted it."
    )
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, schedule: Schedule) -> ScheduleView:
        """The public view of ``schedule``."""
        every = None if schedule.every is None else schedule.every.total_seconds()
        return cls.model_validate(
            schedule.model_dump(exclude={"anchor_at", "version", "every"}) | {"every": every}
        )


__all__ = ["DeliveryView", "ScheduleView", "TaskView"]
