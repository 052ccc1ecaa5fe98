"""What a backend implements (:class:`StoreBackend`), and the rules every verb applies through it.

A backend implements a handful of primitives (insert, fetch, one compare-and-set
write, a keyset page, deletes), each taking the values this module defines
(:class:`NewTask`, :class:`Write`, :class:`ListQuery`, :class:`SweepFilter`).
The rules that turn a verb into those primitives -- the transition a write
makes, owner scoping, value checks, explaining a refused compare-and-set,
retrying a lost race -- live here once, so the in-memory and SQL stores
cannot drift apart. The verbs themselves are in :mod:`queuestore.store.base`
(the callers'), :mod:`queuestore.store.runs` (a run's) and
:mod:`queuestore.store.deliveries` (push).
"""

from __future__ import annotations

import builtins
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, Final, Literal, NamedTuple

from pydantic import JsonValue

from queuestore.core import validation as check
from queuestore.core.concurrency import ConcurrencyLimits
from queuestore.core.cursor import CursorCodec, CursorKey
from queuestore.core.errors import (
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    TaskConflict,
    TaskNotFound,
)
from queuestore.core.flow import FlowControl
from queuestore.core.models import (
    LIVE,
    PARKED,
    TERMINAL,
    Artifact,
    Step,
    StepKind,
    StepStatus,
    Task,
    TaskError,
    TaskStatus,
    sources_of,
)
from queuestore.core.owner import Owner, OwnerScope
from queuestore.core.urls import UrlPolicy
from queuestore.core.watch import ChangeFeed, Listener, StatusChange
from queuestore.store.observer import StoreObserver


class _Unset(Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "queuestore.UNSET"


UNSET: Final = _Unset.UNSET
"""Marks an argument that was not given, where None is a meaningful value."""

Unset = Literal[_Unset.UNSET]

_RACE_RETRIES: Final = 50

ENDS_ITS_CHILDREN: Final = frozenset({TaskStatus.CANCELLED, TaskStatus.FAILED})
"""A task that ends in one of these cancels its live descendants; a completed one does not
(the children it did not wait for are work of their own)."""


@dataclass(frozen=True, slots=True)
class NewTask:
    """A validated task to insert; the backend stamps timestamps and version."""

    id: str
    name: str
    input: dict[str, JsonValue]
    owner: str | None
    context_id: str | None
    ttl: timedelta | None
    metadata: dict[str, JsonValue]
    job: bool
    """A Celery job runs it (the sweep publishes it); False for a record."""
    run_at: datetime | None = None
    """When the job may start; None: at once."""
    unique_key: str | None = None
    """No other live task of the owner may hold it."""
    priority: int = 0
    """From 0 to 9, the most urgent."""
    traceparent: str | None = None
    """The W3C trace context its runs continue."""
    start_by: datetime | None = None
    """Not claimed by then, it never runs."""
    deadline_at: datetime | None = None
    """Still live then, it fails."""
    run_timeout: timedelta | None = None
    """How long each run may take; None: its job's timeout."""

    def stamped(
        self,
        now: datetime,
        *,
        input: dict[str, JsonValue] | None = None,
        metadata: dict[str, JsonValue] | None = None,
    ) -> Task:
        """The task as inserted at ``now``: submitted, at version 1, nothing else set.

        Every store inserts exactly this row, so a store need not read back
        what it wrote to return it: only the clock's ``now``, and the documents
        where its database rewrites them (``input`` and ``metadata``, as
        ``SqlTaskStore`` reads them back).
        """
        stamp = now.astimezone(UTC)
        fields: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "input": self.input if input is None else input,
            "owner": self.owner,
            "context_id": self.context_id,
            "ttl": self.ttl,
            "metadata": self.metadata if metadata is None else metadata,
            "created_at": stamp,
            "updated_at": stamp,
            "run_at": self.run_at,
            "unique_key": self.unique_key,
            "priority": self.priority,
            "traceparent": self.traceparent,
            "start_by": self.start_by,
            "deadline_at": self.deadline_at,
            "run_timeout": self.run_timeout,
            "artifacts": [],
            "answers": [],
            "errors": [],
        }
        # Its fields were checked when it was made (TaskStore.create): a copy of a
        # validated task takes them as they are, in half the time of Task(...),
        # which a bulk submit pays ten thousand times.
        return _SUBMITTED.model_copy(update=fields)


