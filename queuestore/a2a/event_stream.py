"""A2A events from queuestore rows, and the cluster ``TaskEventStream`` that carries them.

A task's event log is the sequence of its committed versions: each version a
worker, a replica or a restarted server commits is read from the store's change
feed (:meth:`queuestore.TaskStore.watch`: woken by LISTEN/NOTIFY on PostgreSQL,
polling on SQLite) and turned into the A2A events that lead from the previous
version to it. Nothing is published by hand, so nothing is lost between a
commit and a publish, and a process that restarted serves the same events.
A subscriber that falls behind gets the latest version (the feed coalesces),
never an older one after a newer.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Final

from a2a.server.cluster.event_stream import TaskEventStream, VersionedEvent
from a2a.server.cluster.version import TaskVersion
from a2a.types import TaskArtifactUpdateEvent, TaskStatusUpdateEvent

from queuestore import TaskStore
from queuestore.a2a import convert
from queuestore.aio import AsyncTaskStore
from queuestore.core.errors import InvalidTaskData, TaskNotFound
from queuestore.core.models import Task, TaskStatus

ENDS_A_STREAM: Final = frozenset(
    {
        TaskStatus.COMPLETED,
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
        TaskStatus.REJECTED,
        TaskStatus.INPUT_REQUIRED,
        TaskStatus.AUTH_REQUIRED,
    }
)
"""Statuses after which A2A's streams stop: terminal and interrupted."""

TaskEvent = TaskStatusUpdateEvent | TaskArtifactUpdateEvent

REREAD_INTERVAL: Final = 5.0
"""Seconds after which a quiet subscription reads its task again (it may be deleted)."""


def events_between(previous: Task | None, current: Task) -> list[TaskEvent]:
    """The A2A events that take a reader from ``previous`` to ``current``.

    First every artifact that is new or changed (each whole, ``append=False``),
    then the status when it, its message or the progress changed. With no
    ``previous`` every artifact and the status are sent.
    """
    context_id = current.context_id or ""
    before = (
        {}
        if previous is None
        else {artifact.artifact_id: artifact for artifact in convert.artifacts_of(previous)}
    )
    events: list[TaskEvent] = [
        TaskArtifactUpdateEvent(
            task_id=current.id, context_id=context_id, artifact=artifact, append=False
        )
        for artifact in convert.artifacts_of(current)
        if before.get(artifact.artifact_id) != artifact
    ]
    if (
        previous is None
        or previous.status is not current.status
        or convert.status_text(previous) != convert.status_text(current)
        or previous.progress != current.progress
    ):
        events.append(
            TaskStatusUpdateEvent(
                task_id=current.id, context_id=context_id, status=convert.status_of_task(current)
            )
        )
    return events


class QueuestoreEventStream(TaskEventStream):
    """a2a-sdk's ``TaskEventStream`` on a queuestore store's change feed.

    Give it to ``DefaultRequestHandler(event_stream=...)`` beside a
    :class:`~queuestore.a2a.VersionedQueuestoreTaskStore` on the same store:
    ``SubscribeToTask`` then follows a task that runs on a worker, another
    replica or a server that restarted.

    Args:
        store: the store whose rows are the tasks.
    """

    def __init__(self, store: TaskStore) -> None:
        self.store = AsyncTaskStore(store)

    async def publish(self, task_id: str, event: VersionedEvent) -> None:
        """Nothing to do: every committed version reaches subscribers from the store."""

    async def subscribe(
        self, task_id: str, *, after: TaskVersion
    ) -> AsyncGenerator[VersionedEvent, None]:
        """The events of every version of ``task_id`` newer than ``after``.

        The caller has checked that the task is its caller's (the request
        handler reads it owner-scoped first). The stream ends after a terminal
        or interrupted status, or once the task is found deleted.
        """
        seen = after
        previous: Task | None = None
        async with self.store.watch(task_ids=[task_id]) as changes:
            try:
                current: Task | None = await self.store.get(task_id)
            except (TaskNotFound, InvalidTaskData):
                return
            while True:
                version = None if current is None else TaskVersion(current.version)
                if current is not None and version is not None and version.is_after(seen):
                    for event in events_between(previous, current):
                        yield VersionedEvent(event=event, version=version)
                    previous, seen = current, version
                    if current.status in ENDS_A_STREAM:
                        return
                current = await changes.get(timeout=REREAD_INTERVAL)
                if current is None:  # quiet for a while: is the task still there?
                    try:
                        current = await self.store.get(task_id)
                    except TaskNotFound:
                        return  # deleted: nothing more will come

    async def destroy(self, task_id: str) -> None:
        """Nothing to release: a subscription holds nothing once it ends."""


__all__ = [
    "ENDS_A_STREAM",
    "REREAD_INTERVAL",
    "QueuestoreEventStream",
    "TaskEvent",
    "events_between",
]
