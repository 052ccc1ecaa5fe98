"""A2A's task stores on queuestore rows: terminal states stay terminal, owners stay apart.

:class:`VersionedQueuestoreTaskStore` is a2a-sdk's ``VersionedTaskStore`` (the
cluster interface, compare-and-set on the row's ``version``);
:class:`QueuestoreTaskStore` is its plain ``TaskStore``. Both keep the SDK's
tasks as queuestore rows, so the same task is a row the store's rules guard,
a Celery job's record, and an A2A task:

- The owner comes from the call context (see :mod:`queuestore.a2a.owner`) and
  is the store's owner filter, applied inside every query before the page limit.
  A save never moves a task between owners: an id another owner holds is refused.
- A write after a terminal state (COMPLETED, CANCELED, FAILED, REJECTED) is
  refused, logged, and never applied; the SDK sees
  ``ConcurrentTaskModificationError`` and reloads the terminal task.
- A CANCELED write is the store's ``cancel``: it changes the status only (the
  stored artifacts and history stay) and, for a task that is a job, revokes
  the job, whichever process or replica the CANCELED comes from.
- A task whose work runs as a job (created by
  :class:`~queuestore.a2a.executor.QueuestoreAgentExecutor`) is written by its
  worker: the SDK's saves add history and metadata, and end the task
  (CANCELED, FAILED, REJECTED), but never rewrite its status or artifacts from
  their older copy.
- Events are applied as what they change (a status, one artifact), never as a
  whole-task overwrite from a stale copy.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from a2a.server.cluster.task_store import (
    ConcurrentTaskModificationError,
    StoredTask,
    VersionedTaskStore,
)
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.tasks.task_store import TaskStore as A2ATaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, TaskArtifactUpdateEvent, TaskState
from a2a.types import Task as A2ATask
from a2a.utils.errors import InvalidParamsError

from queuestore.a2a import convert
from queuestore.a2a.listing import list_page
from queuestore.a2a.owner import OwnerResolver, resolve_owner
from queuestore.errors import InvalidTaskData, InvalidTransition, TaskConflict, TaskNotFound
from queuestore.models import TERMINAL, TRANSITIONS, Task, TaskStatus
from queuestore.queue import TaskQueue
from queuestore.store.base import TaskStore

log = logging.getLogger(__name__)

SDK_TASK: Final = "a2a.task"
"""The name of rows the SDK writes itself (an agent that runs in the server process)."""


@dataclass(frozen=True, slots=True)
class JobRequest:
    """The job a new task runs: submitted when the SDK first saves the task."""

    name: str
    input: Mapping[str, Any]


class VersionedQueuestoreTaskStore(VersionedTaskStore):
    """a2a-sdk's ``VersionedTaskStore`` on a queuestore store.

    Args:
        backend: a :class:`~queuestore.TaskQueue` (tasks may be jobs; a
            CANCELED revokes them) or a bare :class:`~queuestore.TaskStore`.
        owner_resolver: the owner of a call; by default the user's name,
            inside the tenant (:func:`~queuestore.a2a.owner.resolve_owner`).
    """

    def __init__(
        self,
        backend: TaskQueue | TaskStore,
        *,
        owner_resolver: OwnerResolver = resolve_owner,
    ) -> None:
        self.queue = backend if isinstance(backend, TaskQueue) else None
        self.store = backend.store if isinstance(backend, TaskQueue) else backend
        self.owner_resolver = owner_resolver
        self._requests: dict[str, JobRequest] = {}
        self._requests_lock = threading.Lock()

    @property
    def as_task_store(self) -> QueuestoreTaskStore:
        """The plain ``TaskStore`` on the same rows and rules."""
        return QueuestoreTaskStore(self)

    def request_job(self, task_id: str, request: JobRequest) -> None:
        """Make the first save of ``task_id`` submit ``request`` instead of a bare row.

        The executor calls it before it emits the task, so the row is created
        once, as the job, by the save the SDK makes anyway.
        """
        with self._requests_lock:
            self._requests[task_id] = request

    def forget_job_request(self, task_id: str) -> None:
        """Drop a request that no save took (the task existed, or the save failed)."""
        with self._requests_lock:
            self._requests.pop(task_id, None)

    # -- the SDK's verbs ----------------------------------------------------

    async def save(
        self,
        task: A2ATask,
        *,
        event: Event | None,
        prev: A2ATask | None,
        prev_version: TaskVersion,
        context: ServerCallContext,
    ) -> TaskVersion:
        """Apply what ``event`` changes (the whole task when it is None or a Task).

        Raises:
            ConcurrentTaskModificationError: the stored version is not
                ``prev_version``, the task is terminal, or the id is another owner's.
            InvalidParamsError: a state queuestore cannot hold, or invalid content.
        """
        owner = self.owner_resolver(context)
        # MISSING is the SDK's first write: the task manager found no task to read.
        first = prev_version.is_missing and isinstance(event, A2ATask)
        version = await asyncio.to_thread(
            self._save, task, event, prev_version, owner, first_write=first
        )
        return TaskVersion(version)

    async def get(self, task_id: str, context: ServerCallContext) -> StoredTask | None:
        """The task and its version if ``context``'s owner may see it."""
        row = await asyncio.to_thread(self._get, task_id, self.owner_resolver(context))
        if row is None:
            return None
        return StoredTask(convert.to_a2a(row), TaskVersion(row.version))

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """One page of the caller's tasks, newest first, with every filter of ``params``.

        Raises:
            InvalidParamsError: a bad page size, page token or filter.
        """
        owner = self.owner_resolver(context)
        return await asyncio.to_thread(list_page, self.store, params, owner)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete the task if ``context``'s owner may see it; nothing otherwise."""
        owner = self.owner_resolver(context)
        try:
            await asyncio.to_thread(self.store.delete, task_id, owner=owner)
        except InvalidTaskData:
            return

    # -- implementation (runs in a worker thread) --------------------------

    def _get(self, task_id: str, owner: str | None) -> Task | None:
        try:
            return self.store.get(task_id, owner=owner)
        except (TaskNotFound, InvalidTaskData):
            return None

    def _save(
        self,
        task: A2ATask,
        event: Event | None,
        prev_version: TaskVersion,
        owner: str | None,
        *,
        first_write: bool = False,
    ) -> int:
        try:
            target = convert.status_of(task.status.state)
        except ValueError as exc:
            raise InvalidParamsError(message=str(exc)) from exc
        try:
            if first_write:
                # The SDK found no task: create it (an id another owner holds is refused).
                return self._create(task, target, owner)
            current = self._get(task.id, owner)
            if current is None:
                if prev_version.is_missing:
                    return self._create(task, target, owner)
                raise ConcurrentTaskModificationError(task.id)  # deleted meanwhile
            return self._apply(current, task, target, event, prev_version, owner)
        except InvalidTaskData as exc:
            raise InvalidParamsError(message=str(exc)) from exc
        except TaskConflict as exc:
            raise ConcurrentTaskModificationError(task.id) from exc

    def _create(self, task: A2ATask, target: TaskStatus, owner: str | None) -> int:
        with self._requests_lock:
            request = self._requests.pop(task.id, None)
        if target is TaskStatus.CANCELLED:
            raise ConcurrentTaskModificationError(task.id)  # nothing to cancel
        metadata = convert.envelope_for(task)
        context_id = task.context_id or None
        try:
            if request is not None and self.queue is not None:
                row = self.queue.submit(
                    request.name,
                    request.input,
                    owner=owner,
                    context_id=context_id,
                    metadata=metadata,
                    task_id=task.id,
                )
                return row.version
            row = self.store.create(
                SDK_TASK, owner=owner, context_id=context_id, metadata=metadata, task_id=task.id
            )
        except TaskConflict:
            log.warning(
                "a2a: refused to save task %s for owner %r: the id belongs to another owner",
                task.id,
                owner,
            )
            raise
        if target is TaskStatus.SUBMITTED and not task.artifacts:
            return row.version
        return self._apply(row, task, target, None, TaskVersion(row.version), owner)

    def _apply(  # noqa: PLR0917 - private, called from two places with the same shape
        self,
        current: Task,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        prev_version: TaskVersion,
        owner: str | None,
    ) -> int:
        cancel = target is TaskStatus.CANCELLED
        job = current.name != SDK_TASK
        if current.is_terminal:
            if target is current.status or (job and target not in TERMINAL):
                # The SDK echoing the end it knows, or a job's earlier version it relays.
                return current.version
            log.warning(
                "a2a: refused a late %s for task %s: it is %s, which is final",
                TaskState.Name(task.status.state),
                task.id,
                current.status,
            )
            raise ConcurrentTaskModificationError(task.id)
        if (
            not job
            and not cancel
            and not prev_version.is_missing
            and prev_version != TaskVersion(current.version)
        ):
            raise ConcurrentTaskModificationError(task.id)
        if cancel:
            return self._cancel(current, task, owner)
        if job:
            return self._save_job_task(current, task, target, event, owner)
        return self._save_sdk_task(current, task, target, event, owner)

    def _cancel(self, current: Task, task: A2ATask, owner: str | None) -> int:
        reason = convert.text_of(task.status.message) if task.status.HasField("message") else None
        try:
            if self.queue is not None and current.name != SDK_TASK:
                row = self.queue.cancel(current.id, owner=owner, reason=reason)
            else:
                row = self.store.cancel(current.id, owner=owner, reason=reason)
        except (InvalidTransition, TaskNotFound) as exc:
            raise ConcurrentTaskModificationError(task.id) from exc
        return row.version

    def _save_job_task(
        self,
        current: Task,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        owner: str | None,
    ) -> int:
        """The SDK's copy of a job's task: its worker writes status and artifacts."""
        values: dict[str, Any] = {}
        if target in (TaskStatus.FAILED, TaskStatus.REJECTED):
            values["status"] = target
            message = task.status.message if task.status.HasField("message") else None
            text = None if message is None else convert.text_of(message)
            values["error"] = {"type": "agent", "message": text or target.value}
        if not isinstance(event, TaskArtifactUpdateEvent):
            stored = convert.envelope_of(current)
            wanted = convert.content_for(task)
            wanted.pop("status_message", None)  # the worker's message is the status
            wanted["history"] = _merged_history(stored.get("history"), wanted.get("history"))
            kept = {key: value for key, value in stored.items() if key != "status_message"}
            if wanted != kept:
                values["metadata"] = {**current.metadata, convert.ENVELOPE: wanted}
        if not values:
            return current.version
        try:
            return self.store.update(current.id, owner=owner, **values).version
        except InvalidTransition as exc:
            raise ConcurrentTaskModificationError(task.id) from exc

    def _save_sdk_task(
        self,
        current: Task,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        owner: str | None,
    ) -> int:
        """A task the SDK's agent runs in the server: the SDK's writes are the record."""
        row = current
        if isinstance(event, TaskArtifactUpdateEvent):
            artifact = convert.artifact_to_queuestore(event.artifact)
            return self._add_artifact(row, artifact, event.append, owner).version
        text = convert.text_of(task.status.message) if task.status.HasField("message") else None
        metadata = {**current.metadata, **convert.envelope_for(task)}
        if target is not row.status or text != row.status_message or metadata != row.metadata:
            if target is not row.status and target not in TRANSITIONS[row.status]:
                row = self._through_working(row, task, target, owner)
            try:
                row = self.store.update(
                    row.id,
                    status=None if target is row.status else target,
                    status_message=text,
                    metadata=metadata,
                    expected_version=row.version,
                    owner=owner,
                )
            except InvalidTransition as exc:
                log.warning("a2a: refused %s for task %s: %s", target, task.id, exc)
                raise ConcurrentTaskModificationError(task.id) from exc
        stored = {artifact.artifact_id: artifact for artifact in row.artifacts}
        for artifact in task.artifacts:
            wanted = convert.artifact_to_queuestore(artifact)
            if stored.get(wanted.artifact_id) != wanted:
                row = self._add_artifact(row, wanted, False, owner)
        return row.version

    def _through_working(
        self, row: Task, task: A2ATask, target: TaskStatus, owner: str | None
    ) -> Task:
        """Take ``working`` first when A2A skips it (SUBMITTED -> COMPLETED, say)."""
        if (
            TaskStatus.WORKING in TRANSITIONS[row.status]
            and target in TRANSITIONS[TaskStatus.WORKING]
        ):
            return self.store.update(
                row.id, status=TaskStatus.WORKING, expected_version=row.version, owner=owner
            )
        log.warning("a2a: refused %s for task %s: it is %s", target, task.id, row.status)
        raise ConcurrentTaskModificationError(task.id)

    def _add_artifact(self, row: Task, artifact: Any, append: bool, owner: str | None) -> Task:
        try:
            return self.store.add_artifact(row.id, artifact, append=append, owner=owner)
        except InvalidTransition as exc:
            log.warning("a2a: refused an artifact for task %s: %s", row.id, exc)
            raise ConcurrentTaskModificationError(row.id) from exc


