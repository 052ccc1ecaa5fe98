"""A thread-safe in-memory store, for tests and single-process tools."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from queuestore.core.callbacks import Callback, Delivery, DeliveryState, event_id, snapshot
from queuestore.core.concurrency import ConcurrencyLimits
from queuestore.core.cursor import CursorKey
from queuestore.core.errors import InvalidTaskData, TaskConflict
from queuestore.core.flow import FlowControl, Pause, PauseKind, target
from queuestore.core.models import TERMINAL, Step, StepStatus, Task, TaskStatus
from queuestore.core.owner import OwnerScope
from queuestore.core.rollup import (
    ALL_JOBS,
    BACKLOG,
    DEAD,
    JOB_STEP,
    MINUTE,
    NO_DURATION,
    UNKNOWN_JOB,
    CurrentCount,
    SeriesCount,
    changes_of,
    floor_to,
    in_steps,
)
from queuestore.core.schedules import Schedule
from queuestore.core.watch import Listener, StatusChange
from queuestore.core.workers import Worker
from queuestore.store.backend import (
    ENDS_ITS_CHILDREN,
    UNSET,
    DeadlineKind,
    ListQuery,
    NewChild,
    NewTask,
    StepOutcome,
    SweepFilter,
    Write,
    publish_order,
)
from queuestore.store.base import TaskStore
from queuestore.store.deliveries import Outgoing, Settlement, catch_up
from queuestore.store.pending import is_pending

_TICK = timedelta(microseconds=1)
"""What separates the timestamps of children spawned together, to keep their order."""


class InMemoryTaskStore(TaskStore):
    """Keeps tasks in a dict behind one lock; everything is lost with the process.

    It follows exactly the same rules as the SQL store (they live in
    :class:`TaskStore`), so users can test their jobs without a database.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._tasks: dict[str, Task] = {}
        self._expires: dict[str, datetime] = {}
        self._published: dict[str, datetime] = {}
        self._records: set[str] = set()  # created with job=False: never published
        # Reentrant: a claim within limits counts and writes under the one lock.
        self._changed = threading.Condition(threading.RLock())
        self._listeners: list[list[StatusChange]] = []
        # Push: each task's callbacks by id, with their keys; the deliveries by id.
        self._callbacks_of: dict[str, dict[str, tuple[str, Callback]]] = {}
        self._delivery_rows: dict[int, tuple[str, Delivery]] = {}
        # The rollup, counted as the SQL stores' triggers count it (core.rollup's rule).
        self._counts: Counter[tuple[TaskStatus, str, str | None]] = Counter()
        self._series: Counter[tuple[datetime, str, str, int]] = Counter()
        self._worker_rows: dict[str, Worker] = {}
        # Each task's named steps by name, in the order they were first recorded.
        self._steps_of: dict[str, dict[str, Step]] = {}
        self._schedule_rows: dict[str, Schedule] = {}
        # Flow control: the starts rate limits count (bucket, until, cost), each
        # bucket's last turn given to a waiting task, and the pauses by target.
        self._starts: list[tuple[str, datetime, int]] = []
        self._wakes: dict[str, datetime] = {}
        self._pause_rows: dict[str, Pause] = {}

    @staticmethod
    def _now() -> datetime:
        return datetime.now(UTC)

    def _insert(self, new: NewTask) -> tuple[Task, bool]:
        with self._changed:
            return self._inserted(new)

    def _inserted(self, new: NewTask) -> tuple[Task, bool]:
        """:meth:`_insert`, the lock held."""
        holder = self._holding(new.owner, new.unique_key)
        if holder is not None and holder.id != new.id:
            return holder, False
        if new.id in self._tasks:
            raise TaskConflict(f"task id {new.id!r} is taken", task_id=new.id)
        task = new.stamped(self._now())
        self._tasks[task.id] = task
        self._roll(None, task)
        if not new.job:
            self._records.add(task.id)
        return task, True

    def _insert_many(self, news: Sequence[NewTask]) -> list[tuple[Task, bool]]:
        with self._changed:
            for new in news:
                holder = self._holding(new.owner, new.unique_key)
                if new.id in self._tasks and (holder is None or holder.id == new.id):
                    raise TaskConflict(f"task id {new.id!r} is taken", task_id=new.id)
            return [self._inserted(new) for new in news]

    def _holding(self, owner: str | None, unique_key: str | None) -> Task | None:
        """The live task of ``owner`` that holds ``unique_key``, if any (the lock held)."""
        if unique_key is None:
            return None
        for task in self._tasks.values():
            if task.unique_key == unique_key and task.owner == owner and not task.is_terminal:
                return task
        return None

    def _fetch(self, task_id: str, scope: OwnerScope) -> Task | None:
        with self._changed:
            task = self._tasks.get(task_id)
        return task if task is not None and scope.admits(task.owner) else None

    def _write(self, task_id: str, write: Write) -> Task | None:
        with self._changed:
            task = self._tasks.get(task_id)
            if task is None or not _matches(task, write, self._now()):
                return None
            now = self._now()
            update: dict[str, Any] = {
                **write.values,
                "updated_at": now,
                "version": task.version + 1,
            }
            if write.status is not None:
                update["status"] = write.status
            if write.claim is not None:
                worker_id, lease = write.claim
                update |= {"worker_id": worker_id, "lease_expires_at": now + lease}
                update["attempt"] = task.attempt + 1
                update["run_deadline_at"] = _run_deadline(task, write, now)
            if write.release:
                update |= {"worker_id": None, "lease_expires_at": None}
                self._published.pop(task_id, None)
            if write.hold:
                update["lease_expires_at"] = None
                self._published.pop(task_id, None)
            if write.mark_started and task.started_at is None:
                update["started_at"] = now
            if write.mark_finished:
                update["finished_at"] = now
                if task.ttl is not None:
                    self._expires[task_id] = now + task.ttl
            written = task.model_copy(update=update)
            self._tasks[task_id] = written
            self._written(task, written, write.status)
            return written

    def _record_step(self, task_id: str, worker_id: str, outcome: StepOutcome) -> Step | None:
        with self._changed:
            task = self._tasks.get(task_id)
            if task is None or task.status is not TaskStatus.WORKING or task.worker_id != worker_id:
                return None
            steps = self._steps_of.setdefault(task_id, {})
            old = steps.get(outcome.name)
            if old is not None and (old.status is StepStatus.COMPLETED or old.kind != outcome.kind):
                return None
            now = self._now()
            step = Step(
                name=outcome.name,
                kind=outcome.kind,
                status=outcome.status,
                result=outcome.result,
                error=outcome.error,
                attempt=task.attempt,
                tries=1 if old is None else old.tries + 1,
                started_at=now - outcome.elapsed,
                finished_at=now,
            )
            steps[outcome.name] = step
            return step

    def _spawn(
        self, parent_id: str, worker_id: str, children: Sequence[NewChild], max_depth: int
    ) -> list[tuple[Task, bool]] | None:
        with self._changed:
            parent = self._tasks.get(parent_id)
            if (
                parent is None
                or parent.status is not TaskStatus.WORKING
                or parent.worker_id != worker_id
                or parent.depth >= max_depth
            ):
                return None
            held = {t.spawn_key: t for t in self._tasks.values() if t.parent_id == parent_id}
            for new in children:
                holder = held.get(new.spawn_key)
                if holder is not None and holder.name != new.name:
                    raise _key_of_another_job(new, holder)
            now = self._now()
            spawned = []
            for index, new in enumerate(children):
                holder = held.get(new.spawn_key)
                if holder is not None:
                    spawned.append((holder, False))
                    continue
                task = _child(parent, new, now + index * _TICK)
                self._tasks[task.id] = task
                spawned.append((task, True))
            return spawned

    def _live_waited(self, parent_id: str, waits_on: Sequence[str]) -> bool:
        """Whether a child of ``parent_id`` among ``waits_on`` (``[]``: any) is live (locked)."""
        return any(
            task.parent_id == parent_id
            and not task.is_terminal
            and (not waits_on or task.id in waits_on)
            for task in self._tasks.values()
        )

    def _park(
        self, task_id: str, worker_id: str, message: str | None, waits_on: Sequence[str]
    ) -> Task | None:
        with self._changed:
            task = self._tasks.get(task_id)
            if task is None or task.status is not TaskStatus.WORKING or task.worker_id != worker_id:
                return None
            if not self._live_waited(task_id, waits_on):
                return None
            return self._rewrite(
                task,
                waits_on=list(waits_on),
                run_at=None,
                status_message=message,
                suspends=task.suspends + 1,
                worker_id=None,
                lease_expires_at=None,
            )

    def _rewrite(self, task: Task, **update: Any) -> Task:
        """Write ``update`` to a task, at a new version, unpublished (the lock held)."""
        self._published.pop(task.id, None)
        written = task.model_copy(
            update={**update, "updated_at": self._now(), "version": task.version + 1}
        )
        self._tasks[task.id] = written
        self._written(task, written, update.get("status"))
        return written

    def _wake(self, task_ids: Sequence[str] | None, limit: int) -> list[Task]:
        with self._changed:
            parked = sorted(
                (
                    task
                    for task in self._tasks.values()
                    if task.waits_on is not None
                    and task.worker_id is None
                    and task.status is TaskStatus.WORKING
                    and (task_ids is None or task.id in task_ids)
                    and not self._live_waited(task.id, task.waits_on)
                ),
                key=lambda task: task.updated_at,
            )
            return [
                self._rewrite(task, waits_on=None, status_message=None) for task in parked[:limit]
            ]

    def _cancel_descendants(self, task_id: str, reason: str) -> list[Task]:
        with self._changed:
            cancelled: list[Task] = []
            parents = [task_id]
            while parents:
                parent = parents.pop()
                for task in [t for t in self._tasks.values() if t.parent_id == parent]:
                    parents.append(task.id)
                    if not task.is_terminal:
                        cancelled.append(self._cancelled(task, reason))
            return cancelled

    def _cancelled(self, task: Task, reason: str) -> Task:
        """``task`` cancelled with ``reason`` by a cascade (the lock held)."""
        now = self._now()
        if task.ttl is not None:
            self._expires[task.id] = now + task.ttl
        return self._rewrite(
            task,
            status=TaskStatus.CANCELLED,
            status_message=reason,
            finished_at=now,
            worker_id=None,
            lease_expires_at=None,
        )

    def _orphans(self, limit: int) -> list[Task]:
        with self._changed:
            orphans = [
                task
                for task in self._tasks.values()
                if task.parent_id is not None
                and not task.is_terminal
                and (parent := self._tasks.get(task.parent_id)) is not None
                and parent.status in ENDS_ITS_CHILDREN
            ]
        return sorted(orphans, key=lambda task: task.created_at)[:limit]

    def _past_deadlines(
        self, kind: DeadlineKind, now: datetime | None, limit: int, ago: timedelta = timedelta(0)
    ) -> list[Task]:
        before = (now or self._now()) - ago
        with self._changed:
            due = [
                (when, task)
                for task in self._tasks.values()
                if (when := _deadline_of(task, kind)) is not None and when <= before
            ]
        return [task for _, task in sorted(due, key=lambda pair: pair[0])][:limit]

    def _release_held(self, task_id: str, worker_id: str) -> bool:
        with self._changed:
            task = self._tasks.get(task_id)
            if task is None or not task.is_terminal or task.worker_id != worker_id:
                return False
            released = task.model_copy(update={"worker_id": None})
            self._tasks[task_id] = released
            return True

    def _steps(self, task_id: str, scope: OwnerScope) -> list[Step] | None:
        with self._changed:
            task = self._tasks.get(task_id)
            if task is None or not scope.admits(task.owner):
                return None
            steps = list(self._steps_of.get(task_id, {}).values())
        return sorted(steps, key=lambda step: (step.finished_at, step.name))

    def _page(self, query: ListQuery, after: CursorKey | None, limit: int) -> list[Task]:
        with self._changed:
            tasks = [task for task in self._tasks.values() if _listed(task, query)]
        tasks.sort(key=lambda task: (task.created_at, task.id), reverse=True)
        if after is not None:
            tasks = [t for t in tasks if (t.created_at, t.id) < (after.created_at, after.task_id)]
        return tasks[:limit]

    def _count(self, query: ListQuery) -> int:
        with self._changed:
            return sum(1 for task in self._tasks.values() if _listed(task, query))

    def _delete(self, task_id: str, scope: OwnerScope) -> None:
        with self._changed:
            task = self._tasks.get(task_id)
            if task is not None and scope.admits(task.owner):
                self._forget(task_id)
                self._changed.notify_all()

    def _forget(self, task_id: str) -> None:
        self._roll(self._tasks.pop(task_id), None)
        self._steps_of.pop(task_id, None)
        self._callbacks_of.pop(task_id, None)
        for delivery_id in [i for i, (_, d) in self._delivery_rows.items() if d.task_id == task_id]:
            del self._delivery_rows[delivery_id]
        self._expires.pop(task_id, None)
        self._published.pop(task_id, None)
        self._records.discard(task_id)

    def _delete_expired(self, ttl: timedelta, now: datetime | None, batch_size: int) -> int:
        now = now or self._now()
        with self._changed:
            expired = [
                task.id
                for task in self._tasks.values()
                if task.status in TERMINAL
                and task.finished_at is not None
                and self._expires.get(task.id, task.finished_at + ttl) <= now
            ][:batch_size]
            for task_id in expired:
                self._forget(task_id)
            return len(expired)

    def _extend_lease(self, task_id: str, worker_id: str, lease: timedelta) -> Task | None:
        with self._changed:
            task = self._tasks.get(task_id)
            if task is None or task.status != TaskStatus.WORKING or task.worker_id != worker_id:
                return None
            task = task.model_copy(update={"lease_expires_at": self._now() + lease})
            self._tasks[task_id] = task
            return task

    def _expired_leases(self, now: datetime | None, limit: int) -> list[Task]:
        now = now or self._now()
        with self._changed:
            return [
                task
                for task in self._tasks.values()
                if task.status == TaskStatus.WORKING
                and task.lease_expires_at is not None
                and task.lease_expires_at < now
            ][:limit]

    def _mark_published(self, marks: Sequence[tuple[str, int | None]]) -> None:
        with self._changed:
            now = self._now()
            for task_id, version in marks:
                task = self._tasks.get(task_id)
                if task is not None and version in (None, task.version):
                    self._published[task_id] = now

    def _claim_within(
        self,
        task_id: str,
        write: Write,
        limits: ConcurrencyLimits | None,
        flow: FlowControl | None = None,
    ) -> Task | None:
        with self._changed:  # the count and the claim under one (reentrant) lock
            task = self._tasks.get(task_id)
            if task is None or (limits and limits.slots(self._running_counts()).full(task)):
                return None
            bucket = None
            if flow is not None:
                if self._held_back(task, flow):
                    return None
                bucket = flow.bucket_of(task)
            claimed = self._write(task_id, write)
            if claimed is not None and bucket is not None and flow is not None:
                period = flow.rates[task.name].per
                self._starts.append((bucket, self._now() + period, flow.cost_of(task)))
            return claimed

    def _held_back(self, task: Task, flow: FlowControl) -> bool:
        """Whether a pause or the rate limit keeps ``task`` from starting now (the lock held)."""
        keys = [target(PauseKind.JOB, task.name)]
        if task.owner is not None:
            keys.append(target(PauseKind.OWNER, task.owner))
        key = flow.key_of(task)
        if key is not None:
            keys.append(target(PauseKind.KEY, key))
        if self._paused_until(keys)[0]:
            return True
        bucket = flow.bucket_of(task)
        if bucket is None:
            return False
        used = sum(cost for _, cost in self._rate_starts(bucket))
        return used + flow.cost_of(task) > flow.rates[task.name].limit

    # -- flow control --------------------------------------------------------

    def _pause(
        self, key: str, kind: PauseKind, value: str, until: datetime | None, reason: str | None
    ) -> Pause:
        with self._changed:
            now = self._now()
            kept = self._pause_rows.get(key)
            if kept is not None and (kept.until is None or kept.until > now):
                until = None if kept.until is None or until is None else max(kept.until, until)
                reason = reason or kept.reason
            self._pause_rows[key] = Pause(kind, value, until, reason, now)
            return self._pause_rows[key]

    def _resume(self, key: str) -> bool:
        with self._changed:
            return self._pause_rows.pop(key, None) is not None

    def _pauses(self) -> list[Pause]:
        now = self._now()
        with self._changed:
            rows = sorted(self._pause_rows.items())
        return [pause for _, pause in rows if pause.until is None or pause.until > now]

    def _paused_until(self, keys: Sequence[str]) -> tuple[bool, datetime | None]:
        now = self._now()
        with self._changed:
            found = [self._pause_rows[key] for key in keys if key in self._pause_rows]
        found = [pause for pause in found if pause.until is None or pause.until > now]
        if not found:
            return False, None
        ends = [pause.until for pause in found]
        return True, None if None in ends else max(end for end in ends if end is not None)

    def _rate_starts(self, bucket: str) -> list[tuple[datetime, int]]:
        now = self._now()
        with self._changed:
            return sorted((u, cost) for b, u, cost in self._starts if b == bucket and u > now)

    def _rate_use(self) -> dict[str, tuple[int, datetime | None]]:
        now = self._now()
        counted: dict[str, tuple[int, datetime | None]] = {}
        with self._changed:
            for bucket, until, cost in self._starts:
                if until > now:
                    counted[bucket] = (counted.get(bucket, (0, None))[0] + cost, None)
            for bucket, wake in self._wakes.items():
                if wake > now:
                    counted[bucket] = (counted.get(bucket, (0, None))[0], wake)
        return counted

    def _reserve_wake(self, bucket: str, free_at: datetime, step: timedelta) -> datetime:
        with self._changed:
            last = self._wakes.get(bucket)
            wake = free_at if last is None else max(free_at, last + step)
            self._wakes[bucket] = wake
            return wake

    def _prune_flow(self) -> int:
        now = self._now()
        with self._changed:
            before = len(self._starts) + len(self._pause_rows) + len(self._wakes)
            self._starts = [row for row in self._starts if row[1] > now]
            self._wakes = {b: w for b, w in self._wakes.items() if w > now}
            self._pause_rows = {
                k: p for k, p in self._pause_rows.items() if p.until is None or p.until > now
            }
            return before - len(self._starts) - len(self._pause_rows) - len(self._wakes)

    def _written(self, before: Task, after: Task, status: TaskStatus | None) -> None:
        """Announce a committed write, and commit its deliveries (the lock held)."""
        self._roll(before, after)
        if after.status != before.status:
            self._enqueue(after)
        if status is not None:
            for inbox in self._listeners:
                inbox.append((after.id, status))
        self._changed.notify_all()

    # -- push ---------------------------------------------------------------

    def _enqueue(self, task: Task, only: str | None = None) -> None:
        """Commit a delivery of ``task``'s status to each callback that wants it (the lock held)."""
        for key, callback in self._callbacks_of.get(task.id, {}).values():
            mine = callback.owner == task.owner  # as the trigger's condition
            if (only is None or key == only) and mine and callback.wants(task.status):
                delivery_id = max(self._delivery_rows, default=0) + 1
                delivery = Delivery(
                    id=delivery_id,
                    event_id=event_id(key, task.version),
                    task_id=task.id,
                    callback_id=callback.id,
                    url=callback.url,
                    status=task.status,
                    version=task.version,
                    created_at=task.updated_at,
                    next_try_at=task.updated_at,
                    task=snapshot(task),
                )
                self._delivery_rows[delivery_id] = (key, delivery)
        self._changed.notify_all()

    def _add_callback(
        self, key: str, callback: Callback, scope: OwnerScope, task_may_follow: bool
    ) -> Callback | None:
        with self._changed:
            task = self._tasks.get(callback.task_id)
            if task is None and not task_may_follow:
                return None
            if task is not None and not scope.admits(task.owner):
                return None
            if task is not None:
                callback = callback.model_copy(update={"owner": task.owner})
            callbacks = self._callbacks_of.setdefault(callback.task_id, {})
            replaced = callbacks.get(callback.id)
            if replaced is not None:
                key = replaced[0]
            callbacks[callback.id] = (key, callback)
            if replaced is None and task is not None and catch_up(callback, task.status):
                self._enqueue(task, only=key)
            return callback

    def _callbacks(self, task_id: str, scope: OwnerScope) -> list[Callback]:
        with self._changed:
            callbacks = [callback for _, callback in self._callbacks_of.get(task_id, {}).values()]
        return [callback for callback in callbacks if scope.admits(callback.owner)]

    def _remove_callbacks(self, task_id: str, callback_id: str | None, scope: OwnerScope) -> int:
        with self._changed:
            callbacks = self._callbacks_of.get(task_id, {})
            gone = [
                (callback.id, key)
                for key, callback in callbacks.values()
                if callback_id in (None, callback.id) and scope.admits(callback.owner)
            ]
            keys = {key for _, key in gone}
            for known, _ in gone:
                del callbacks[known]
            for delivery_id, (key, delivery) in list(self._delivery_rows.items()):
                if key in keys and delivery.state is DeliveryState.PENDING:
                    del self._delivery_rows[delivery_id]
            return len(gone)

    def _deliveries(self, task_id: str) -> list[Delivery]:
        with self._changed:
            entries = sorted(self._delivery_rows.items())
            urls = {key: c.url for key, c in self._callbacks_of.get(task_id, {}).values()}
        return [
            delivery.model_copy(update={"url": urls.get(key, delivery.url)})
            for _, (key, delivery) in entries
            if delivery.task_id == task_id
        ]

    def _revive(self, task_id: str, delivery_id: int) -> Delivery | None:
        with self._changed:
            key, delivery = self._delivery_rows.get(delivery_id, ("", None))
            if (
                delivery is None
                or delivery.task_id != task_id
                or delivery.state is not DeliveryState.DEAD
            ):
                return None
            revived = delivery.model_copy(
                update={"state": DeliveryState.PENDING, "next_try_at": self._now()}
            )
            self._delivery_rows[delivery_id] = (key, revived)
            self._changed.notify_all()
            return revived

    def _take_deliveries(self, limit: int, lease: timedelta) -> list[Outgoing]:
        with self._changed:
            now = self._now()
            heads: dict[str, tuple[int, Delivery]] = {}
            for delivery_id, (key, delivery) in sorted(self._delivery_rows.items()):
                if delivery.state is DeliveryState.PENDING and key not in heads:
                    heads[key] = (delivery_id, delivery)
            due = sorted(
                (
                    d
                    for d in heads.values()
                    if d[1].next_try_at is not None and d[1].next_try_at <= now
                ),
                key=lambda item: (item[1].next_try_at, item[0]),
            )[:limit]
            taken = []
            for delivery_id, delivery in due:
                key = self._delivery_rows[delivery_id][0]
                callback = next(
                    c for k, c in self._callbacks_of[delivery.task_id].values() if k == key
                )
                held = delivery.model_copy(
                    update={
                        "tries": delivery.tries + 1,
                        "next_try_at": now + lease,
                        "url": callback.url,
                    }
                )
                self._delivery_rows[delivery_id] = (key, held)
                taken.append(Outgoing(held, callback))
            return taken

    def _settle(self, delivery_id: int, tries: int, settlement: Settlement) -> bool:
        with self._changed:
            key, delivery = self._delivery_rows.get(delivery_id, ("", None))
            if (
                delivery is None
                or delivery.state is not DeliveryState.PENDING
                or delivery.tries != tries
            ):
                return False
            delivered = settlement.state is DeliveryState.DELIVERED
            if settlement.state is DeliveryState.DEAD:
                task = self._tasks.get(delivery.task_id)
                minute = floor_to(self._now(), MINUTE)
                name = UNKNOWN_JOB if task is None else task.name
                self._series[(minute, DEAD, name, NO_DURATION)] += 1
            if settlement.retry_at is not None:  # the callback's later ones wait behind it
                self._hold_back(key, delivery_id, settlement.retry_at)
            self._delivery_rows[delivery_id] = (
                key,
                delivery.model_copy(
                    update={
                        "state": settlement.state,
                        "response_status": settlement.response_status,
                        "last_error": None if delivered else settlement.error,
                        "next_try_at": settlement.retry_at,
                        "delivered_at": self._now() if delivered else None,
                    }
                ),
            )
            self._changed.notify_all()
            return True

    def _hold_back(self, key: str, after: int, until: datetime) -> None:
        """Make the callback's pending deliveries after ``after`` due no earlier than ``until``."""
        for delivery_id, (other_key, other) in list(self._delivery_rows.items()):
            due = other.next_try_at
            later = other_key == key and delivery_id > after
            if later and other.state is DeliveryState.PENDING and due is not None and due < until:
                held = other.model_copy(update={"next_try_at": until})
                self._delivery_rows[delivery_id] = (key, held)

    def _count_deliveries(self) -> dict[DeliveryState, int]:
        with self._changed:
            return dict(Counter(delivery.state for _, delivery in self._delivery_rows.values()))

    # -- the operator's view ----------------------------------------------

    def _roll(self, before: Task | None, after: Task | None) -> None:
        """Count a write in the rollup, and sample the backlog (the lock held)."""
        counts, series = changes_of(before, after)
        for counted, delta in counts:
            self._counts[counted] += delta
        if any(status is TaskStatus.SUBMITTED for (status, _, _), _ in counts):
            waiting = sum(n for (status, _, _), n in self._counts.items() if status == "submitted")
            self._series[(floor_to(self._now(), MINUTE), BACKLOG, ALL_JOBS, NO_DURATION)] = waiting
        for count in series:
            self._series[(count.start, count.metric, count.name, count.bucket)] += count.value

    def _fold_rollup(self) -> int:
        return 0  # counted as written

    def _prune_rollup(self, short_before: datetime, long_before: datetime) -> None:
        with self._changed:  # by minute: kept as long as the longest step
            for old in [old for old in self._series if old[0] < long_before]:
                del self._series[old]
            for zero in [zero for zero, count in self._counts.items() if not count]:
                del self._counts[zero]

    def _current_counts(self) -> list[CurrentCount]:
        with self._changed:
            return [CurrentCount(*key, count) for key, count in self._counts.items() if count]

    def _minutes(self, since: datetime) -> list[SeriesCount]:
        """The series by minute and job from ``since`` on."""
        with self._changed:
            return [SeriesCount(*key, n) for key, n in self._series.items() if key[0] >= since]

    def _series_counts(self, step: timedelta, since: datetime, *, timed: bool) -> list[SeriesCount]:
        minutes = [count for count in self._minutes(since) if (count.bucket >= 0) == timed]
        counted = [count for count in minutes if count.metric != BACKLOG]
        last: dict[datetime, SeriesCount] = {}
        for sample in sorted(count for count in minutes if count.metric == BACKLOG):
            last[floor_to(sample.start, step)] = sample._replace(start=floor_to(sample.start, step))
        return in_steps(counted, step) + list(last.values())

    def _job_counts(self, since: datetime) -> list[SeriesCount]:
        minutes = [count for count in self._minutes(since) if count.metric != BACKLOG]
        return in_steps(minutes, JOB_STEP, by_job=True, since=since)

    def _oldest_waiting(self, now: datetime) -> Task | None:
        with self._changed:
            waiting = [
                task
                for task in self._tasks.values()
                if task.status is TaskStatus.SUBMITTED
                and (task.run_at is None or task.run_at <= now)
            ]
        return min(waiting, key=lambda task: (task.updated_at, task.id), default=None)

    def _insert_schedule(self, schedule: Schedule) -> bool:
        with self._changed:
            if schedule.id in self._schedule_rows:
                return False
            self._schedule_rows[schedule.id] = schedule
            return True

    def _fetch_schedule(self, schedule_id: str, scope: OwnerScope) -> Schedule | None:
        with self._changed:
            found = self._schedule_rows.get(schedule_id)
        return found if found is not None and scope.admits(found.owner) else None

    def _schedules(self, scope: OwnerScope, limit: int) -> list[Schedule]:
        with self._changed:
            visible = [s for s in self._schedule_rows.values() if scope.admits(s.owner)]
        return sorted(visible, key=lambda schedule: (schedule.created_at, schedule.id))[:limit]

    def _due_schedules(self, now: datetime, limit: int) -> list[Schedule]:
        with self._changed:
            due = [
                schedule
                for schedule in self._schedule_rows.values()
                if not schedule.paused
                and schedule.next_run_at is not None
                and schedule.next_run_at <= now
            ]
        return sorted(due, key=lambda schedule: schedule.next_run_at or now)[:limit]

    def _write_schedule(
        self,
        schedule_id: str,
        version: int,
        values: Mapping[str, Any],
        news: Sequence[NewTask],
    ) -> tuple[Schedule, list[Task]] | None:
        with self._changed:
            current = self._schedule_rows.get(schedule_id)
            if current is None or current.version != version:
                return None
            if any(new.id in self._tasks for new in news):
                return None  # a task of these ticks exists: another tick made it
            update = {**values, "updated_at": self._now(), "version": version + 1}
            written = current.model_copy(update=update)
            self._schedule_rows[schedule_id] = written
            return written, [self._inserted(new)[0] for new in news]

    def _delete_schedule(self, schedule_id: str, scope: OwnerScope) -> None:
        with self._changed:
            found = self._schedule_rows.get(schedule_id)
            if found is not None and scope.admits(found.owner):
                del self._schedule_rows[schedule_id]

    def _beat_worker(self, worker: Worker) -> None:
        with self._changed:
            known = self._worker_rows.get(worker.id)
            if known is not None:
                worker = worker.model_copy(update={"started_at": known.started_at})
            self._worker_rows[worker.id] = worker

    def _workers(self) -> list[tuple[Worker, datetime]]:
        now = self._now()
        with self._changed:
            return [(worker, now) for worker in self._worker_rows.values()]

    def _forget_workers(self, worker_id: str | None, beat_before: datetime | None) -> int:
        with self._changed:
            gone = [
                known
                for known, worker in self._worker_rows.items()
                if known == worker_id or (beat_before is not None and worker.beat_at < beat_before)
            ]
            for known in gone:
                del self._worker_rows[known]
            return len(gone)

    def _running_counts(self) -> dict[tuple[str | None, str], int]:
        with self._changed:
            counts = Counter(
                (task.owner, task.name)
                for task in self._tasks.values()
                if task.worker_id is not None
            )
        return dict(counts)

    def _unpublished(
        self,
        older_than: timedelta,
        republish_after: timedelta | None,
        ahead: timedelta,
        limit: int,
        among: SweepFilter | None = None,
    ) -> list[Task]:
        now = self._now()

        def due(task: Task) -> bool:
            published = self._published.get(task.id)
            if published is not None:
                return republish_after is not None and published <= now - republish_after
            if task.run_at is None:
                return task.updated_at <= now - older_than
            return task.run_at <= now + ahead and (
                task.updated_at <= now - older_than or task.run_at > task.updated_at + ahead
            )

        with self._changed:
            pending = [
                task
                for task in self._tasks.values()
                if is_pending(task)
                and task.id not in self._records
                and due(task)
                and (among is None or among.admits(task))
            ]
        pending.sort(key=publish_order)
        return pending[:limit]

    def _count_by_status(self) -> dict[TaskStatus, int]:
        counts: dict[TaskStatus, int] = {}
        with self._changed:
            for task in self._tasks.values():
                counts[task.status] = counts.get(task.status, 0) + 1
        return counts

    def _count_unpublished(self, older_than: timedelta) -> int:
        before = self._now() - older_than
        with self._changed:
            return sum(
                1
                for task in self._tasks.values()
                if is_pending(task)
                and task.id not in self._published
                and task.id not in self._records
                and (task.updated_at if task.run_at is None else task.run_at) <= before
            )

    def _changed_since(
        self,
        since: datetime,
        after: tuple[datetime, str] | None,
        limit: int,
        seen: Mapping[str, int],
    ) -> list[Task]:
        with self._changed:
            tasks = [
                task
                for task in self._tasks.values()
                if task.updated_at > since and seen.get(task.id, 0) < task.version
            ]
        tasks.sort(key=lambda task: (task.updated_at, task.id))
        if after is not None:
            tasks = [task for task in tasks if (task.updated_at, task.id) > after]
        return tasks[:limit]

    @contextmanager
    def subscribe(self) -> Iterator[Listener]:
        inbox: list[StatusChange] = []

        def listen(seconds: float) -> list[StatusChange]:
            with self._changed:
                if not inbox:
                    self._changed.wait(seconds)
                changes = inbox.copy()
                inbox.clear()
            return changes

        with self._changed:
            self._listeners.append(inbox)
        try:
            yield listen
        finally:
            with self._changed:
                self._listeners.remove(inbox)


