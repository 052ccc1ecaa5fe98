"""A2A's task stores on queuestore rows: terminal states stay terminal, owners stay apart.

:class:`VersionedQueuestoreTaskStore` is a2a-sdk's ``VersionedTaskStore`` (the
cluster interface, compare-and-set on the row's ``version``);
:class:`QueuestoreTaskStore` is its plain ``TaskStore``. Both keep the SDK's
tasks as queuestore rows, so the same task is a row the store's rules guard,
a Celery job's record, and an A2A task:

- The owner comes from the call context (see :mod:`queuestore.a2a.principal`) and
  is the store's owner filter, applied inside every query before the page limit.
  A save never moves a task between owners: an id another owner holds is refused.
- A write after a terminal state (COMPLETED, CANCELED, FAILED, REJECTED) is
  refused, logged, and never applied; the SDK sees
  ``ConcurrentTaskModificationError`` and reloads the terminal task.
- A CANCELED write is the store's ``cancel``: it changes the status only (the
  stored artifacts and history stay) and, for a task that is a job, revokes
  the job, whichever process or replica the CANCELED comes from.
- A task whose work runs as a job (created by
  :class:`~queuestore.a2a.agent_executor.QueuestoreAgentExecutor`) is written by its
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

import threading
from collections import OrderedDict
from typing import Final

from a2a.server.cluster.task_store import (
    ConcurrentTaskModificationError,
    StoredTask,
    VersionedTaskStore,
)
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.tasks.task_store import TaskStore as A2ATaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, TaskArtifactUpdateEvent
from a2a.types import Task as A2ATask
from a2a.utils.errors import InvalidParamsError

from queuestore import TaskQueue, TaskStore
from queuestore.a2a import convert
from queuestore.a2a.apply import SDK_TASK, JobRequest, ReadThenApply, SdkChange
from queuestore.a2a.listing import list_page
from queuestore.a2a.principal import OwnerResolver, resolve_owner
from queuestore.core.errors import InvalidTaskData, InvalidTransition, TaskConflict, TaskNotFound
from queuestore.core.models import Task, TaskStatus

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


class VersionedQueuestoreTaskStore(VersionedTaskStore):
    """a2a-sdk's ``VersionedTaskStore`` on a queuestore store.

    Args:
        backend: a :class:`~queuestore.TaskQueue` (tasks may be jobs; a
            CANCELED revokes them) or a bare :class:`~queuestore.TaskStore`.
        owner_resolver: the owner of a call; by default the user's name,
            inside the tenant (:func:`~queuestore.a2a.principal.resolve_owner`).
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
        self.rows = ReadThenApply(backend)
        self.queue = self.rows.queue
        self.store = self.rows.store
        self.owner_resolver = owner_resolver
        self.known = KnownRows(known_rows)

    @property
    def as_task_store(self) -> QueuestoreTaskStore:
        """The plain ``TaskStore`` on the same rows and rules."""
        return QueuestoreTaskStore(self)

    def request_job(self, task_id: str, request: JobRequest) -> None:
        """Make the first save of ``task_id`` submit ``request`` instead of a bare row.

        The executor calls it before it emits the task, so the row is created
        once, as the job, by the save the SDK makes anyway.
        """
        self.rows.request_job(task_id, request)

    def forget_job_request(self, task_id: str) -> None:
        """Drop a request that no save took (the task existed, or the save failed)."""
        self.rows.forget_job_request(task_id)

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
        row = self.rows.read(task_id, owner)
        if row is None:
            self.known.forget(owner, task_id)
        else:
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
            return self.rows.create(task, target, owner)
        known = self.known.get(owner, task.id)
        if known is not None and (
            prev_version.is_missing or prev_version == TaskVersion(known.version)
        ):
            saved = self._save_remembered(known, task, target, event, owner)
            if saved is not None:
                return saved
            self.known.forget(owner, task.id)
        elif known is None and insert_first and self.known.capacity:
            created = self._create_unknown(task, target, owner)
            if created is not None:
                return created
        current = self._get(task.id, owner)
        return self.rows.save(task, target, event, prev_version, owner, current)

    def _save_remembered(
        self,
        known: Task,
        task: A2ATask,
        target: TaskStatus,
        event: Event | None,
        owner: str | None,
    ) -> Task | None:
        """The save from the remembered row, whose first write is conditioned on that row.

        None when the memory cannot tell: the write was refused (the row moved
        on, ended, or is gone), or the save has no conditioned first write (an
        artifact merges into whatever row it finds; no change; A2A skipping
        WORKING). The save then reads the row, as without the memory.
        """
        if target is TaskStatus.CANCELLED:
            try:  # a remembered row is the SDK's own task: no job to revoke
                return self.store.cancel(
                    known.id, owner=owner, reason=convert.a2a_status_text(task)
                )
            except (InvalidTransition, TaskNotFound):
                return None
        if isinstance(event, TaskArtifactUpdateEvent):
            return None
        change = SdkChange.between(known, task, target)
        if change is None or not change.is_direct_from(known):
            return None
        try:
            row = change.write(self.store, known, owner)
        except (InvalidTransition, TaskConflict, TaskNotFound):
            return None
        return self.rows.add_artifacts(row, task, owner)

    def _create_unknown(self, task: A2ATask, target: TaskStatus, owner: str | None) -> Task | None:
        """A plain save of a task this store does not remember, tried as a new task.

        It is most often of a new task: one insert, no read first. None when the
        id exists: this owner's (the read path applies the save) or another's
        (the read path refuses it). Without a memory every save reads first.
        """
        if target is TaskStatus.CANCELLED:
            return None
        try:
            return self.rows.create(task, target, owner, taken_is_refusal=False)
        except TaskConflict:
            return None


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