_SUBMITTED: Final = Task(
    id="-", name="-", created_at=datetime.now(UTC), updated_at=datetime.now(UTC)
)
"""A new task, as :meth:`NewTask.stamped` copies it (its lists are replaced in each copy)."""


DeadlineKind = Literal["run", "held", "start_by", "deadline"]
"""Which deadline :meth:`StoreBackend._past_deadlines` reads past."""


def due_at(task: Task) -> datetime:
    """When a task became due for its message: its start time, or its last write if later."""
    if task.run_at is None or task.run_at < task.updated_at:
        return task.updated_at
    return task.run_at


def publish_order(task: Task) -> tuple[int, datetime]:
    """The order of the sweep's work: the most urgent first, then the longest due."""
    return -task.priority, due_at(task)


@dataclass(frozen=True, slots=True)
class Write:
    """One compare-and-set write, fully decided by the rules.

    The backend applies it atomically only if the row is visible in ``scope``,
    its status is in ``from_statuses``, its version equals ``expected_version``
    (when given), its ``worker_id`` equals ``fence`` (when given) and its
    ``lease_expires_at`` equals ``expected_lease`` (when given). It then
    sets ``updated_at`` from its clock and adds one to ``version``.

    Attributes:
        values: new column values keyed by ``Task`` field name.
        claim: ``(worker_id, lease)`` to take the task: sets the worker, the lease
            expiry (clock + lease) and adds one to ``attempt``.
        release: clears the worker, the lease and ``published_at``.
        mark_started: sets ``started_at`` to the clock unless already set.
        mark_finished: sets ``finished_at`` to the clock and ``expires_at`` to
            ``finished_at + ttl`` when the task has a ttl.
        base: the row at ``expected_version`` as the caller holds it (set only
            with a matching ``expected_version``). A backend may then read back
            only the columns the write sets and take the rest from it: the
            condition on the version guarantees that nothing else changed.
        limits: with ``claim``, the concurrency limits the claim must keep:
            fewer running tasks (held by a worker) of the row's owner, and of
            its job, than the limits give them.
        timeout: with ``claim``, the job's run timeout: the run must end by
            ``run_deadline_at``, the clock plus the task's own ``run_timeout``
            (else this), and no later than its ``deadline_at``. A claim is
            refused past the task's ``start_by`` (unless it started before)
            and past its ``deadline_at``.
        flow: with ``claim``, the flow control the claim must keep: no pause
            of the row's job, owner or key in force, and room in its rate.
        hold: a terminal write to a run's task that keeps ``worker_id`` and
            ``run_deadline_at``: the run may still be executing, so its slot
            stays counted until :meth:`RunVerbs.release_held` (a time-out).
    """

    scope: OwnerScope
    from_statuses: frozenset[TaskStatus]
    status: TaskStatus | None = None
    values: Mapping[str, Any] = field(default_factory=dict)
    expected_version: int | None = None
    fence: str | Unset | None = UNSET
    expected_lease: datetime | None = None
    claim: tuple[str, timedelta] | None = None
    release: bool = False
    mark_started: bool = False
    mark_finished: bool = False
    base: Task | None = None
    limits: ConcurrencyLimits | None = None
    timeout: timedelta | None = None
    hold: bool = False
    flow: FlowControl | None = None