def _run_deadline(task: Task, claim: Write, now: datetime) -> datetime | None:
    """When a run claimed at ``now`` must end (the claim's rule, as the SQL store's)."""
    timeout = claim.timeout if task.run_timeout is None else task.run_timeout
    return _earlier_of(None if timeout is None else now + timeout, task.deadline_at)


def _deadline_of(task: Task, kind: DeadlineKind) -> datetime | None:
    """The deadline of ``kind`` that ``task`` may be past, if it is one the kind reads."""
    if kind == "start_by":
        pending = task.status is TaskStatus.SUBMITTED and task.worker_id is None
        return task.start_by if pending and task.started_at is None else None
    if kind == "deadline":
        return task.deadline_at if not task.is_terminal and task.worker_id is None else None
    held = task.worker_id is not None and (
        task.is_terminal if kind == "held" else task.status is TaskStatus.WORKING
    )
    return task.run_deadline_at if held else None


def _within_deadlines(task: Task, now: datetime) -> bool:
    """A claim's deadline terms: not past ``start_by`` unless started, nor ``deadline_at``."""
    return (task.start_by is None or task.started_at is not None or task.start_by > now) and (
        task.deadline_at is None or task.deadline_at > now
    )


def _matches(task: Task, write: Write, now: datetime) -> bool:
    return (
        (write.claim is None or task.run_at is None or task.run_at <= now)
        and (write.claim is None or (task.waits_on is None and _within_deadlines(task, now)))
        and write.scope.admits(task.owner)
        and task.status in write.from_statuses
        and (write.expected_version is None or task.version == write.expected_version)
        and (write.fence is UNSET or task.worker_id == write.fence)
        and (write.expected_lease is None or task.lease_expires_at == write.expected_lease)
        and (write.base is None or task.created_at == write.base.created_at)
    )


