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

Each store remembers the last row it wrote or read for each task the SDK writes
itself (:class:`KnownRows`, bounded). A save that starts from that row needs no
read: its write is conditioned on the remembered version, and when another
writer moved the row on (another replica, a delete) the write is refused and the
save reads the row and applies as without the memory. Nothing above depends on
what the memory holds, with one known gap: a row deleted and created again under
the same id by another process, that has reached the very version remembered, is
not told apart from the old row (the store's own deletes forget it).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
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
from queuestore.store.loop import blocking

log = logging.getLogger(__name__)

SDK_TASK: Final = "a2a.task"
"""The name of rows the SDK writes itself (an agent that runs in the server process)."""

DEFAULT_KNOWN_ROWS: Final = 4096
"""How many rows a store remembers by default (see :class:`KnownRows`)."""


class KnownRows:
    """The last row a store wrote or read for each ``(owner, task id)``, least recent out.

    Only live rows the SDK writes itself (named :data:`SDK_TASK`) are kept: a
    job's row is its worker's to write, and a terminal row takes no more
    writes. The memory is a hint: a save that uses it conditions its write on
    the remembered version, so a stale entry costs one refused write, never a
    wrong one (but for the module's one known gap: an id recreated elsewhere at
    the very version remembered). Safe to use from several threads.

    Args:
        capacity: how many rows to keep; 0 keeps none.

    Raises:
        ValueError: ``capacity`` is negative.
    """

    def __init__(self, capacity: int = DEFAULT_KNOWN_ROWS) -> None:
        self.capacity = self.checked(capacity)
        self._rows: OrderedDict[tuple[str | None, str], Task] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def checked(capacity: int) -> int:
        """``capacity``, if it is one (0 or more).

        Raises:
            ValueError: ``capacity`` is negative.
        """
        if capacity < 0:
            raise ValueError(f"known_rows must be 0 or more, not {capacity}")
        return capacity

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def get(self, owner: str | None, task_id: str) -> Task | None:
        """The remembered row, if any (and mark it recently used)."""
        with self._lock:
            row = self._rows.get((owner, task_id))
            if row is not None:
                self._rows.move_to_end((owner, task_id))
            return row

    def remember(self, owner: str | None, row: Task) -> None:
        """Keep ``row`` as the latest known for ``owner``; forget it when it is not kept.

        A read that returns after a save of the same row (two threads) does not
        replace the newer version the save remembered.
        """
        key = (owner, row.id)
        with self._lock:
            if row.name != SDK_TASK or row.is_terminal or not self.capacity:
                self._rows.pop(key, None)
                return
            kept = self._rows.get(key)
            if kept is None or kept.created_at != row.created_at or kept.version < row.version:
                self._rows[key] = row
            self._rows.move_to_end(key)
            while len(self._rows) > self.capacity:
                self._rows.popitem(last=False)

    def forget(self, owner: str | None, task_id: str) -> None:
        """Drop what is remembered of ``task_id`` for ``owner``."""
        with self._lock:
            self._rows.pop((owner, task_id), None)


class _Stale(Exception):
    """The remembered row could not be used: the save reads the row instead."""


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
        known_rows: how many rows to remember, so that a save of a task this
            store wrote or read last needs no read (:class:`KnownRows`); 0
            reads before every save.

    Raises:
        ValueError: ``known_rows`` is negative.
    """

    def __init__(
        self,
        backend: TaskQueue | TaskStore,
        *,
        owner_resolver: OwnerResolver = resolve_owner,
        known_rows: int = DEFAULT_KNOWN_ROWS,
    ) -> None:
        self.queue = backend if isinstance(backend, TaskQueue) else None
        self.store = backend.store if isinstance(backend, TaskQueue) else backend
        self.owner_resolver = owner_resolver
        self.known = KnownRows(known_rows)
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
        version = await self.store.run_async(
            self._save, task, event, prev_version, owner, first_write=first
        )
        return TaskVersion(version)

    async def save_whole(self, task: A2ATask, context: ServerCallContext) -> TaskVersion:
        """The plain ``TaskStore``'s save: ``task`` as a whole, no version to compare.

        A task this store does not remember is tried as a new task first (one
        insert, no read); when the id exists the row is read and what differs
        applied, under the same rules as :meth:`save`.
        """
        owner = self.owner_resolver(context)
        version = await self.store.run_async(
            self._save, task, None, TaskVersion.MISSING, owner, insert_first=True
        )
        return TaskVersion(version)

    async def get(self, task_id: str, context: ServerCallContext) -> StoredTask | None:
        """The task and its version if ``context``'s owner may see it."""
        row = await self.store.run_async(self._get, task_id, self.owner_resolver(context))
        if row is None:
            return None
        return StoredTask(convert.to_a2a(row), TaskVersion(row.version))

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """One page of the caller's tasks, newest first, with every filter of ``params``.

        Raises:
            InvalidParamsError: a bad page size, page token or filter.
        """
        owner = self.owner_resolver(context)
        return await list_page(self.store, params, owner)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete the task if ``context``'s owner may see it; nothing otherwise."""
        owner = self.owner_resolver(context)
        self.known.forget(owner, task_id)
        try:
            await self.store.run_async(self.store.delete, task_id, owner=owner)
        except InvalidTaskData:
            return

    # -- implementation (sync: run by the store's run_async) -----------------

    def _get(self, task_id: str, owner: str | None) -> Task | None:
        try:
            row = self.store.get(task_id, owner=owner)
        except (TaskNotFound, InvalidTaskData):
            self.known.forget(owner, task_id)
            return None
        self.known.remember(owner, row)
        return row

    def _save(
        self,
        task: A2ATask,
        event: Event | None,
        prev_version: TaskVersion,
        owner: str | None,
        *,
        first_write: bool = False,
        insert_first: bool = False,
    ) -> int:
        """Save ``task``; ``insert_first``: try it as a new task before reading (plain saves)."""
        try:
            target = convert.status_of(task.status.state)
        except ValueError as exc:
            raise InvalidParamsError(message=str(exc)) from exc
        try:
            row = self._saved(task, target, event, prev_version, owner, first_write, insert_first)
        except InvalidTaskData as exc:
            raise InvalidParamsError(message=str(exc)) from exc
        except TaskConflict as exc:
            raise ConcurrentTaskModificationError(task.id) from exc
        self.known.remember(owner, row)
        return row.version

    def _saved(  # noqa: PLR0917 - private, the arguments of _save
        self,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        prev_version: TaskVersion,
        owner: str | None,
        first_write: bool,
        insert_first: bool,
    ) -> Task:
        """The row after the save: from the remembered row, a new one, or the row read."""
        if first_write:
            # The SDK found no task: create it (an id another owner holds is refused).
            return self._create(task, target, owner)
        known = self.known.get(owner, task.id)
        if known is not None and (
            prev_version.is_missing or prev_version == TaskVersion(known.version)
        ):
            try:
                return self._save_known(known, task, target, event, owner)
            except _Stale:
                self.known.forget(owner, task.id)
        elif (
            known is None
            and insert_first
            and self.known.capacity
            and target is not TaskStatus.CANCELLED
        ):
            # A plain save of a task this store does not remember is most often of a
            # new task: one insert, no read first. (Without a memory, every save
            # would be tried so: it reads first instead.)
            try:
                return self._create(task, target, owner, taken_is_refusal=False)
            except TaskConflict:
                pass  # the id exists: this owner's (applied below) or another's (refused)
        current = self._get(task.id, owner)
        if current is None:
            if prev_version.is_missing:
                return self._create(task, target, owner)
            raise ConcurrentTaskModificationError(task.id)  # deleted meanwhile
        return self._apply(current, task, target, event, prev_version, owner)

    def _save_known(
        self,
        known: Task,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        owner: str | None,
    ) -> Task:
        """The save from the remembered row: its first write is conditioned on that row.

        Raises:
            _Stale: the first write was refused (the row moved on, ended, or is
                gone), or the save has no conditioned first write to tell.
        """
        if target is TaskStatus.CANCELLED:
            return self._cancel(known, task, owner, known_row=True)
        return self._save_sdk_task(known, task, target, event, owner, known_row=True)

    def _create(
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
            row = self.store.create(  # run by the agent in the server: never dispatched
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
        return self._apply(row, task, target, None, TaskVersion(row.version), owner)

    def _apply(  # noqa: PLR0917 - private, called from two places with the same shape
        self,
        current: Task,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        prev_version: TaskVersion,
        owner: str | None,
    ) -> Task:
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
            return self._cancel(current, task, owner)
        if job:
            return self._save_job_task(current, task, target, event, owner)
        return self._save_sdk_task(current, task, target, event, owner)

    def _cancel(
        self, current: Task, task: A2ATask, owner: str | None, *, known_row: bool = False
    ) -> Task:
        reason = convert.text_of(task.status.message) if task.status.HasField("message") else None
        try:
            if self.queue is not None and current.name != SDK_TASK:
                return blocking(self.queue.cancel, current.id, owner=owner, reason=reason)
            return self.store.cancel(current.id, owner=owner, reason=reason)
        except (InvalidTransition, TaskNotFound) as exc:
            if known_row:
                raise _Stale from exc  # it ended or went meanwhile: the read path decides
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
            return current
        try:
            return self.store.update(current.id, owner=owner, **values)
        except InvalidTransition as exc:
            ended = self._get(current.id, owner)
            if ended is None or not ended.is_terminal:
                raise ConcurrentTaskModificationError(task.id) from exc
            # The worker ended the job since the read: the rule for a save to a
            # finished task decides (a relayed earlier version adds nothing).
            return self._apply(ended, task, target, event, TaskVersion(ended.version), owner)

    def _save_sdk_task(
        self,
        current: Task,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        owner: str | None,
        *,
        known_row: bool = False,
    ) -> Task:
        """A task the SDK's agent runs in the server: the SDK's writes are the record.

        With ``known_row`` (``current`` is the remembered row, not one just
        read) the save must start with a write conditioned on its version, and
        a refusal of that write raises :class:`_Stale`.
        """
        row = current
        if isinstance(event, TaskArtifactUpdateEvent):
            if known_row:
                # An artifact write merges into whatever row it finds: it cannot tell.
                raise _Stale
            artifact = convert.artifact_to_queuestore(event.artifact)
            return self._add_artifact(row, artifact, event.append, owner)
        text = convert.text_of(task.status.message) if task.status.HasField("message") else None
        metadata = {**current.metadata, **convert.envelope_for(task)}
        if target is not row.status or text != row.status_message or metadata != row.metadata:
            direct = target is row.status or target in TRANSITIONS[row.status]
            if not direct:
                if known_row:
                    raise _Stale  # rare (A2A skipping WORKING): decided on a fresh row
                row = self._through_working(row, task, target, owner)
            try:
                row = self.store.update(
                    row.id,
                    status=None if target is row.status else target,
                    status_message=text,
                    metadata=metadata,
                    expected_version=row.version,
                    owner=owner,
                    known=row,
                )
            except (InvalidTransition, TaskConflict, TaskNotFound) as exc:
                if known_row:
                    raise _Stale from exc
                if not isinstance(exc, InvalidTransition):
                    raise
                log.warning("a2a: refused %s for task %s: %s", target, task.id, exc)
                raise ConcurrentTaskModificationError(task.id) from exc
        elif known_row:
            raise _Stale  # no write to condition: the read tells what the row is
        stored = {artifact.artifact_id: artifact for artifact in row.artifacts}
        for artifact in task.artifacts:
            wanted = convert.artifact_to_queuestore(artifact)
            if stored.get(wanted.artifact_id) != wanted:
                row = self._add_artifact(row, wanted, False, owner)
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
                known=row,
            )
        log.warning("a2a: refused %s for task %s: it is %s", target, task.id, row.status)
        raise ConcurrentTaskModificationError(task.id)

    def _add_artifact(self, row: Task, artifact: Any, append: bool, owner: str | None) -> Task:
        try:
            # ``row`` is current (just read or written): the write needs no read first.
            return self.store.add_artifact(row.id, artifact, append=append, owner=owner, known=row)
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


class QueuestoreTaskStore(A2ATaskStore):
    """a2a-sdk's plain ``TaskStore`` on a queuestore store (see the module's guarantees).

    Args:
        backend: a :class:`VersionedQueuestoreTaskStore` to share, or what one takes:
            a :class:`~queuestore.TaskQueue` or a :class:`~queuestore.TaskStore`.
        owner_resolver: as for :class:`VersionedQueuestoreTaskStore`.
        known_rows: as for :class:`VersionedQueuestoreTaskStore`; a shared
            versioned store keeps its own (and its memory is shared).

    Raises:
        ValueError: ``known_rows`` is negative.
    """

    def __init__(
        self,
        backend: VersionedQueuestoreTaskStore | TaskQueue | TaskStore,
        *,
        owner_resolver: OwnerResolver = resolve_owner,
        known_rows: int = DEFAULT_KNOWN_ROWS,
    ) -> None:
        if isinstance(backend, VersionedQueuestoreTaskStore):
            KnownRows.checked(known_rows)  # refused alike, though the shared store's is kept
            self.versioned = backend
        else:
            self.versioned = VersionedQueuestoreTaskStore(
                backend, owner_resolver=owner_resolver, known_rows=known_rows
            )

    async def save(self, task: A2ATask, context: ServerCallContext) -> None:
        """Write ``task``: what differs from the stored row, under the module's rules.

        A task this store does not remember is tried as a new task first (one
        insert); when its id exists the row is read and what differs applied.

        Raises:
            ConcurrentTaskModificationError: the task is terminal, or another owner's id.
            InvalidParamsError: a state queuestore cannot hold, or invalid content.
        """
        await self.versioned.save_whole(task, context)

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
    "DEFAULT_KNOWN_ROWS",
    "SDK_TASK",
    "JobRequest",
    "KnownRows",
    "QueuestoreTaskStore",
    "VersionedQueuestoreTaskStore",
]
