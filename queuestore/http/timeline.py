"""A task's timeline: what happened to it, from its row and its deliveries, oldest first.

``GET /tasks/{id}/timeline`` answers with it, and the dashboard's detail
draws it. Each source gives entries from what the store keeps: the task's own
row (its submit, start, runs, errors, input requests and answers, progress and
end) and its callback deliveries. Steps and child tasks, once the store keeps
them, are two more sources (:data:`SOURCES`); nothing else changes.

The store keeps a time for some events only: an entry without one (a retried
run's error, an answer) sits in the order of the task's runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, Field, JsonValue

from queuestore.core.callbacks import Delivery
from queuestore.core.models import TERMINAL, Task, TaskStatus
from queuestore.store.runs import lost_runs

Kind = Literal[
    "submitted",
    "scheduled",
    "started",
    "retried",
    "lost",
    "suspended",
    "input",
    "answered",
    "progress",
    "ended",
    "delivery",
]


class TimelineEntry(BaseModel):
    """One event of a task's life."""

    kind: Kind
    at: datetime | None = Field(description="When it happened; null where the store keeps no time.")
    attempt: int | None = Field(None, description="The run it belongs to, where known.")
    title: str
    detail: JsonValue = Field(None, description="What there is to read: a message, an error...")
    status: str | None = Field(None, description="A status the event set or carried.")


class Timeline(BaseModel):
    """A task's timeline, oldest first."""

    task_id: str
    entries: list[TimelineEntry]


Source = Callable[[Task, Sequence[Delivery]], list[TimelineEntry]]
"""What gives a timeline some of its entries."""


def _row(task: Task, _: Sequence[Delivery]) -> list[TimelineEntry]:
    """The entries of the task's row, in the order of its life."""
    entries = [
        TimelineEntry(
            kind="submitted",
            at=task.created_at,
            title=f"submitted {task.name}" + (f" by {task.owner}" if task.owner else ""),
            status=TaskStatus.SUBMITTED.value,
        )
    ]
    if task.run_at is not None and task.attempt == 0:
        entries.append(TimelineEntry(kind="scheduled", at=task.run_at, title="scheduled to start"))
    if task.started_at is not None:
        entries.append(TimelineEntry(kind="started", at=task.started_at, attempt=1, title="run 1"))
    entries += _runs(task)
    entries += _now(task)
    return entries


def _runs(task: Task) -> list[TimelineEntry]:
    """What ended the runs before the last: the errors retried, the answers, the lost runs."""
    entries = [
        TimelineEntry(
            kind="retried",
            at=None,
            attempt=error.attempt,
            title=f"run {error.attempt} failed and was retried: {error.type}",
            detail=error.message,
        )
        for error in task.errors
    ]
    entries += [
        TimelineEntry(kind="answered", at=None, title=f"answer {number}", detail=answer)
        for number, answer in enumerate(task.answers, start=1)
    ]
    if task.suspends:
        entries.append(
            TimelineEntry(kind="suspended", at=None, title=f"{task.suspends} runs ended to wait")
        )
    lost = lost_runs(task) - (1 if task.attempt else 0)
    if lost > 0 or (task.error is not None and task.error.type == "WorkerLost"):
        entries.append(
            TimelineEntry(
                kind="lost",
                at=None,
                title=f"{max(lost, 1)} runs lost with their worker (the reaper ran them again)",
            )
        )
    return entries


def _now(task: Task) -> list[TimelineEntry]:
    """Where the task is now: waiting for input, its progress, or how it ended."""
    attempt = task.attempt or None
    if task.status in (TaskStatus.INPUT_REQUIRED, TaskStatus.AUTH_REQUIRED):
        return [
            TimelineEntry(
                kind="input",
                at=task.updated_at,
                attempt=attempt,
                title="waiting for input",
                detail=task.status_message,
                status=task.status.value,
            )
        ]
    if task.status not in TERMINAL:
        if task.progress is None and task.status_message is None:
            return []
        percent = "" if task.progress is None else f"{round(task.progress * 100)}% "
        return [
            TimelineEntry(
                kind="progress",
                at=task.updated_at,
                attempt=attempt,
                title=f"{percent}{task.status.value}",
                detail=task.status_message,
                status=task.status.value,
            )
        ]
    detail: JsonValue = (
        task.error.model_dump(mode="json") if task.error is not None else task.status_message
    )
    return [
        TimelineEntry(
            kind="ended",
            at=task.finished_at,
            attempt=attempt,
            title=f"{task.status.value}" + (f" after run {attempt}" if attempt else ""),
            detail=detail,
            status=task.status.value,
        )
    ]


def _deliveries(_: Task, deliveries: Sequence[Delivery]) -> list[TimelineEntry]:
    """Each callback delivery: the status it carried, where to, and how it went."""
    return [
        TimelineEntry(
            kind="delivery",
            at=delivery.delivered_at or delivery.created_at,
            title=f"{delivery.status.value} to {delivery.url}: {delivery.state.value}"
            + f", {delivery.tries} tries",
            detail=delivery.last_error,
            status=delivery.status.value,
        )
        for delivery in deliveries
    ]


SOURCES: Final[tuple[Source, ...]] = (_row, _deliveries)
"""Where a timeline's entries come from (steps and child tasks will be two more)."""


def timeline(task: Task, deliveries: Sequence[Delivery]) -> Timeline:
    """``task``'s timeline: every source's entries; the timed ones merged in time order."""
    row, *others = (source(task, deliveries) for source in SOURCES)
    merged = list(row)
    for entries in others:
        for entry in entries:
            _insert_in_time(merged, entry)
    return Timeline(task_id=task.id, entries=merged)


def _insert_in_time(entries: list[TimelineEntry], entry: TimelineEntry) -> None:
    """Put ``entry`` after the last timed entry not later than it (at the end without a time)."""
    if entry.at is None:
        entries.append(entry)
        return
    position = len(entries)
    while position > 0:
        before = entries[position - 1].at
        if before is not None and before <= entry.at:
            break
        position -= 1
    entries.insert(position, entry)