def _child(parent: Task, new: NewChild, now: datetime) -> Task:
    """The child ``new`` of ``parent`` as inserted at ``now``."""
    return Task(
        id=new.id,
        name=new.name,
        input=new.input,
        owner=parent.owner,
        context_id=parent.context_id if new.context_id is None else new.context_id,
        ttl=parent.ttl if new.ttl is None else new.ttl,
        metadata=new.metadata,
        created_at=now,
        updated_at=now,
        run_at=new.run_at,
        priority=parent.priority if new.priority is None else new.priority,
        parent_id=parent.id,
        spawn_key=new.spawn_key,
        depth=parent.depth + 1,
        start_by=_earlier_of(new.start_by, parent.deadline_at),
        deadline_at=_earlier_of(new.deadline_at, parent.deadline_at),
        run_timeout=new.run_timeout,
    )


def _earlier_of(given: datetime | None, bound: datetime | None) -> datetime | None:
    if given is None or bound is None:
        return bound if given is None else given
    return min(given, bound)


def _key_of_another_job(new: NewChild, holder: Task) -> InvalidTaskData:
    return InvalidTaskData(
        f"{new.spawn_key!r} is the key of child {holder.id!r} of job {holder.name!r}, "
        f"not {new.name!r}",
        field="key",
        task_id=holder.id,
    )


def _listed(task: Task, query: ListQuery) -> bool:
    return (
        (query.parent is UNSET or task.parent_id == query.parent)
        and query.scope.admits(task.owner)
        and (query.statuses is None or task.status in query.statuses)
        and (query.context_id is None or task.context_id == query.context_id)
        and (query.name is None or task.name == query.name)
        and (query.updated_after is None or task.updated_at > query.updated_after)
        and (query.created_after is None or task.created_at > query.created_after)
        and (query.created_before is None or task.created_at < query.created_before)
    )
