"""The plain A2A save: read the row, then apply what the SDK's copy changes, under the rules.

:class:`ReadThenApply` is what every save of
:class:`~queuestore.a2a.task_store.VersionedQueuestoreTaskStore` comes down to when
it remembers nothing of the task: it reads the row and applies the SDK's copy
as what it changes (a status, a message, one artifact), never as a whole-task
overwrite, and refuses what the module :mod:`queuestore.a2a.task_store` says is refused.
The store's memory of rows (``KnownRows``) is a layer above, and this path
never depends on it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from a2a.server.cluster.task_store import ConcurrentTaskModificationError
from a2a.server.cluster.version import TaskVersion
from a2a.server.events.event_queue import Event
from a2a.types import Task as A2ATask
from a2a.types import TaskArtifactUpdateEvent, TaskState

from queuestore import TaskQueue, TaskStore
from queuestore.a2a import convert
from queuestore.core.errors import InvalidTaskData, InvalidTransition, TaskConflict, TaskNotFound
from queuestore.core.models import TERMINAL, TRANSITIONS, Artifact, Task, TaskStatus
from queuestore.store.sql import blocking

log = logging.getLogger(__name__)

SDK_TASK: Final = "a2a.task"
"""The name of rows the SDK writes itself (an agent that runs in the server process)."""


@dataclass(frozen=True, slots=True)
class JobRequest:
    """The job a new task runs: submitted when the SDK first saves the task."""

    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SdkChange:
    """What a save of a task the SDK writes itself changes besides its artifacts."""

    status: TaskStatus
    status_message: str | None
    metadata: dict[str, Any]

    @staticmethod
    def between(row: Task, task: A2ATask, target: TaskStatus) -> SdkChange | None:
        """The change from ``row`` to the SDK's copy ``task``, or None when there is none."""
        text = convert.a2a_status_text(task)
        metadata = {**row.metadata, **convert.envelope_for(task)}
        if target is row.status and text == row.status_message and metadata == row.metadata:
            return None
        return SdkChange(target, text, metadata)

    def is_direct_from(self, row: Task) -> bool:
        """Whether ``row`` can take the status in one write (A2A may skip WORKING)."""
        return self.status is row.status or self.status in TRANSITIONS[row.status]

    def write(self, store: TaskStore, row: Task, owner: str | None) -> Task:
        """Write the change, conditioned on ``row``'s version.

        Raises:
            InvalidTransition, TaskConflict, TaskNotFound: as the store's ``update``.
        """
        return store.update(
            row.id,
            status=None if self.status is row.status else self.status,
            status_message=self.status_message,
            metadata=self.metadata,
            expected_version=row.version,
            owner=owner,
        )


