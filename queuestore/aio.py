"""Async twins of the store and the queue, for asyncio servers (MCP, A2A, ASGI apps).

Each call runs the one sync implementation off the event loop, so the two forms
cannot drift apart and the loop never blocks on the database or the broker: in
a worker thread, or, for the store's verbs inside the store's ``open_async``
block on PostgreSQL, in a greenlet on the loop's own async connections (see
:mod:`queuestore.store.sql.executor`). ``wait`` and the queue's verbs, which block on
notifications or the broker, keep the thread.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from queuestore.core.callbacks import Callback, CallbackRequest, Delivery
from queuestore.core.errors import InvalidTaskData
from queuestore.core.flow import FlowControl, Pause, PauseKind, RateUse
from queuestore.core.models import Artifact, Step, Task, TaskError, TaskPage, TaskStatus
from queuestore.core.owner import ANY, Owner
from queuestore.core.rollup import Rollup
from queuestore.core.schedules import Schedule
from queuestore.core.watch import AsyncWatch
from queuestore.core.workers import Worker
from queuestore.store.backend import UNSET, Unset
from queuestore.store.base import TaskStore
from queuestore.store.schedules import DEFAULT_GRACE
from queuestore.submit.queue import TaskQueue


class AsyncTaskStore:
    """The verbs of a :class:`TaskStore`, awaitable."""

    def __init__(self, store: TaskStore) -> None:
        self.sync = store

    def open(
        self, *, max_connections: int = 4, timeout: float = 5.0
    ) -> AbstractAsyncContextManager[None]:
        """The store's :meth:`~TaskStore.open_async`: ``async with astore.open(): ...``."""
        return self.sync.open_async(max_connections=max_connections, timeout=timeout)

    async def create(
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
        start_by: datetime | None = None,
        deadline: datetime | None = None,
        timeout: timedelta | None = None,
    ) -> Task:
        """See :meth:`TaskStore.create`."""
        return await self.sync.run_async(
            self.sync.create,
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
            start_by=start_by,
            deadline=deadline,
            timeout=timeout,
        )

    async def create_many(self, tasks: Iterable[Mapping[str, Any]]) -> builtins.list[Task]:
        """See :meth:`TaskStore.create_many`."""
        return await self.sync.run_async(self.sync.create_many, builtins.list(tasks))

    async def get(self, task_id: str, *, owner: Owner = ANY) -> Task:
        """See :meth:`TaskStore.get`."""
        return await self.sync.run_async(self.sync.get, task_id, owner=owner)

    async def list(
        self,
        *,
        owner: Owner = ANY,
        status: TaskStatus | str | list[TaskStatus | str] | None = None,
        context_id: str | None = None,
        name: str | None = None,
        updated_after: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        parent_id: str | Unset | None = UNSET,
    ) -> TaskPage:
        """See :meth:`TaskStore.list`."""
        return await self.sync.run_async(
            self.sync.list,
            owner=owner,
            status=status,
            context_id=context_id,
            name=name,
            updated_after=updated_after,
            limit=limit,
            cursor=cursor,
            created_after=created_after,
            created_before=created_before,
            parent_id=parent_id,
        )

    async def count(
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
        """See :meth:`TaskStore.count`."""
        return await self.sync.run_async(
            self.sync.count,
            owner=owner,
            status=status,
            context_id=context_id,
            name=name,
            updated_after=updated_after,
            created_after=created_after,
            created_before=created_before,
            parent_id=parent_id,
        )

    async def steps(self, task_id: str, *, owner: Owner = ANY) -> builtins.list[Step]:
        """See :meth:`TaskStore.steps`."""
        return await self.sync.run_async(self.sync.steps, task_id, owner=owner)

    async def update(
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
    ) -> Task:
        """See :meth:`TaskStore.update`."""
        return await self.sync.run_async(
            self.sync.update,
            task_id,
            status=status,
            status_message=status_message,
            progress=progress,
            result=result,
            error=error,
            metadata=metadata,
            expected_version=expected_version,
            owner=owner,
        )

    async def add_artifact(
        self,
        task_id: str,
        artifact: Artifact | Mapping[str, Any],
        *,
        append: bool = False,
        owner: Owner = ANY,
    ) -> Task:
        """See :meth:`TaskStore.add_artifact`."""
        return await self.sync.run_async(
            self.sync.add_artifact, task_id, artifact, append=append, owner=owner
        )

    async def cancel(self, task_id: str, *, owner: Owner = ANY, reason: str | None = None) -> Task:
        """See :meth:`TaskStore.cancel`."""
        return await self.sync.run_async(self.sync.cancel, task_id, owner=owner, reason=reason)

    async def cancel_tree(
        self, task_id: str, *, owner: Owner = ANY, reason: str | None = None
    ) -> builtins.list[Task]:
        """See :meth:`TaskStore.cancel_tree`."""
        return await self.sync.run_async(self.sync.cancel_tree, task_id, owner=owner, reason=reason)

    async def delete(self, task_id: str, *, owner: Owner = ANY) -> None:
        """See :meth:`TaskStore.delete`."""
        await self.sync.run_async(self.sync.delete, task_id, owner=owner)

    async def cleanup(self, ttl: timedelta, *, batch_size: int = 1000) -> int:
        """See :meth:`TaskStore.cleanup`."""
        return await self.sync.run_async(self.sync.cleanup, ttl, batch_size=batch_size)

    async def rollup(self, window: timedelta = timedelta(hours=1)) -> Rollup:
        """See :meth:`TaskStore.rollup`."""
        return await self.sync.run_async(self.sync.rollup, window)

    async def workers(self) -> builtins.list[Worker]:
        """See :meth:`TaskStore.workers`."""
        return await self.sync.run_async(self.sync.workers)

    async def running_counts(self) -> dict[tuple[str | None, str], int]:
        """See :meth:`TaskStore.running_counts`."""
        return await self.sync.run_async(self.sync.running_counts)

    async def pause(
        self,
        kind: PauseKind | str,
        value: str,
        *,
        until: datetime | None = None,
        reason: str | None = None,
    ) -> Pause:
        """See :meth:`TaskStore.pause`."""
        return await self.sync.run_async(
            functools.partial(self.sync.pause, kind, value, until=until, reason=reason)
        )

    async def resume(self, kind: PauseKind | str, value: str) -> bool:
        """See :meth:`TaskStore.resume`."""
        return await self.sync.run_async(self.sync.resume, kind, value)

    async def pauses(self) -> builtins.list[Pause]:
        """See :meth:`TaskStore.pauses`."""
        return await self.sync.run_async(self.sync.pauses)

    async def rate_use(self, flow: FlowControl) -> builtins.list[RateUse]:
        """See :meth:`TaskStore.rate_use`."""
        return await self.sync.run_async(self.sync.rate_use, flow)

    async def add_callback(self, task_id: str, url: str, **options: Any) -> Callback:
        """See :meth:`TaskStore.add_callback` (the URL's host is resolved in a thread)."""
        return await asyncio.to_thread(self.sync.add_callback, task_id, url, **options)

    async def callbacks(self, task_id: str, *, owner: Owner = ANY) -> builtins.list[Callback]:
        """See :meth:`TaskStore.callbacks`."""
        return await self.sync.run_async(self.sync.callbacks, task_id, owner=owner)

    async def remove_callback(
        self, task_id: str, callback_id: str | None = None, *, owner: Owner = ANY
    ) -> int:
        """See :meth:`TaskStore.remove_callback`."""
        return await self.sync.run_async(
            self.sync.remove_callback, task_id, callback_id, owner=owner
        )

    async def deliveries(self, task_id: str, *, owner: Owner = ANY) -> builtins.list[Delivery]:
        """See :meth:`TaskStore.deliveries`."""
        return await self.sync.run_async(self.sync.deliveries, task_id, owner=owner)

    async def redeliver(self, task_id: str, delivery_id: int, *, owner: Owner = ANY) -> Delivery:
        """See :meth:`TaskStore.redeliver`."""
        return await self.sync.run_async(self.sync.redeliver, task_id, delivery_id, owner=owner)

    async def get_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Schedule:
        """See :meth:`TaskStore.get_schedule`."""
        return await self.sync.run_async(self.sync.get_schedule, schedule_id, owner=owner)

    async def list_schedules(
        self, *, owner: Owner = ANY, limit: int = 100
    ) -> builtins.list[Schedule]:
        """See :meth:`TaskStore.list_schedules`."""
        return await self.sync.run_async(self.sync.list_schedules, owner=owner, limit=limit)

    async def run_schedules(self, *, grace: timedelta = DEFAULT_GRACE) -> builtins.list[Task]:
        """See :meth:`TaskStore.run_schedules` (the other schedule verbs are the queue's)."""
        return await self.sync.run_async(self.sync.run_schedules, grace=grace)

    def watch(self, *, owner: Owner = ANY, task_ids: Iterable[str] | None = None) -> AsyncWatch:
        """See :meth:`TaskStore.watch`; open it with ``async with``."""
        return AsyncWatch(self.sync.watch(owner=owner, task_ids=task_ids), self.sync.run_async)

    async def wait(self, task_id: str, *, timeout: float, owner: Owner = ANY) -> Task:
        """See :meth:`TaskStore.wait`; the waiting happens off the event loop."""
        return await asyncio.to_thread(self.sync.wait, task_id, timeout=timeout, owner=owner)


class AsyncTaskQueue:
    """The caller's verbs of a :class:`TaskQueue`, awaitable."""

    def __init__(self, queue: TaskQueue) -> None:
        self.sync = queue
        self.store = AsyncTaskStore(queue.store)

    async def submit(
        self,
        name: str,
        input: Mapping[str, Any] | None = None,
        *,
        owner: str | None = None,
        context_id: str | None = None,
        ttl: timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
        task_id: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | None = None,
        unique_key: str | None = None,
        priority: int = 0,
        callback: CallbackRequest | None = None,
        start_by: datetime | None = None,
        deadline: datetime | None = None,
        timeout: timedelta | None = None,
        connection: Any = None,
    ) -> Task:
        """See :meth:`TaskQueue.submit`; ``connection`` is an SQLAlchemy ``AsyncConnection``
        or ``AsyncSession``, whose transaction the task joins."""
        submit = functools.partial(
            self.sync.submit,
            name,
            input,
            owner=owner,
            context_id=context_id,
            ttl=ttl,
            metadata=metadata,
            task_id=task_id,
            run_at=run_at,
            delay=delay,
            unique_key=unique_key,
            priority=priority,
            callback=callback,
            start_by=start_by,
            deadline=deadline,
            timeout=timeout,
        )
        if connection is None:
            return await asyncio.to_thread(submit)
        return await _joined(connection, lambda joined: submit(connection=joined))

    async def submit_many(
        self, tasks: Iterable[Mapping[str, Any]], *, connection: Any = None
    ) -> builtins.list[Task]:
        """See :meth:`TaskQueue.submit_many`; ``connection`` as for :meth:`submit`."""
        items = builtins.list(tasks)
        if connection is None:
            return await asyncio.to_thread(self.sync.submit_many, items)
        return await _joined(
            connection, lambda joined: self.sync.submit_many(items, connection=joined)
        )

    async def cancel(self, task_id: str, *, owner: Owner = ANY, reason: str | None = None) -> Task:
        """See :meth:`TaskQueue.cancel`."""
        return await asyncio.to_thread(self.sync.cancel, task_id, owner=owner, reason=reason)

    async def resubmit(self, task_id: str, *, owner: Owner = ANY) -> Task:
        """See :meth:`TaskQueue.resubmit`."""
        return await asyncio.to_thread(self.sync.resubmit, task_id, owner=owner)

    async def resume(self, task_id: str, answer: Any, *, owner: Owner = ANY) -> Task:
        """See :meth:`TaskQueue.resume`."""
        return await asyncio.to_thread(self.sync.resume, task_id, answer, owner=owner)

    async def result(self, task_id: str, *, timeout: float, owner: Owner = ANY) -> Task:
        """See :meth:`TaskQueue.result`."""
        return await asyncio.to_thread(self.sync.result, task_id, timeout=timeout, owner=owner)

    async def create_schedule(
        self, name: str, input: Mapping[str, Any] | None = None, **options: Any
    ) -> Schedule:
        """See :meth:`TaskQueue.create_schedule`."""
        return await asyncio.to_thread(self.sync.create_schedule, name, input, **options)

    async def get_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Schedule:
        """See :meth:`TaskQueue.get_schedule`."""
        return await asyncio.to_thread(self.sync.get_schedule, schedule_id, owner=owner)

    async def list_schedules(
        self, *, owner: Owner = ANY, limit: int = 100
    ) -> builtins.list[Schedule]:
        """See :meth:`TaskQueue.list_schedules`."""
        return await asyncio.to_thread(self.sync.list_schedules, owner=owner, limit=limit)

    async def update_schedule(
        self, schedule_id: str, *, owner: Owner = ANY, **changes: Any
    ) -> Schedule:
        """See :meth:`TaskQueue.update_schedule`."""
        return await asyncio.to_thread(
            self.sync.update_schedule, schedule_id, owner=owner, **changes
        )

    async def pause_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Schedule:
        """See :meth:`TaskQueue.pause_schedule`."""
        return await asyncio.to_thread(self.sync.pause_schedule, schedule_id, owner=owner)

    async def resume_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Schedule:
        """See :meth:`TaskQueue.resume_schedule`."""
        return await asyncio.to_thread(self.sync.resume_schedule, schedule_id, owner=owner)

    async def trigger_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Task:
        """See :meth:`TaskQueue.trigger_schedule`."""
        return await asyncio.to_thread(self.sync.trigger_schedule, schedule_id, owner=owner)

    async def delete_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> None:
        """See :meth:`TaskQueue.delete_schedule`."""
        await asyncio.to_thread(self.sync.delete_schedule, schedule_id, owner=owner)


T = TypeVar("T")


async def _joined(connection: Any, call: Callable[[Any], T]) -> T:
    """``call`` with the sync side of the caller's async connection, in its transaction.

    Raises:
        InvalidTaskData: ``connection`` is not an SQLAlchemy ``AsyncConnection``
            or ``AsyncSession``.
    """
    run_sync = getattr(connection, "run_sync", None)
    if run_sync is None:
        raise InvalidTaskData(
            "must be an SQLAlchemy AsyncConnection or AsyncSession", field="connection"
        )
    result: T = await run_sync(lambda joined, *_: call(joined))
    return result