@dataclass(frozen=True, slots=True)
class NewChild:
    """A validated child task to insert under the parent a run holds.

    What is None here comes from the parent's row: ``context_id``, ``ttl`` and
    ``priority`` are the parent's; the owner always is. ``start_by`` and
    ``deadline_at`` are bounded by the parent's ``deadline_at``.
    """

    id: str
    name: str
    input: dict[str, JsonValue]
    spawn_key: str
    """Its key among its parent's children: a second spawn with it returns this child."""
    context_id: str | None = None
    ttl: timedelta | None = None
    metadata: dict[str, JsonValue] = field(default_factory=dict)
    priority: int | None = None
    run_at: datetime | None = None
    start_by: datetime | None = None
    deadline_at: datetime | None = None
    run_timeout: timedelta | None = None


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """How a named step of a run ended, checked, for the backend to record.

    Attributes:
        name: the step's name, its key within its task.
        kind: a step or a sleep (whose ``result`` holds its wake time).
        status: completed (with ``result``) or failed (with ``error``).
        elapsed: how long its body ran; the record's ``started_at`` is that
            long before its ``finished_at`` (the store's clock).
    """

    name: str
    kind: StepKind
    status: StepStatus
    result: JsonValue = None
    error: TaskError | None = None
    elapsed: timedelta = timedelta(0)


def held_by(worker_id: str) -> Write:
    """The conditions of a run's own write: a working task its worker holds."""
    return Write(
        scope=OwnerScope(unscoped=True),
        from_statuses=frozenset({TaskStatus.WORKING}),
        fence=worker_id,
    )


class SweepFilter(NamedTuple):
    """What a sweep under concurrency limits leaves out of the unpublished tasks, or keeps to.

    Attributes:
        full_owners: owners whose running tasks are at their limit.
        full_jobs: job names whose running tasks are at their limit.
        owner: keep to this owner's tasks (a hand-off of an owner's slot)...
        job: ...or, given too, those and this job's tasks (None: no such filter).
    """

    full_owners: tuple[str, ...] = ()
    full_jobs: tuple[str, ...] = ()
    owner: str | None = None
    job: str | None = None

    def admits(self, task: Task) -> bool:
        """Whether ``task`` passes this filter (the in-memory store's reading of it)."""
        if task.owner is not None and task.owner in self.full_owners:
            return False
        if task.name in self.full_jobs:
            return False
        if self.owner is None and self.job is None:
            return True
        return (self.owner is not None and task.owner == self.owner) or task.name == self.job


@dataclass(frozen=True, slots=True)
class ListQuery:
    """The filters of one listing, all applied by the backend inside its query."""

    scope: OwnerScope
    statuses: frozenset[TaskStatus] | None = None
    context_id: str | None = None
    name: str | None = None
    updated_after: datetime | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    parent: str | Unset | None = UNSET
    """A task's children (its id), root tasks only (None), or any task (UNSET)."""

    @property
    def matches_nothing(self) -> bool:
        """Whether no task can match: a scope of nobody, or an empty status filter."""
        return self.scope.nobody or self.statuses == frozenset()

    def fingerprint(self) -> str:
        """A text that changes with any filter, binding cursors to their listing."""
        statuses = sorted(self.statuses) if self.statuses is not None else None
        times = [
            None if instant is None else instant.isoformat()
            for instant in (self.updated_after, self.created_after, self.created_before)
        ]
        # JSON keeps the parts apart: filter values may contain any separator.
        parts: list[Any] = [self.scope.fingerprint(), statuses, self.context_id, self.name, *times]
        if times[1:] == [None, None]:
            parts = parts[:-2]  # as before the creation filters: old cursors stay valid
        if self.parent is not UNSET:
            parts.append({"parent": self.parent})
        return json.dumps(parts, separators=(",", ":"))


