"""The abstract store: the callers' verbs, on the rules every backend shares.

:class:`TaskStore` is what users hold. Its verbs (create, get, list, update,
cancel...) are written once here on top of the primitives a backend
implements; the rules they share live in :mod:`queuestore.store.backend`, and
the workers' verbs (claim, heartbeat, report, reap) in
:mod:`queuestore.store.runs`. Backends only fetch and write.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from queuestore.core import validation as check
from queuestore.core.cursor import CursorKey
from queuestore.core.errors import (
    InvalidTaskData,
    TaskNotFound,
)
from queuestore.core.models import (
    LIVE,
    PARKED,
    Artifact,
    Step,
    Task,
    TaskError,
    TaskPage,
    TaskStatus,
    new_task_id,
)
from queuestore.core.owner import ANY, Owner
from queuestore.core.watch import Listener, StatusChange, Watch
from queuestore.store.backend import (
    UNSET,
    ListQuery,
    NewTask,
    Unset,
    Write,
)
from queuestore.store.deliveries import DeliveryVerbs
from queuestore.store.durable import DurableVerbs
from queuestore.store.flow import FlowVerbs
from queuestore.store.operator import OperatorVerbs
from queuestore.store.runs import RunVerbs, lost_runs
from queuestore.store.schedules import ScheduleVerbs

P = ParamSpec("P")
T = TypeVar("T")

__all__ = [
    "UNSET",
    "ListQuery",
    "Listener",
    "NewTask",
    "StatusChange",
    "TaskStore",
    "Unset",
    "Write",
    "lost_runs",
]


class TaskStore(RunVerbs, DurableVerbs, DeliveryVerbs, OperatorVerbs, ScheduleVerbs, FlowVerbs):
    """A durable store of tasks, their status, progress, artifacts and results.

    Args:
        require_owner: refuse tasks without an owner and show anonymous callers
            nothing at all.
        max_payload_bytes: the largest input, result, metadata or artifact
            accepted, measured as compact JSON.
        cursor_secret: the key that signs pagination cursors; share it between
            processes that serve the same clients.
        url_policy: which callback URLs are accepted (by default, none that
            resolves to a private, loopback or link-local address).
    """

    # -- public verbs -------------------------------------------------------

    def create(
        self,
        name: str,
        input: Mapping[str, Any] | None = None,
        *,
        owner: str | None = None,
        context_id: str | None = None,
        ttl: timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
        task_id: str | None = None,
        job: bool = True,
        run_at: datetime | None = None,
        unique_key: str | None = None,
        priority: int = 0,
        traceparent: str | None = None,
        start_by: datetime | None = None,
        deadline: datetime | None = None,
        timeout: timedelta | None = None,
        on: Any = None,
    ) -> Task:
        """Persist a new task in ``submitted``, or return the live one holding ``unique_key``.

        ``job`` says what runs it. True (the default): a Celery job, which
        :meth:`TaskQueue.submit <queuestore.TaskQueue.submit>` publishes; until a
        mark records that its message went out, the sweep publishes
        it, and the unpublished count counts it. False: a record that something
        else runs (an A2A agent in its server process); the sweep never
        publishes it and the backlog never counts it.

        ``run_at`` is when a job may start (``Task.run_at``): the sweep publishes
        it as that time comes near (see :meth:`unpublished`), not before.

        ``unique_key``: while a live task of the same owner (the unowned share
        one space) holds this key, that task is returned and nothing is
        written; once it ends, the key is free. The caller tells the two apart
        by id (pass ``task_id`` to know it), as ``TaskQueue.submit`` does.

        ``priority``, from 0 (the default) to 9: the sweep publishes the
        most urgent waiting jobs first, and so do the brokers where the queue
        enables priorities (see ``TaskQueue``).

        Deadlines the store enforces (the reaper fails the task): ``start_by``,
        a job not started by then never runs (``DeadlineExpired``);
        ``deadline``, a task still live then fails (``DeadlineExceeded``);
        ``timeout``, how long each run may take (``RunTimedOut``; without it,
        the job's own ``timeout``).

        ``on``: the caller's connection (an SQLAlchemy ``Connection`` or
        ``Session``, or a psycopg ``Connection``, to this store's database):
        the row is inserted in the caller's transaction and commits or rolls
        back with it (:class:`SqlTaskStore` only).

        ``traceparent``: the W3C trace context (``00-<trace id>-<span id>-<flags>``)
        its runs, retries and deliveries continue (``TaskQueue.submit`` sets it
        when OpenTelemetry traces, see :mod:`queuestore.core.tracing`).

        Raises:
            InvalidTaskData: bad name, input, owner, ttl, metadata, id, job, run_at,
                unique_key, priority, start_by, deadline, timeout, connection or
                traceparent.
            TaskConflict: ``task_id`` is already taken.
        """
        new = self._new_task(
            name,
            input,
            owner=owner,
            context_id=context_id,
            ttl=ttl,
            metadata=metadata,
            task_id=task_id,
            job=job,
            run_at=run_at,
            unique_key=unique_key,
            priority=priority,
            traceparent=traceparent,
            start_by=start_by,
            deadline=deadline,
            timeout=timeout,
        )
        if on is not None:
            ((task, _),) = self._insert_on(on, [new])
            return task  # announced by nobody: it may yet roll back
        task, created = self._insert(new)
        self._announce_created([(task, created)])
        return task

    def create_many(
        self, tasks: Iterable[Mapping[str, Any]], *, on: Any = None
    ) -> builtins.list[Task]:
        """Persist many new tasks in one transaction, all or none: :meth:`create` for each.

        Each item holds :meth:`create`'s arguments by name (``name`` is required).
        The tasks are inserted in as few statements as the database allows,
        and returned in the order given; an item whose ``unique_key`` a live
        task holds (an earlier item included) gives that task, as :meth:`create` does.

        Raises:
            InvalidTaskData: an item is invalid (the field says which, as
                ``tasks[3].input``), or two items have one ``task_id``; nothing
                is written.
            TaskConflict: a ``task_id`` is already taken; nothing is written.

        ``on``: the caller's connection, as for :meth:`create`.
        """
        news = [self._new_item(index, item) for index, item in enumerate(tasks)]
        ids = [new.id for new in news]
        if len(set(ids)) != len(ids):
            raise InvalidTaskData("two items have the same task_id", field="tasks")
        if not news:
            return []
        if on is not None:
            return [task for task, _ in self._insert_on(on, news)]
        results = self._insert_many(news)
        self._announce_created(results)
        return [task for task, _ in results]

    def _new_item(self, index: int, item: Mapping[str, Any]) -> NewTask:
        """One item of :meth:`create_many`, checked as :meth:`create` checks its arguments."""
        where = f"tasks[{index}]"
        if not isinstance(item, Mapping) or "name" not in item:
            raise InvalidTaskData("must be a mapping of create's arguments, with name", field=where)
        try:
            return self._new_task(**item)
        except TypeError as exc:  # an argument create does not take
            raise InvalidTaskData(str(exc).split("() ", 1)[-1], field=where) from None
        except InvalidTaskData as exc:
            field = where if exc.field is None else f"{where}.{exc.field}"
            message = str(exc).removeprefix(f"{exc.field}: ")
            raise InvalidTaskData(message, field=field) from None

    def _announce_created(self, results: Iterable[tuple[Task, bool]]) -> None:
        for task, created in results:
            if created:
                for observer in self._observers:
                    observer.created(task)

    def _new_task(
        self,
        name: str,
        input: Mapping[str, Any] | None = None,
        *,
        owner: str | None = None,
        context_id: str | None = None,
        ttl: timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
        task_id: str | None = None,
        job: bool = True,
        run_at: datetime | None = None,
        unique_key: str | None = None,
        priority: int = 0,
        traceparent: str | None = None,
        start_by: datetime | None = None,
        deadline: datetime | None = None,
        timeout: timedelta | None = None,
    ) -> NewTask:
        """The checked row :meth:`create` inserts."""
        owner = check.label(owner, "owner")
        if owner is None and self.require_owner:
            raise InvalidTaskData("is required by this store", field="owner")
        return NewTask(
            id=new_task_id() if task_id is None else check.task_id(task_id),
            name=check.name(name),
            input=check.json_object(input, "input", self.max_payload_bytes),
            owner=owner,
            context_id=check.label(context_id, "context_id"),
            ttl=check.ttl(ttl),
            metadata=check.json_object(metadata, "metadata", self.max_payload_bytes),
            job=check.flag(job, "job"),
            run_at=check.run_at(run_at, job=job is True),
            unique_key=check.label(unique_key, "unique_key"),
            priority=check.priority(priority),
            traceparent=check.traceparent(traceparent),
            start_by=check.instant(start_by, "start_by"),
            deadline_at=check.instant(deadline, "deadline"),
            run_timeout=check.timeout(timeout),
        )

    def get(self, task_id: str, *, owner: Owner = ANY) -> Task:
        """The task, as last committed.

        Raises:
            TaskNotFound: no such task, or it belongs to another owner.
        """
        task = self._fetch(check.task_id(task_id), self._scope(owner))
        if task is None:
            raise TaskNotFound(task_id)
        return task

    def list(
        self,
        *,
        owner: Owner = ANY,
        status: TaskStatus | str | Iterable[TaskStatus | str] | None = None,
        context_id: str | None = None,
        name: str | None = None,
        updated_after: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        parent_id: str | Unset | None = UNSET,
    ) -> TaskPage:
        """One page of tasks, newest first, filtered inside the query.

        ``created_after`` and ``created_before`` keep the tasks created in that
        span (after the one, strictly before the other). ``parent_id``: a task's
        id lists its children (:meth:`TaskContext.spawn
        <queuestore.TaskContext.spawn>`), None lists root tasks only.

        Raises:
            InvalidCursor: ``cursor`` is malformed, altered, or from other filters.
            InvalidTaskData: a bad filter or ``limit`` outside 1..1000.
        """
        query = self._list_query(
            owner,
            status=status,
            context_id=context_id,
            name=name,
            updated_after=updated_after,
            created_after=created_after,
            created_before=created_before,
            parent_id=parent_id,
        )
        limit = check.limit(limit)
        after = None if cursor is None else self._cursors.decode(cursor, query.fingerprint())
        if query.matches_nothing:
            return TaskPage(tasks=[])
        rows = self._page(query, after, limit + 1)
        if len(rows) <= limit:
            return TaskPage(tasks=rows)
        last = rows[limit - 1]
        key = CursorKey(last.created_at, last.id)
        return TaskPage(
            tasks=rows[:limit], next_cursor=self._cursors.encode(key, query.fingerprint())
        )

    def count(
        self,
        *,
        owner: Owner = ANY,
        status: TaskStatus | str | Iterable[TaskStatus | str] | None = None,
        context_id: str | None = None,
        name: str | None = None,
        updated_after: datetime | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        parent_id: str | Unset | None = UNSET,
    ) -> int:
        """How many tasks :meth:`list` with the same filters walks through, in one query.

        Raises:
            InvalidTaskData: a bad filter.
        """
        query = self._list_query(
            owner,
            status=status,
            context_id=context_id,
            name=name,
            updated_after=updated_after,
            created_after=created_after,
            created_before=created_before,
            parent_id=parent_id,
        )
        if query.matches_nothing:
            return 0
        return self._count(query)

    def cursor_after(
        self,
        created_at: datetime,
        task_id: str,
        *,
        owner: Owner = ANY,
        status: TaskStatus | str | Iterable[TaskStatus | str] | None = None,
        context_id: str | None = None,
        name: str | None = None,
        updated_after: datetime | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        parent_id: str | Unset | None = UNSET,
    ) -> str:
        """The cursor of the listing with these filters whose next page starts after a task.

        For protocol adapters whose page tokens carry the position themselves:
        ``(created_at, task_id)`` is the last task of the previous page. The
        owner filter still applies to every page, so a forged position shows
        nothing the caller could not list anyway.

        Raises:
            InvalidTaskData: a bad filter, id or naive ``created_at``.
        """
        query = self._list_query(
            owner,
            status=status,
            context_id=context_id,
            name=name,
            updated_after=updated_after,
            created_after=created_after,
            created_before=created_before,
            parent_id=parent_id,
        )
        key = CursorKey(check.aware(created_at, "created_at"), check.task_id(task_id))
        return self._cursors.encode(key, query.fingerprint())

    def _list_query(
        self,
        owner: Owner,
        *,
        status: TaskStatus | str | Iterable[TaskStatus | str] | None,
        context_id: str | None,
        name: str | None,
        updated_after: datetime | None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        parent_id: str | Unset | None = UNSET,
    ) -> ListQuery:
        return ListQuery(
            scope=self._scope(owner),
            statuses=_statuses(status),
            context_id=check.label(context_id, "context_id"),
            name=None if name is None else check.name(name),
            updated_after=(
                None if updated_after is None else check.aware(updated_after, "updated_after")
            ),
            created_after=(
                None if created_after is None else check.aware(created_after, "created_after")
            ),
            created_before=(
                None if created_before is None else check.aware(created_before, "created_before")
            ),
            parent=(
                parent_id
                if parent_id is UNSET or parent_id is None
                else check.task_id(parent_id, "parent_id")
            ),
        )

    def iterate(self, **filters: Any) -> Iterator[Task]:
        """Every task matching ``filters`` (as for :meth:`list`), page by page."""
        cursor: str | None = None
        while True:
            page = self.list(**filters, cursor=cursor)
            yield from page.tasks
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def steps(self, task_id: str, *, owner: Owner = ANY) -> builtins.list[Step]:
        """The named steps (and durable sleeps) the task's runs recorded, oldest first.

        Each has its status, result or error, timing, and the run (``attempt``)
        that recorded it. Owner-scoped as :meth:`get`.

        Raises:
            TaskNotFound: no such task, or it belongs to another owner.
        """
        steps = self._steps(check.task_id(task_id), self._scope(owner))
        if steps is None:
            raise TaskNotFound(task_id)
        return steps

    def update(
        self,
        task_id: str,
        *,
        status: TaskStatus | str | None = None,
        status_message: str | Unset | None = UNSET,
        progress: float | Unset | None = UNSET,
        result: Any = UNSET,
        error: TaskError | Mapping[str, Any] | Unset | None = UNSET,
        metadata: Mapping[str, Any] | Unset = UNSET,
        expected_version: int | None = None,
        owner: Owner = ANY,
        worker_id: str | Unset = UNSET,
    ) -> Task:
        """Change a live task, as one compare-and-set write.

        Args:
            status: the new status; it must be reachable from the current one.
            expected_version: fail with TaskConflict unless the task is at this version.
            worker_id: fence the write to the worker holding the lease.

        Raises:
            InvalidTransition: the task is terminal or the status is not reachable.
            TaskConflict: ``expected_version`` is stale.
            LeaseLost: ``worker_id`` no longer holds the task.
            TaskNotFound: no such task visible to ``owner``.
        """
        task_id = check.task_id(task_id)
        values = self._checked_values(status_message, progress, result, error)
        if metadata is not UNSET:
            values["metadata"] = check.json_object(metadata, "metadata", self.max_payload_bytes)
        if expected_version is not None:
            check.positive_int(expected_version, "expected_version")
        if worker_id is not UNSET:
            check.worker_id(worker_id)
        target = None if status is None else check.status(status)
        write = self._transition(
            self._scope(owner),
            target,
            values,
            expected_version=expected_version,
            fence=worker_id,
        )
        return self._apply(task_id, write)

    def add_artifact(
        self,
        task_id: str,
        artifact: Artifact | Mapping[str, Any],
        *,
        append: bool = False,
        owner: Owner = ANY,
        worker_id: str | Unset = UNSET,
    ) -> Task:
        """Add an artifact to a live task, or replace the one with the same id.

        Args:
            append: extend the parts of the artifact with the same id (streamed
                chunks) instead of replacing it.

        Raises:
            InvalidTransition: the task is terminal.
            LeaseLost: ``worker_id`` no longer holds the task.
            TaskNotFound: no such task visible to ``owner``.
        """
        task_id = check.task_id(task_id)
        changes = [(check.artifact(artifact, self.max_payload_bytes), append)]
        if worker_id is not UNSET:
            check.worker_id(worker_id)
        return self._read_modify_write(
            task_id,
            Write(scope=self._scope(owner), from_statuses=LIVE, fence=worker_id),
            lambda task: {"artifacts": self._merged(task.artifacts, changes)},
        )

    def provide_input(self, task_id: str, answer: Any, *, owner: Owner = ANY) -> Task:
        """Answer a task waiting in ``input_required`` (or ``auth_required``).

        The answer is appended to ``answers`` and the task goes back to
        ``working``, unclaimed, for its job to be published again.

        Raises:
            InvalidTransition: the task is not waiting for input.
            TaskNotFound: no such task visible to ``owner``.
        """
        task_id = check.task_id(task_id)
        answer = check.json_value(answer, "answer", self.max_payload_bytes)
        resumed = Write(
            scope=self._scope(owner),
            from_statuses=PARKED,
            status=TaskStatus.WORKING,
            release=True,
            mark_started=True,
        )
        return self._read_modify_write(
            task_id,
            resumed,
            lambda task: {"answers": [*task.answers, answer], "status_message": None},
        )

    def cancel(self, task_id: str, *, owner: Owner = ANY, reason: str | None = None) -> Task:
        """Mark a live task ``cancelled``; later writes by its worker are refused.

        Its live child tasks (and theirs) are cancelled with it.

        Raises:
            InvalidTransition: the task is already terminal.
            TaskNotFound: no such task visible to ``owner``.
        """
        return self.cancel_tree(task_id, owner=owner, reason=reason)[0]

    def cancel_tree(
        self, task_id: str, *, owner: Owner = ANY, reason: str | None = None
    ) -> builtins.list[Task]:
        """:meth:`cancel`, returning the task and then every live descendant it cancelled.

        Raises:
            InvalidTransition: the task is already terminal.
            TaskNotFound: no such task visible to ``owner``.
        """
        values = {} if reason is None else {"status_message": check.message(reason, "reason")}
        write = self._transition(self._scope(owner), TaskStatus.CANCELLED, values)
        task = self._apply(check.task_id(task_id), write, cascade=False)
        return [task, *self._cascade(task)]

    def delete(self, task_id: str, *, owner: Owner = ANY) -> None:
        """Delete the task; nothing happens if it is absent or not visible to ``owner``."""
        self._delete(check.task_id(task_id), self._scope(owner))

    def cleanup(
        self, ttl: timedelta, *, batch_size: int = 1000, now: datetime | None = None
    ) -> int:
        """Delete terminal tasks that expired; never a live one.

        A task expires ``ttl`` after it finished, or after its own ``ttl`` when
        it was created with one. Deletes run in batches of ``batch_size``, each
        its own short transaction.

        Returns:
            How many tasks were deleted.
        """
        checked_ttl = check.ttl(ttl)
        if checked_ttl is None:
            raise InvalidTaskData("is required: how long finished tasks are kept", field="ttl")
        batch_size = check.positive_int(batch_size, "batch_size")
        now = None if now is None else check.aware(now, "now")
        total = 0
        while True:
            deleted = self._delete_expired(checked_ttl, now, batch_size)
            if deleted:
                for observer in self._observers:
                    observer.removed(deleted)
            total += deleted
            if deleted < batch_size:
                return total

    def status_counts(self) -> dict[TaskStatus, int]:
        """How many tasks are in each status, every owner's (zero for an empty status).

        One aggregate query: for operators and metrics, never for callers.
        """
        counts = self._count_by_status()
        return {status: counts.get(status, 0) for status in TaskStatus}

    def unpublished_count(self, older_than: timedelta = timedelta(0)) -> int:
        """How many live tasks last written ``older_than`` ago or earlier were never published.

        With ``older_than`` set to the queue's ``publish_grace`` (as the
        metrics do) these are the sweep's work. With less it also
        counts tasks published moments ago and not claimed yet: ``submit``
        records a publication half of ``publish_grace`` late, and only for a
        task no worker claimed meanwhile.
        """
        return self._count_unpublished(check.ttl(older_than) or timedelta(0))

    def watch(self, *, owner: Owner = ANY, task_ids: Iterable[str] | None = None) -> Watch:
        """The changes to the tasks ``owner`` may see (only ``task_ids`` when given).

        Open it as a context manager; while it is open, every committed write to
        those tasks is delivered as a :class:`Task` (see :mod:`queuestore.core.watch`
        for the guarantee). One reader per store and process serves every watch.

        Raises:
            InvalidTaskData: a malformed id in ``task_ids``.
        """
        ids = None if task_ids is None else [check.task_id(task_id) for task_id in task_ids]
        return Watch(self._feed, self._scope(owner), ids)

    @asynccontextmanager
    async def open_async(
        self, *, max_connections: int = 4, timeout: float = 5.0
    ) -> AsyncIterator[None]:
        """Run :meth:`run_async` calls on the running event loop's own connections.

        Outside this block :meth:`run_async` runs the sync code in a worker
        thread. Inside it, on the loop that opened it, a store whose database
        has an async driver runs it on the loop instead (:class:`SqlTaskStore`
        on PostgreSQL, see :mod:`queuestore.store.sql.executor`): no thread hop. Open it
        where the loop lives as long as the server, in its lifespan
        (``A2AServer`` and the HTTP app do); blocks may nest, and blocks on one
        loop share one pool. Other stores and other loops keep the thread.

        Args:
            max_connections: the most connections the loop's calls hold open.
            timeout: seconds a call waits for one of them when all are busy.

        Raises:
            ValueError: ``max_connections`` below 1 or ``timeout`` not positive.
        """
        if max_connections < 1:
            raise ValueError(f"max_connections must be 1 or more, not {max_connections}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout}")
        yield

    async def run_async(self, call: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Await ``call(*args, **kwargs)``, sync code of this store's, without blocking the loop.

        In a worker thread, or on the loop's own connections inside
        :meth:`open_async`. ``call`` may do anything the store's verbs do; what
        else it blocks on goes through :func:`queuestore.store.sql.blocking`.
        """
        return await asyncio.to_thread(call, *args, **kwargs)

    def wait(self, task_id: str, *, timeout: float, owner: Owner = ANY) -> Task:
        """Block until the task is terminal or ``timeout`` seconds pass; return it then.

        Raises:
            TaskNotFound: no such task visible to ``owner`` (or it was deleted).
        """
        deadline = time.monotonic() + timeout
        check.task_id(task_id)
        with self.subscribe() as listen:
            task = self.get(task_id, owner=owner)
            delay = 0.005
            while not task.is_terminal:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                pause_until = time.monotonic() + min(delay, remaining)
                while (left := pause_until - time.monotonic()) > 0:
                    if any(changed == task_id for changed, _ in listen(left)):
                        break
                delay = min(delay * 2, 0.5)
                task = self.get(task_id, owner=owner)
        return task


def _statuses(
    value: TaskStatus | str | Iterable[TaskStatus | str] | None,
) -> frozenset[TaskStatus] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        return frozenset({check.status(value)})
    return frozenset(check.status(item) for item in value)
