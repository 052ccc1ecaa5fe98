"""The abstract store: it owns every rule, and backends only fetch and write.

A backend implements a handful of primitives (insert, fetch, one compare-and-set
write, a keyset page, deletes). Everything a user can observe -- validation,
the transition table, owner scoping, cursors, retries of lost races -- lives
here once, so the in-memory and SQL stores cannot drift apart.
"""

from __future__ import annotations

import builtins
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Final, Literal

from pydantic import JsonValue

from queuestore import validation as check
from queuestore.cursor import CursorCodec, CursorKey
from queuestore.errors import (
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    TaskConflict,
    TaskNotFound,
)
from queuestore.models import (
    LIVE,
    TERMINAL,
    Artifact,
    Task,
    TaskError,
    TaskPage,
    TaskStatus,
    new_task_id,
    sources_of,
)
from queuestore.owner import ANY, Owner, OwnerScope


class _Unset(Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "queuestore.UNSET"


UNSET: Final = _Unset.UNSET
"""Marks an argument that was not given, where None is a meaningful value."""

Unset = Literal[_Unset.UNSET]

_RACE_RETRIES: Final = 50
_PENDING_STATUSES: Final = frozenset({TaskStatus.SUBMITTED, TaskStatus.WORKING})
_PARKED: Final = frozenset({TaskStatus.INPUT_REQUIRED, TaskStatus.AUTH_REQUIRED})


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
        release: clears the worker, the lease and ``dispatched_at``.
        mark_started: sets ``started_at`` to the clock unless already set.
        mark_finished: sets ``finished_at`` to the clock and ``expires_at`` to
            ``finished_at + ttl`` when the task has a ttl.
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


@dataclass(frozen=True, slots=True)
class ListQuery:
    """The filters of one listing, all applied by the backend inside its query."""

    scope: OwnerScope
    statuses: frozenset[TaskStatus] | None = None
    context_id: str | None = None
    name: str | None = None
    updated_after: datetime | None = None

    def fingerprint(self) -> str:
        """A text that changes with any filter, binding cursors to their listing."""
        statuses = sorted(self.statuses) if self.statuses is not None else None
        after = self.updated_after.isoformat() if self.updated_after else None
        # JSON keeps the parts apart: filter values may contain any separator.
        parts = [self.scope.fingerprint(), statuses, self.context_id, self.name, after]
        return json.dumps(parts, separators=(",", ":"))


StatusChange = tuple[str, TaskStatus]
"""A task id and the status it moved to."""

Listener = Callable[[float], "list[StatusChange]"]
"""Blocks for at most the given seconds and returns the status changes seen meanwhile.

A listener may return early with nothing, or return nothing after the full
time on a backend without notifications: callers re-read what they watch.
"""


class TaskStore(ABC):
    """A durable store of tasks, their status, progress, artifacts and results.

    Args:
        require_owner: refuse tasks without an owner and show anonymous callers
            nothing at all.
        max_payload_bytes: the largest input, result, metadata or artifact
            accepted, measured as compact JSON.
        cursor_secret: the key that signs pagination cursors; share it between
            processes that serve the same clients.
    """

    def __init__(
        self,
        *,
        require_owner: bool = False,
        max_payload_bytes: int = check.DEFAULT_MAX_PAYLOAD_BYTES,
        cursor_secret: bytes | str | None = None,
    ) -> None:
        self.require_owner = require_owner
        self.max_payload_bytes = check.positive_int(max_payload_bytes, "max_payload_bytes")
        self._cursors = CursorCodec(cursor_secret)

    # -- backend primitives -------------------------------------------------

    @abstractmethod
    def _insert(self, new: NewTask) -> Task:
        """Insert a row in ``submitted``; raise TaskConflict if the id exists."""

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
    def _mark_dispatched(self, marks: Sequence[tuple[str, int | None]]) -> None:
        """Record that messages were published: ``(task_id, version)`` pairs.

        A pair with a version marks the task only while it is at that version.
        """

    @abstractmethod
    def _undispatched(
        self, older_than: timedelta, redispatch_after: timedelta | None, limit: int
    ) -> builtins.list[Task]:
        """Unclaimed submitted or working tasks due for a (new) message, oldest first.

        Due: never published and last written before ``older_than`` ago, or
        published more than ``redispatch_after`` ago and still not claimed.
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
    ) -> Task:
        """Persist a new task in ``submitted``.

        Raises:
            InvalidTaskData: bad name, input, owner, ttl, metadata or id.
            TaskConflict: ``task_id`` is already taken.
        """
        owner = check.label(owner, "owner")
        if owner is None and self.require_owner:
            raise InvalidTaskData("is required by this store", field="owner")
        new = NewTask(
            id=new_task_id() if task_id is None else check.task_id(task_id),
            name=check.name(name),
            input=check.json_object(input, "input", self.max_payload_bytes),
            owner=owner,
            context_id=check.label(context_id, "context_id"),
            ttl=check.ttl(ttl),
            metadata=check.json_object(metadata, "metadata", self.max_payload_bytes),
        )
        return self._insert(new)

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
    ) -> TaskPage:
        """One page of tasks, newest first, filtered inside the query.

        Raises:
            InvalidCursor: ``cursor`` is malformed, altered, or from other filters.
            InvalidTaskData: a bad filter or ``limit`` outside 1..1000.
        """
        query = ListQuery(
            scope=self._scope(owner),
            statuses=_statuses(status),
            context_id=check.label(context_id, "context_id"),
            name=None if name is None else check.name(name),
            updated_after=(
                None if updated_after is None else check.aware(updated_after, "updated_after")
            ),
        )
        limit = check.limit(limit)
        after = None if cursor is None else self._cursors.decode(cursor, query.fingerprint())
        if query.scope.nobody or query.statuses == frozenset():
            return TaskPage(tasks=[])
        rows = self._page(query, after, limit + 1)
        if len(rows) <= limit:
            return TaskPage(tasks=rows)
        last = rows[limit - 1]
        key = CursorKey(last.created_at, last.id)
        return TaskPage(
            tasks=rows[:limit], next_cursor=self._cursors.encode(key, query.fingerprint())
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
        known: Task | None = None,
    ) -> Task:
        """Add an artifact to a live task, or replace the one with the same id.

        Args:
            append: extend the parts of the artifact with the same id (streamed
                chunks) instead of replacing it.
            known: the caller's latest copy of the task (a worker's, say). While
                it is current the write needs no read first; when another
                writer moved the task on, the store reads it and merges again.

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
            known=known,
        )

    def provide_input(self, task_id: str, answer: Any, *, owner: Owner = ANY) -> Task:
        """Answer a task waiting in ``input_required`` (or ``auth_required``).

        The answer is appended to ``answers`` and the task goes back to
        ``working``, unclaimed, for its job to be dispatched again.

        Raises:
            InvalidTransition: the task is not waiting for input.
            TaskNotFound: no such task visible to ``owner``.
        """
        task_id = check.task_id(task_id)
        answer = check.json_value(answer, "answer", self.max_payload_bytes)
        resumed = Write(
            scope=self._scope(owner),
            from_statuses=_PARKED,
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

        Raises:
            InvalidTransition: the task is already terminal.
            TaskNotFound: no such task visible to ``owner``.
        """
        values = {} if reason is None else {"status_message": check.message(reason, "reason")}
        write = self._transition(self._scope(owner), TaskStatus.CANCELLED, values)
        return self._apply(check.task_id(task_id), write)

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
            total += deleted
            if deleted < batch_size:
                return total

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

    # -- worker protocol ----------------------------------------------------

    def claim(self, task_id: str, worker_id: str, lease: timedelta) -> Task | None:
        """Take an unclaimed task for one run: ``working``, leased to ``worker_id``.

        Returns None when the task is claimed, parked, terminal or gone: the
        message that asked for this run is a duplicate and should be dropped.
        """
        write = Write(
            scope=OwnerScope(unscoped=True),
            from_statuses=_PENDING_STATUSES,
            status=TaskStatus.WORKING,
            fence=None,
            claim=(check.worker_id(worker_id), _lease(lease)),
            mark_started=True,
        )
        return self._write(check.task_id(task_id), write)

    def heartbeat(self, task_id: str, worker_id: str, lease: timedelta) -> Task:
        """Extend the lease and return the task, so the worker sees a cancel.

        The lease is extended only while ``worker_id`` holds a ``working`` task;
        otherwise the task is returned unchanged and the worker should stop.

        Raises:
            TaskNotFound: the task was deleted.
        """
        task_id = check.task_id(task_id)
        task = self._extend_lease(task_id, check.worker_id(worker_id), _lease(lease))
        return task if task is not None else self.get(task_id)

    def reap(
        self, now: datetime | None = None, *, max_attempts: int = 3, limit: int = 100
    ) -> builtins.list[Task]:
        """Recover tasks whose worker died: retry them, or fail them after ``max_attempts``.

        Each write is conditioned on the lease it found expired, so a worker
        that renews it meanwhile keeps its task. A retried task stays
        ``working`` but unclaimed, for its job to be
        dispatched again; a failed one gets a ``WorkerLost`` error. Only lost
        runs count against ``max_attempts``: a run that ended in
        ``input_required`` was not lost (see :func:`lost_runs`).
        """
        now = None if now is None else check.aware(now, "now")
        check.positive_int(max_attempts, "max_attempts")
        reaped = []
        for task in self._expired_leases(now, check.limit(limit)):
            if lost_runs(task) >= max_attempts:
                error = TaskError(
                    type="WorkerLost",
                    message=f"worker {task.worker_id} stopped renewing its lease; "
                    f"{lost_runs(task)} of {max_attempts} runs lost",
                )
                write = replace(
                    self._transition(
                        OwnerScope(unscoped=True),
                        TaskStatus.FAILED,
                        {"error": error},
                        expected_version=task.version,
                        fence=task.worker_id,
                    ),
                    expected_lease=task.lease_expires_at,
                )
            else:
                write = Write(
                    scope=OwnerScope(unscoped=True),
                    from_statuses=frozenset({TaskStatus.WORKING}),
                    expected_version=task.version,
                    fence=task.worker_id,
                    expected_lease=task.lease_expires_at,
                    values={"status_message": f"retrying: worker {task.worker_id} was lost"},
                    release=True,
                )
            written = self._write(task.id, write)
            if written is not None:
                reaped.append(written)
        return reaped

    def report(
        self,
        task_id: str,
        worker_id: str,
        *,
        known: Task | None = None,
        artifacts: Iterable[tuple[Artifact | Mapping[str, Any], bool]] = (),
        status: TaskStatus | str | None = None,
        status_message: str | Unset | None = UNSET,
        progress: float | Unset | None = UNSET,
        result: Any = UNSET,
        error: TaskError | Mapping[str, Any] | Unset | None = UNSET,
    ) -> Task:
        """A run's reports since its last write, and its outcome if it ended, as one write.

        It is a compare-and-set fenced by the run's lease, like :meth:`update`,
        that also applies ``artifacts`` in order: each ``(artifact, append)``
        as :meth:`add_artifact` would. A worker batches what its job reported
        this way (see ``TaskQueue.report_interval``).

        Args:
            known: the run's latest copy of the task; with artifacts to merge
                it spares the read first (a stale copy costs one refused write).

        Raises:
            InvalidTaskData: a value or an artifact is invalid, or appended
                parts outgrow the payload limit; nothing is written.
            InvalidTransition: the task is no longer live, or ``status`` is not
                reachable from its status.
            LeaseLost: ``worker_id`` no longer holds the task.
            TaskNotFound: the task is gone.
        """
        task_id = check.task_id(task_id)
        check.worker_id(worker_id)
        changes = [
            (check.artifact(artifact, self.max_payload_bytes), bool(append))
            for artifact, append in artifacts
        ]
        values = self._checked_values(status_message, progress, result, error)
        target = None if status is None else check.status(status)
        write = self._transition(OwnerScope(unscoped=True), target, values, fence=worker_id)
        if not changes:
            return self._apply(task_id, write)
        return self._read_modify_write(
            task_id,
            write,
            lambda task: {"artifacts": self._merged(task.artifacts, changes)},
            known=known,
        )

    def mark_dispatched(self, task_id: str, *, version: int | None = None) -> None:
        """Record that the message for the task's next run was published.

        Args:
            version: mark the task only while it is still at this version, the
                one the message was published for.
        """
        if version is not None:
            check.positive_int(version, "version")
        self._mark_dispatched([(check.task_id(task_id), version)])

    def mark_dispatched_many(self, tasks: Iterable[tuple[str, int]]) -> None:
        """:meth:`mark_dispatched` for many ``(task_id, version)`` pairs, in one write.

        A task whose version moved on since its message went out (claimed,
        released, cancelled) is left alone.
        """
        marks: builtins.list[tuple[str, int | None]] = [
            (check.task_id(task_id), check.positive_int(version, "version"))
            for task_id, version in tasks
        ]
        if marks:
            self._mark_dispatched(marks)

    def undispatched(
        self,
        older_than: timedelta,
        *,
        redispatch_after: timedelta | None = None,
        limit: int = 100,
    ) -> builtins.list[Task]:
        """Unclaimed tasks whose message never went out, oldest first.

        Args:
            older_than: skip tasks written more recently, which ``submit`` may
                still be publishing.
            redispatch_after: also return tasks published this long ago and
                still unclaimed, whose message a broker may have lost (a worker
                killed with prefetched messages on a broker that does not
                redeliver). A duplicate message is harmless: the claim drops it.
        """
        return self._undispatched(
            check.ttl(older_than) or timedelta(0),
            None if redispatch_after is None else check.ttl(redispatch_after),
            check.limit(limit),
        )

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
        """The write that moves a task to ``target`` (or keeps its live status)."""
        return Write(
            scope=scope,
            from_statuses=LIVE if target is None else sources_of(target),
            status=target,
            values=values,
            expected_version=expected_version,
            fence=fence,
            release=target in TERMINAL or target in _PARKED,
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

    def _apply(self, task_id: str, write: Write) -> Task:
        """Run a write, explaining a refusal with the error that fits the current row."""
        for _ in range(_RACE_RETRIES):
            written = self._write(task_id, write)
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
            )
            written = self._write(task_id, attempt)
            if written is not None:
                return written
            self._explain_refusal(task_id, write)
            current = None
        raise TaskConflict(f"task {task_id!r} kept changing under a write", task_id=task_id)


def lost_runs(task: Task) -> int:
    """How many runs of a working task were lost, counting its current one.

    Every claim adds one to ``attempt``: the first run, each run after an
    answer (``provide_input``), and each retry after a lost worker. The answers
    are counted in ``answers``, so the rest are the first run and the retries.
    """
    return task.attempt - len(task.answers)


def _statuses(
    value: TaskStatus | str | Iterable[TaskStatus | str] | None,
) -> frozenset[TaskStatus] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        return frozenset({check.status(value)})
    return frozenset(check.status(item) for item in value)


def _lease(value: object) -> timedelta:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidTaskData("must be a positive timedelta", field="lease")
    return value


@contextmanager
def _sleeping_listener() -> Iterator[Listener]:
    def listen(seconds: float) -> list[StatusChange]:
        time.sleep(seconds)
        return []

    yield listen