def _merged_history(stored: Any, copy: Any) -> list[str]:
    """The stored history, then the messages of the SDK's copy it does not have yet.

    A job's history is added to from two sides (the executor, the SDK's saves),
    so an older copy must not drop what the other side added.
    """
    kept = [item for item in stored if isinstance(item, str)] if isinstance(stored, list) else []
    known = {convert.message_from_stored(item).message_id for item in kept}
    for item in copy if isinstance(copy, list) else []:
        if isinstance(item, str) and convert.message_from_stored(item).message_id not in known:
            kept.append(item)
    return kept


class QueuestoreTaskStore(A2ATaskStore):
    """a2a-sdk's plain ``TaskStore`` on a queuestore store (see the module's guarantees).

    Args:
        backend: a :class:`VersionedQueuestoreTaskStore` to share, or what one takes:
            a :class:`~queuestore.TaskQueue` or a :class:`~queuestore.TaskStore`.
        owner_resolver: as for :class:`VersionedQueuestoreTaskStore`.
    """

    def __init__(
        self,
        backend: VersionedQueuestoreTaskStore | TaskQueue | TaskStore,
        *,
        owner_resolver: OwnerResolver = resolve_owner,
    ) -> None:
        if isinstance(backend, VersionedQueuestoreTaskStore):
            self.versioned = backend
        else:
            self.versioned = VersionedQueuestoreTaskStore(backend, owner_resolver=owner_resolver)

    async def save(self, task: A2ATask, context: ServerCallContext) -> None:
        """Write ``task``: what differs from the stored row, under the module's rules.

        Raises:
            ConcurrentTaskModificationError: the task is terminal, or another owner's id.
            InvalidParamsError: a state queuestore cannot hold, or invalid content.
        """
        await self.versioned.save(
            task, event=None, prev=None, prev_version=TaskVersion.MISSING, context=context
        )

    async def get(self, task_id: str, context: ServerCallContext) -> A2ATask | None:
        """A fresh copy of the task if ``context``'s owner may see it."""
        stored = await self.versioned.get(task_id, context)
        return None if stored is None else stored.task

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """See :meth:`VersionedQueuestoreTaskStore.list`."""
        return await self.versioned.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """See :meth:`VersionedQueuestoreTaskStore.delete`."""
        await self.versioned.delete(task_id, context)


__all__ = [
    "SDK_TASK",
    "JobRequest",
    "QueuestoreTaskStore",
    "VersionedQueuestoreTaskStore",
]