class ReadThenApply:
    """Saves of the SDK's tasks as queuestore rows: each reads the row, then applies.

    Args:
        backend: a :class:`~queuestore.TaskQueue` (tasks may be jobs; a
            CANCELED revokes them) or a bare :class:`~queuestore.TaskStore`.
    """

    def __init__(self, backend: TaskQueue | TaskStore) -> None:
        self.queue = backend if isinstance(backend, TaskQueue) else None
        self.store = backend.store if isinstance(backend, TaskQueue) else backend
        self._requests: dict[str, JobRequest] = {}
        self._requests_lock = threading.Lock()

    def request_job(self, task_id: str, request: JobRequest) -> None:
        """Make the first save of ``task_id`` submit ``request`` instead of a bare row."""
        with self._requests_lock:
            self._requests[task_id] = request

    def forget_job_request(self, task_id: str) -> None:
        """Drop a request that no save took (the task existed, or the save failed)."""
        with self._requests_lock:
            self._requests.pop(task_id, None)

    def read(self, task_id: str, owner: str | None) -> Task | None:
        """The row, or None when ``owner`` has no task ``task_id``."""
        try:
            return self.store.get(task_id, owner=owner)
        except (TaskNotFound, InvalidTaskData):
            return None

    def save(  # noqa: PLR0917 - the arguments of a save, as the SDK gives them
        self,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        prev_version: TaskVersion,
        owner: str | None,
        current: Task | None,
    ) -> Task:
        """Save ``task`` onto ``current``, the row just read (None: there is none).

        Raises:
            ConcurrentTaskModificationError: the save is refused (see the store's module).
            TaskConflict, InvalidTaskData: as the store's verbs.
        """
        if current is None:
            if prev_version.is_missing:
                return self.create(task, target, owner)
            raise ConcurrentTaskModificationError(task.id)  # deleted meanwhile
        return self.apply(current, task, target, event, prev_version, owner)

    def create(
        self,
        task: A2ATask,
        target: TaskStatus,
        owner: str | None,
        *,
        taken_is_refusal: bool = True,
    ) -> Task:
        """Create the task (as its job when one was requested), then apply the rest of it.

        Raises:
            TaskConflict: the id is taken; logged as a refusal unless
                ``taken_is_refusal`` is false (the caller then reads the row).
        """
        if target is TaskStatus.CANCELLED:
            raise ConcurrentTaskModificationError(task.id)  # nothing to cancel
        with self._requests_lock:
            request = self._requests.pop(task.id, None)
        metadata = convert.envelope_for(task)
        context_id = task.context_id or None
        try:
            if request is not None and self.queue is not None:
                return blocking(  # publishes the job
                    self.queue.submit,
                    request.name,
                    request.input,
                    owner=owner,
                    context_id=context_id,
                    metadata=metadata,
                    task_id=task.id,
                )
            row = self.store.create(  # run by the agent in the server: never published
                SDK_TASK,
                owner=owner,
                context_id=context_id,
                metadata=metadata,
                task_id=task.id,
                job=False,
            )
        except TaskConflict:
            if request is not None:
                with self._requests_lock:
                    self._requests.setdefault(task.id, request)
            if taken_is_refusal:
                log.warning(
                    "a2a: refused to save task %s for owner %r: the id belongs to another owner",
                    task.id,
                    owner,
                )
            raise
        if target is TaskStatus.SUBMITTED and not task.artifacts:
            return row
        return self.apply(row, task, target, None, TaskVersion(row.version), owner)

    def apply(  # noqa: PLR0917 - the arguments of a save, as the SDK gives them
        self,
        current: Task,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        prev_version: TaskVersion,
        owner: str | None,
    ) -> Task:
        """Apply the SDK's copy to ``current``, the row just read or created."""
        cancel = target is TaskStatus.CANCELLED
        job = current.name != SDK_TASK
        if job:
            _drop_status_messages(task, convert.envelope_of(current).get("history"))
        if current.is_terminal:
            if target is current.status or (job and target not in TERMINAL):
                # The SDK echoing the end it knows, or a job's earlier version it relays.
                return current
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
            return self.cancel(current, task, owner)
        if job:
            return self._save_job_task(current, task, target, event, owner)
        return self._save_sdk_task(current, task, target, event, owner)

    def cancel(self, current: Task, task: A2ATask, owner: str | None) -> Task:
        """The store's cancel (the queue's, revoking the job, for a job's task).

        Raises:
            ConcurrentTaskModificationError: the task ended or went meanwhile.
        """
        try:
            if self.queue is not None and current.name != SDK_TASK:
                return blocking(
                    self.queue.cancel, current.id, owner=owner, reason=convert.a2a_status_text(task)
                )
            return self.store.cancel(current.id, owner=owner, reason=convert.a2a_status_text(task))
        except (InvalidTransition, TaskNotFound) as exc:
            raise ConcurrentTaskModificationError(task.id) from exc

    def _save_job_task(
        self,
        current: Task,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        owner: str | None,
    ) -> Task:
        """The SDK's copy of a job's task: its worker writes status and artifacts."""
        values: dict[str, Any] = {}
        if target in (TaskStatus.FAILED, TaskStatus.REJECTED):
            values["status"] = target
            values["error"] = {
                "type": "agent",
                "message": convert.a2a_status_text(task) or target.value,
            }
        if not isinstance(event, TaskArtifactUpdateEvent):
            stored = convert.envelope_of(current)
            wanted = convert.content_for(task)
            wanted.pop("status_message", None)  # the worker's message is the status
            wanted["history"] = _merged_history(stored.get("history"), wanted.get("history"))
            kept = {key: value for key, value in stored.items() if key != "status_message"}
            if wanted != kept:
                values["metadata"] = {**current.metadata, convert.ENVELOPE: wanted}
        if not values:
            return current
        try:
            return self.store.update(current.id, owner=owner, **values)
        except InvalidTransition as exc:
            ended = self.read(current.id, owner)
            if ended is None or not ended.is_terminal:
                raise ConcurrentTaskModificationError(task.id) from exc
            # The worker ended the job since the read: the rule for a save to a
            # finished task decides (a relayed earlier version adds nothing).
            return self.apply(ended, task, target, event, TaskVersion(ended.version), owner)

    def _save_sdk_task(
        self,
        current: Task,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        owner: str | None,
    ) -> Task:
        """A task the SDK's agent runs in the server: the SDK's writes are the record."""
        if isinstance(event, TaskArtifactUpdateEvent):
            artifact = convert.artifact_to_queuestore(event.artifact)
            return self.add_artifact(current, artifact, event.append, owner)
        row = current
        change = SdkChange.between(row, task, target)
        if change is not None:
            if not change.is_direct_from(row):
                row = self._through_working(row, task, target, owner)
            try:
                row = change.write(self.store, row, owner)
            except InvalidTransition as exc:
                log.warning("a2a: refused %s for task %s: %s", target, task.id, exc)
                raise ConcurrentTaskModificationError(task.id) from exc
        return self.add_artifacts(row, task, owner)

    def add_artifacts(self, row: Task, task: A2ATask, owner: str | None) -> Task:
        """Write each artifact of the SDK's copy that ``row`` does not hold as it is."""
        stored = {artifact.artifact_id: artifact for artifact in row.artifacts}
        for artifact in task.artifacts:
            wanted = convert.artifact_to_queuestore(artifact)
            if stored.get(wanted.artifact_id) != wanted:
                row = self.add_artifact(row, wanted, False, owner)
        return row

    def _through_working(
        self, row: Task, task: A2ATask, target: TaskStatus, owner: str | None
    ) -> Task:
        """Take ``working`` first when A2A skips it (SUBMITTED -> COMPLETED, say)."""
        if (
            TaskStatus.WORKING in TRANSITIONS[row.status]
            and target in TRANSITIONS[TaskStatus.WORKING]
        ):
            return self.store.update(
                row.id,
                status=TaskStatus.WORKING,
                expected_version=row.version,
                owner=owner,
            )
        log.warning("a2a: refused %s for task %s: it is %s", target, task.id, row.status)
        raise ConcurrentTaskModificationError(task.id)

    def add_artifact(self, row: Task, artifact: Artifact, append: bool, owner: str | None) -> Task:
        try:
            return self.store.add_artifact(row.id, artifact, append=append, owner=owner)
        except InvalidTransition as exc:
            log.warning("a2a: refused an artifact for task %s: %s", row.id, exc)
            raise ConcurrentTaskModificationError(row.id) from exc


def _drop_status_messages(task: A2ATask, stored: Any) -> None:
    """Take the job's status messages the SDK moved into ``task.history`` out again.

    On every status update the SDK moves the previous status message into the
    history of its working copy (the ``task`` it saves, keeps and answers a
    blocking send with). For a job that is each report (progress, a status
    text): it belongs in the status, and the history keeps the conversation.
    A status message the stored history holds stays (the question a user
    answered: the executor adds it with the answer). The copy is pruned in
    place, so it does not grow with every report either.
    """
    held = (
        {convert.message_from_stored(item).message_id for item in stored if isinstance(item, str)}
        if isinstance(stored, list)
        else set()
    )
    kept = [
        message
        for message in task.history
        if message.message_id in held or not convert.is_status_message(message, task.id)
    ]
    if len(kept) != len(task.history):
        del task.history[:]
        task.history.extend(kept)


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