class StoreBackend(ABC):
    """What every store is built on: the backend primitives and the rules that use them.

    Backends implement the abstract primitives; :class:`~queuestore.store.base.TaskStore`
    adds the public verbs on top and documents the constructor's arguments.
    """

    def __init__(
        self,
        *,
        require_owner: bool = False,
        max_payload_bytes: int = check.DEFAULT_MAX_PAYLOAD_BYTES,
        cursor_secret: bytes | str | None = None,
        url_policy: UrlPolicy | None = None,
    ) -> None:
        self.require_owner = require_owner
        self.url_policy = UrlPolicy() if url_policy is None else url_policy
        self.max_payload_bytes = check.positive_int(max_payload_bytes, "max_payload_bytes")
        self._cursors = CursorCodec(cursor_secret)
        self._feed = ChangeFeed(self._changed_since, self._now, self.subscribe, self._watch_tasks)
        self._observers: tuple[StoreObserver, ...] = ()

    def observe(self, observer: StoreObserver) -> None:
        """Tell ``observer`` about this store's writes from now on (once per observer)."""
        if observer not in self._observers:
            self._observers = (*self._observers, observer)

    def _observed(self, task: Task | None, write: Write, *, cascade: bool = True) -> Task | None:
        """Pass a committed status write on to the observers; return ``task``.

        A write that left the task cancelled or failed cancels its live
        descendants (unless ``cascade`` is off: the caller does it).
        """
        if task is not None and write.status is not None:
            for observer in self._observers:
                observer.status_written(task, claimed=write.claim is not None)
            if cascade and task.status in ENDS_ITS_CHILDREN:
                self._cascade(task)
        return task

    def _cascade(self, ended: Task) -> builtins.list[Task]:
        """Cancel the live descendants of a task that ended cancelled or failed."""
        reason = f"ended with task {ended.id} above it ({ended.status})"
        cancelled = self._cancel_descendants(ended.id, reason)
        for task in cancelled:
            for observer in self._observers:
                observer.status_written(task, claimed=False)
        return cancelled

    # -- backend primitives -------------------------------------------------

    @abstractmethod
    def _insert(self, new: NewTask) -> tuple[Task, bool]:
        """Insert a row in ``submitted``, and say True; raise TaskConflict if the id exists.

        With a ``unique_key`` that another live task of the owner holds, insert
        nothing and return that task, and False (the task itself holding it is
        an id conflict).
        """

    @abstractmethod
    def _insert_many(self, news: Sequence[NewTask]) -> builtins.list[tuple[Task, bool]]:
        """:meth:`_insert` for each of ``news`` (distinct ids), in one transaction.

        A taken id raises TaskConflict and inserts none of them.
        """

    @abstractmethod
    def _fetch(self, task_id: str, scope: OwnerScope) -> Task | None:
        """The task if it exists and is visible in ``scope``."""

    @abstractmethod
    def _write(self, task_id: str, write: Write) -> Task | None:
        """Apply ``write`` atomically if its conditions hold; None if they do not."""

    @abstractmethod
    def _page(self, query: ListQuery, after: CursorKey | None, limit: int) -> builtins.list[Task]:
        """Up to ``limit`` tasks, newest first by ``(created_at, id)``, after ``after``."""

    @abstractmethod
    def _count(self, query: ListQuery) -> int:
        """How many tasks the listing ``query`` admits."""

    @abstractmethod
    def _delete(self, task_id: str, scope: OwnerScope) -> None:
        """Delete the task if it is visible in ``scope``."""

    @abstractmethod
    def _delete_expired(self, ttl: timedelta, now: datetime | None, batch_size: int) -> int:
        """Delete one batch of expired terminal tasks in its own transaction."""

    @abstractmethod
    def _extend_lease(self, task_id: str, worker_id: str, lease: timedelta) -> Task | None:
        """Push the lease of a working task held by ``worker_id``; None if not held."""

    @abstractmethod
    def _expired_leases(self, now: datetime | None, limit: int) -> builtins.list[Task]:
        """Working tasks whose lease ran out before ``now`` (the backend's clock if None)."""

    @abstractmethod
    def _mark_published(self, marks: Sequence[tuple[str, int | None]]) -> None:
        """Record that messages were published: ``(task_id, version)`` pairs.

        A pair with a version marks the task only while it is at that version.
        """

    @abstractmethod
    def _claim_within(
        self,
        task_id: str,
        write: Write,
        limits: ConcurrencyLimits | None,
        flow: FlowControl | None = None,
    ) -> Task | None:
        """Apply the claim ``write`` with the caps ``limits`` sets for the row, atomically.

        The count of the owner's and the job's running tasks and the claim
        are one decision: two claims racing for an owner's last slot cannot
        both win. With ``flow``, the pauses in force and the rate limit's
        starts are part of that decision, and an admitted claim logs its start.
        None if the claim's conditions, the caps or the flow do not hold.
        """

    @abstractmethod
    def _running_counts(self) -> dict[tuple[str | None, str], int]:
        """How many tasks a worker holds, by ``(owner, name)`` (pairs without any left out)."""

    @abstractmethod
    def _unpublished(
        self,
        older_than: timedelta,
        republish_after: timedelta | None,
        ahead: timedelta,
        limit: int,
        among: SweepFilter | None = None,
    ) -> builtins.list[Task]:
        """Unclaimed submitted or working jobs due for a (new) message, by :func:`due_at`.

        Due: never published and last written before ``older_than`` ago; or
        scheduled (``run_at``), never published, starting within ``ahead``, and
        either written before ``older_than`` ago or scheduled further than
        ``ahead`` past its last write (so ``submit`` did not publish it); or
        published more than ``republish_after`` ago and still not claimed.
        Only those ``among`` admits, when given.
        """

    @abstractmethod
    def _count_by_status(self) -> dict[TaskStatus, int]:
        """How many tasks are in each status (statuses without tasks may be left out)."""

    @abstractmethod
    def _count_unpublished(self, older_than: timedelta) -> int:
        """How many unclaimed submitted or working jobs were never published, though
        last written (or, scheduled, due to start) ``older_than`` ago or earlier."""

    @abstractmethod
    def _record_step(self, task_id: str, worker_id: str, outcome: StepOutcome) -> Step | None:
        """Record a step of the run ``worker_id`` holds on a ``working`` task, atomically.

        A new name is inserted; a failed step of the same kind is replaced
        (``tries`` + 1). None, writing nothing, when the task is not ``working``
        under ``worker_id``, or when a step of that name is completed or of
        another kind. The task's row is not written.
        """

    @abstractmethod
    def _steps(self, task_id: str, scope: OwnerScope) -> builtins.list[Step] | None:
        """The task's steps, oldest first by ``(finished_at, name)``; None if the task
        is not visible in ``scope``."""

    @abstractmethod
    def _spawn(
        self, parent_id: str, worker_id: str, children: Sequence[NewChild], max_depth: int
    ) -> builtins.list[tuple[Task, bool]] | None:
        """Insert ``children`` under the parent ``worker_id`` holds, in one transaction.

        Each comes back with True when inserted, or as the child already
        holding its key with False. None, writing nothing, when the parent is
        not ``working`` under ``worker_id`` or is ``max_depth`` deep.

        Raises:
            InvalidTaskData: a key is held by a child of another job (nothing written).
        """

    @abstractmethod
    def _park(
        self, task_id: str, worker_id: str, message: str | None, waits_on: Sequence[str]
    ) -> Task | None:
        """End the run ``worker_id`` holds on a working task to wait for its children.

        As a suspend with no start time, ``waits_on`` set. None, writing
        nothing, unless the run holds the task and a child it waits for
        (among ``waits_on``; ``[]``: any) is live.
        """

    @abstractmethod
    def _wake(self, task_ids: Sequence[str] | None, limit: int) -> builtins.list[Task]:
        """Wake parked tasks none of whose waited children is live: ``task_ids``, or (None)
        up to ``limit`` of any, longest parked first. Woken: pending, unpublished."""

    @abstractmethod
    def _cancel_descendants(self, task_id: str, reason: str) -> builtins.list[Task]:
        """Cancel every live descendant of the task, atomically; the tasks cancelled."""

    @abstractmethod
    def _orphans(self, limit: int) -> builtins.list[Task]:
        """Live children of cancelled or failed parents (a cascade that did not run)."""

    @abstractmethod
    def _past_deadlines(
        self, kind: DeadlineKind, now: datetime | None, limit: int, ago: timedelta = timedelta(0)
    ) -> builtins.list[Task]:
        """Up to ``limit`` tasks past a deadline ``ago`` before ``now`` (the clock if None),
        soonest first.

        ``run``: working runs past ``run_deadline_at``; ``held``: terminal tasks
        still held by a run past its ``run_deadline_at``;
        ``start_by``: submitted tasks never started past ``start_by``;
        ``deadline``: live tasks no run holds past ``deadline_at``.
        """

    @abstractmethod
    def _release_held(self, task_id: str, worker_id: str) -> bool:
        """Free the slot a run that ended from outside held (no new version); whether it did."""

    @abstractmethod
    def _now(self) -> datetime:
        """The store's clock: the database's where it has one."""

    @abstractmethod
    def _changed_since(
        self,
        since: datetime,
        after: tuple[datetime, str] | None,
        limit: int,
        seen: Mapping[str, int],
    ) -> builtins.list[Task]:
        """Up to ``limit`` tasks written after ``since``, in ``(updated_at, id)`` order.

        With ``after``, only the tasks past that ``(updated_at, id)`` key: the next
        batch. A task at the version ``seen`` gives for its id, or an older one,
        is left out (the reader has it).
        """

    def _insert_on(
        self, connection: Any, news: Sequence[NewTask]
    ) -> builtins.list[tuple[Task, bool]]:
        """:meth:`_insert_many` on the caller's ``connection``, in the caller's transaction.

        Raises:
            InvalidTaskData: this store has no transaction to join (the default).
        """
        raise InvalidTaskData(
            f"{type(self).__name__} has no transaction to join", field="connection"
        )

    def _watch_tasks(self, task_ids: Collection[str], seconds: float) -> None:  # noqa: B027
        """Announce every write to ``task_ids`` for the next ``seconds``.

        For a backend that announces only some writes (PostgreSQL: terminal and
        parked statuses), so that a change feed following these tasks by id
        hears of each write at once instead of at its next poll. By default
        nothing: the backend announces every write, or none.
        """

    def subscribe(self) -> AbstractContextManager[Listener]:
        """Listen to status changes of every task while the context is open.

        Backends with notifications (PostgreSQL LISTEN/NOTIFY, the in-memory
        store) report changes as they commit; others just sleep, so callers
        must poll what they watch after each call.
        """
        return _sleeping_listener()

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release connections and other resources held by the store."""

    def after_fork(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Drop resources inherited from a parent process (call it in a forked child)."""

    # -- rules --------------------------------------------------------------

    def _scope(self, owner: Owner) -> OwnerScope:
        return OwnerScope.resolve(owner, require_owner=self.require_owner)

    @staticmethod
    def _transition(
        scope: OwnerScope,
        target: TaskStatus | None,
        values: Mapping[str, Any],
        *,
        expected_version: int | None = None,
        fence: str | Unset | None = UNSET,
    ) -> Write:
        """The write that moves a task to ``target`` (or keeps its live status).

        A terminal write that sets no ``status_message`` sets the one that
        describes the end: the error's summary for a failure, else none. Every
        terminal write goes through here (a run's outcome, a caller's update
        or cancel, the reaper's failure), so a finished task never shows the
        message of its last run ("half way", "retrying: ...").
        """
        if target in TERMINAL and "status_message" not in values:
            error = values.get("error")
            ending = error.summary if isinstance(error, TaskError) else None
            values = {**values, "status_message": ending}
        return Write(
            scope=scope,
            from_statuses=LIVE if target is None else sources_of(target),
            status=target,
            values=values,
            expected_version=expected_version,
            fence=fence,
            release=target in TERMINAL or target in PARKED,
            mark_started=target is TaskStatus.WORKING,
            mark_finished=target in TERMINAL,
        )

    def _checked_values(
        self,
        status_message: str | Unset | None,
        progress: float | Unset | None,
        result: Any,
        error: TaskError | Mapping[str, Any] | Unset | None,
    ) -> dict[str, Any]:
        """The given values of a write, validated, keyed by ``Task`` field."""
        values: dict[str, Any] = {}
        if status_message is not UNSET:
            values["status_message"] = check.message(status_message)
        if progress is not UNSET:
            values["progress"] = check.progress(progress)
        if result is not UNSET:
            values["result"] = check.json_value(result, "result", self.max_payload_bytes)
        if error is not UNSET:
            values["error"] = check.error(error, self.max_payload_bytes)
        return values

    def _merged(
        self, artifacts: Iterable[Artifact], changes: Iterable[tuple[Artifact, bool]]
    ) -> builtins.list[Artifact]:
        """``artifacts`` after each ``(artifact, append)`` change, in order.

        A change replaces the artifact with the same id, or extends its parts
        when ``append``; an artifact with a new id is added at the end.
        """
        result = builtins.list(artifacts)
        for new, append in changes:
            for index, old in enumerate(result):
                if old.artifact_id == new.artifact_id:
                    if append:
                        combined = old.model_copy(update={"parts": [*old.parts, *new.parts]})
                        result[index] = check.artifact(combined, self.max_payload_bytes)
                    else:
                        result[index] = new
                    break
            else:
                result.append(new)
        return result

    def _apply(self, task_id: str, write: Write, *, cascade: bool = True) -> Task:
        """Run a write, explaining a refusal with the error that fits the current row."""
        for _ in range(_RACE_RETRIES):
            written = self._observed(self._write(task_id, write), write, cascade=cascade)
            if written is not None:
                return written
            self._explain_refusal(task_id, write)
        raise TaskConflict(f"task {task_id!r} kept changing under a write", task_id=task_id)

    def _explain_refusal(self, task_id: str, write: Write) -> None:
        current = self._fetch(task_id, write.scope)
        if current is None:
            raise TaskNotFound(task_id)
        if current.status not in write.from_statuses:
            raise InvalidTransition(task_id, current.status, write.status, write.from_statuses)
        if write.expected_version is not None and current.version != write.expected_version:
            raise TaskConflict(
                f"task {task_id!r} is at version {current.version}, not {write.expected_version}",
                task_id=task_id,
                expected_version=write.expected_version,
                actual_version=current.version,
            )
        if write.base is not None and current.created_at != write.base.created_at:
            raise TaskConflict(
                f"task {task_id!r} was deleted and created again since the caller's copy",
                task_id=task_id,
                expected_version=write.expected_version,
                actual_version=current.version,
            )
        if write.fence is not UNSET and current.worker_id != write.fence:
            raise LeaseLost(
                f"task {task_id!r} is held by {current.worker_id!r}, not {write.fence!r}",
                task_id=task_id,
            )
        # The row matched by the time we looked: another writer raced us; try again.

    def _read_modify_write(
        self,
        task_id: str,
        write: Write,
        change: Callable[[Task], Mapping[str, Any]],
        *,
        known: Task | None = None,
    ) -> Task:
        """``write`` plus values computed from the current row, retried while others win.

        Each try is ``write`` with ``change(current)`` added to its values,
        conditioned on the version it was computed from. ``known`` (a copy of
        the task the caller trusts to be current) spares the first read; a
        stale copy only costs one refused write.
        """
        current = known if known is not None and known.id == task_id else None
        for _ in range(_RACE_RETRIES):
            if current is None:
                current = self._fetch(task_id, write.scope)
            if current is None:
                raise TaskNotFound(task_id)
            attempt = replace(
                write,
                values={**write.values, **change(current)},
                expected_version=current.version,
                base=current,
            )
            written = self._observed(self._write(task_id, attempt), attempt)
            if written is not None:
                return written
            self._explain_refusal(task_id, write)
            current = None
        raise TaskConflict(f"task {task_id!r} kept changing under a write", task_id=task_id)


@contextmanager
def _sleeping_listener() -> Iterator[Listener]:
    def listen(seconds: float) -> list[StatusChange]:
        time.sleep(seconds)
        return []

    yield listen
