"""The verbs of durable work inside a task: named steps, child tasks and deadlines.

These verbs (:class:`DurableVerbs`) are part of every
:class:`~queuestore.store.base.TaskStore`. A run records its named steps
(:meth:`~DurableVerbs.record_step`) and spawns child tasks
(:meth:`~DurableVerbs.spawn`), fenced by its lease like its other writes;
whoever ends a child wakes its waiting parent (:meth:`~DurableVerbs.wake`),
and beat wakes the rest, cancels the children of ended parents
(:meth:`~DurableVerbs.cancel_orphans`) and fails the tasks past their
deadlines (:meth:`~DurableVerbs.enforce_deadlines`). A run's wait itself is a
suspend (:meth:`RunVerbs.suspend <queuestore.store.runs.RunVerbs.suspend>`).
"""

from __future__ import annotations

import builtins
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final, NamedTuple

from queuestore.core import validation as check
from queuestore.core.cursor import CursorKey
from queuestore.core.errors import (
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    TaskConflict,
    TaskNotFound,
)
from queuestore.core.models import (
    Step,
    StepKind,
    StepStatus,
    Task,
    TaskError,
    TaskStatus,
    new_task_id,
)
from queuestore.core.owner import OwnerScope
from queuestore.store.backend import (
    _RACE_RETRIES,
    ListQuery,
    NewChild,
    StepOutcome,
    StoreBackend,
    Write,
    held_by,
)

MAX_DEPTH: Final = 8
"""How deep a tree of tasks may grow by default: a root's children are 1 deep."""

_ORPHANED: Final = "its parent task ended"

_CHILDREN_PAGE: Final = 1000

_CHILD_ARGUMENTS: Final = frozenset(
    {
        "name",
        "input",
        "key",
        "context_id",
        "ttl",
        "metadata",
        "priority",
        "run_at",
        "start_by",
        "deadline",
        "timeout",
    }
)
"""What an item of :meth:`DurableVerbs.spawn` may hold."""


class DurableVerbs(StoreBackend):
    """Steps, child tasks and deadlines: the store's side of durable work inside a task."""

    def spawn(
        self,
        parent_id: str,
        worker_id: str,
        children: Iterable[Mapping[str, Any]],
        *,
        max_depth: int = MAX_DEPTH,
    ) -> builtins.list[tuple[Task, bool]]:
        """Start child tasks of the task a run holds, in one transaction, all or none.

        Each item holds :meth:`TaskStore.create`'s arguments by name (``name``
        required; ``owner``, ``task_id``, ``job`` and ``unique_key`` are not
        taken), ``key`` (the child's key among its parent's children; by
        default made of its name and input, see :func:`spawn_key`), and
        ``timeout``, ``start_by`` and ``deadline`` as :meth:`TaskStore.create`
        takes them. A child's owner is its parent's; its context, ttl and
        priority default to the parent's; its ``start_by`` and ``deadline_at``
        are no later than the parent's ``deadline_at``. A key a child of this
        parent holds already gives that child, and writes nothing: a run that
        spawns again after a crash or a wait starts nothing twice.

        Returns:
            Each child in the order given, and whether this call created it.

        Raises:
            InvalidTaskData: an item is invalid (the field says which), two
                items share a key, a key is held by a child of another job, or
                the children would be deeper than ``max_depth``; nothing is written.
            InvalidTransition: the parent is no longer ``working``.
            LeaseLost: ``worker_id`` no longer holds the parent.
            TaskNotFound: the parent is gone.
        """
        parent_id = check.task_id(parent_id, "parent_id")
        worker_id = check.worker_id(worker_id)
        max_depth = check.positive_int(max_depth, "max_depth")
        news = [self._new_child(index, item) for index, item in enumerate(children)]
        keys = [new.spawn_key for new in news]
        if len(set(keys)) != len(keys):
            raise InvalidTaskData("two children have the same key", field="key")
        if not news:
            return []
        spawned = self._spawn(parent_id, worker_id, news, max_depth)
        if spawned is None:
            self._explain_refusal(parent_id, held_by(worker_id))
            raise InvalidTaskData(
                f"task {parent_id!r} is {max_depth} deep already (max_depth)",
                field="job",
                task_id=parent_id,
            )
        for task, created in spawned:
            if created:
                for observer in self._observers:
                    observer.created(task)
        return spawned

    def _new_child(self, index: int, item: Mapping[str, Any]) -> NewChild:
        """One item of :meth:`spawn`, checked."""
        where = f"children[{index}]"
        if not isinstance(item, Mapping) or "name" not in item:
            raise InvalidTaskData("must be a mapping of spawn's arguments, with name", field=where)
        unknown = set(item) - _CHILD_ARGUMENTS
        if unknown:
            raise InvalidTaskData(f"takes no {', '.join(sorted(unknown))}", field=where)
        try:
            name = check.name(item["name"])
            payload = check.json_object(item.get("input"), "input", self.max_payload_bytes)
            given_key = check.label(item.get("key"), "key")
            priority = item.get("priority")
            return NewChild(
                id=new_task_id(),
                name=name,
                input=payload,
                spawn_key=spawn_key(name, payload) if given_key is None else given_key,
                context_id=check.label(item.get("context_id"), "context_id"),
                ttl=check.ttl(item.get("ttl")),
                metadata=check.json_object(
                    item.get("metadata"), "metadata", self.max_payload_bytes
                ),
                priority=None if priority is None else check.priority(priority),
                run_at=check.run_at(item.get("run_at"), job=True),
                start_by=check.instant(item.get("start_by"), "start_by"),
                deadline_at=check.instant(item.get("deadline"), "deadline"),
                run_timeout=check.timeout(item.get("timeout")),
            )
        except InvalidTaskData as exc:
            field = where if exc.field is None else f"{where}.{exc.field}"
            message = str(exc).removeprefix(f"{exc.field}: ")
            raise InvalidTaskData(message, field=field) from None

    def children(self, parent_id: str) -> builtins.list[Task]:
        """Every child task of ``parent_id``, oldest first (for its run: no owner scope)."""
        query = ListQuery(scope=OwnerScope(unscoped=True), parent=check.task_id(parent_id))
        found: builtins.list[Task] = []
        after = None
        while True:
            page = self._page(query, after, _CHILDREN_PAGE)
            found += page
            if len(page) < _CHILDREN_PAGE:
                return found[::-1]
            after = CursorKey(page[-1].created_at, page[-1].id)

    def wake(self, task_ids: Iterable[str]) -> builtins.list[Task]:
        """Wake the parked tasks among ``task_ids`` none of whose waited children is live.

        A woken task is pending and unpublished, for its job to run again and
        find its children ended; publish it. Whoever ends a child calls this
        for its parent; the sweep's :meth:`wake_due` catches the rest.
        """
        ids = sorted({check.task_id(task_id) for task_id in task_ids})
        return self._wake(ids, len(ids)) if ids else []

    def wake_due(self, *, limit: int = 100) -> builtins.list[Task]:
        """Wake up to ``limit`` parked tasks none of whose waited children is live (the sweep)."""
        return self._wake(None, check.limit(limit))

    def cancel_orphans(self, *, limit: int = 100) -> builtins.list[Task]:
        """Cancel the live children (and theirs) of cancelled or failed parents, which a
        process that died between a parent's end and its cascade left running (the sweep)."""
        cancelled: builtins.list[Task] = []
        for orphan in self._orphans(check.limit(limit)):
            write = self._transition(
                OwnerScope(unscoped=True), TaskStatus.CANCELLED, {"status_message": _ORPHANED}
            )
            task = self._observed(self._write(orphan.id, write), write, cascade=False)
            if task is not None:
                cancelled += [task, *self._cascade(task)]
        return cancelled

    def record_step(self, task_id: str, worker_id: str, outcome: StepOutcome) -> Step:
        """Record how a named step of a run ended, fenced by the run's lease.

        One statement that writes the step, not the task: a step of a new name
        is inserted; a failed one is replaced (``tries`` + 1). A completed step
        is never replaced: recording it again returns the step as first
        recorded, whose result every later run is given.

        Raises:
            InvalidTaskData: a bad name, result or error, or the name belongs to a
                step of another kind; nothing is written.
            InvalidTransition: the task is no longer ``working``.
            LeaseLost: ``worker_id`` no longer holds the task.
            TaskNotFound: the task is gone.
        """
        task_id = check.task_id(task_id)
        worker_id = check.worker_id(worker_id)
        outcome = self._checked_step(outcome)
        held = held_by(worker_id)
        for _ in range(_RACE_RETRIES):
            recorded = self._record_step(task_id, worker_id, outcome)
            if recorded is not None:
                for observer in self._observers:
                    observer.step_recorded(task_id, recorded)
                return recorded
            self._explain_refusal(task_id, held)
            kept = self._kept_step(task_id, outcome)
            if kept is not None:
                return kept
        raise TaskConflict(f"task {task_id!r} kept changing under a step", task_id=task_id)

    def _checked_step(self, outcome: StepOutcome) -> StepOutcome:
        """``outcome`` with its name, result and error checked (bad ones raise)."""
        if not isinstance(outcome, StepOutcome):
            raise InvalidTaskData("must be a StepOutcome", field="step")
        if not isinstance(outcome.elapsed, timedelta) or outcome.elapsed < timedelta(0):
            raise InvalidTaskData("must be a timedelta of zero or more", field="elapsed")
        return replace(
            outcome,
            name=check.step_name(outcome.name),
            kind=StepKind(outcome.kind),
            status=StepStatus(outcome.status),
            result=check.json_value(outcome.result, "result", self.max_payload_bytes),
            error=check.error(outcome.error, self.max_payload_bytes),
        )

    def _kept_step(self, task_id: str, outcome: StepOutcome) -> Step | None:
        """After a refused record by the run holding the task: the completed step that
        stays, or None (it changed meanwhile: record again).

        Raises:
            InvalidTaskData: the name is a step of another kind.
        """
        steps = self._steps(task_id, OwnerScope(unscoped=True)) or []
        kept = next((step for step in steps if step.name == outcome.name), None)
        if kept is not None and kept.kind is not outcome.kind:
            raise InvalidTaskData(
                f"{outcome.name!r} is a {kept.kind} of this task, not a {outcome.kind}",
                field="step",
                task_id=task_id,
            )
        return kept if kept is not None and kept.status is StepStatus.COMPLETED else None

    def run_steps(self, task_id: str) -> builtins.list[Step]:
        """Every step the task's runs recorded, oldest first (for a run: no owner scope).

        Raises:
            TaskNotFound: the task is gone.
        """
        steps = self._steps(check.task_id(task_id), OwnerScope(unscoped=True))
        if steps is None:
            raise TaskNotFound(task_id)
        return steps

    def time_out(self, task_id: str, worker_id: str, *, known: Task | None = None) -> Task:
        """Fail a run that passed its ``run_deadline_at``: ``RunTimedOut``, or
        ``DeadlineExceeded`` when the task's own deadline cut the run short.

        A compare-and-set fenced by the run's lease, from ``working`` to
        ``failed``, that keeps the run's ``worker_id`` (its slot stays counted)
        until :meth:`release_held`: the run may still be executing. Like a
        caller's cancel it stops the run (its worker hears of it), and every
        later write of the run is refused. Its live children are cancelled.

        Args:
            known: the task as the caller read it; it spares the read first.

        Raises:
            InvalidTransition: the task is no longer ``working``.
            LeaseLost: ``worker_id`` no longer holds the task.
            TaskNotFound: the task is gone.
        """
        task_id = check.task_id(task_id)
        worker_id = check.worker_id(worker_id)
        task = known if known is not None and known.id == task_id else None
        if task is None:
            task = self._fetch(task_id, OwnerScope(unscoped=True))
        if task is None:
            raise TaskNotFound(task_id)
        error = _timed_out(task)
        write = Write(
            scope=OwnerScope(unscoped=True),
            from_statuses=frozenset({TaskStatus.WORKING}),
            status=TaskStatus.FAILED,
            values={"error": error, "status_message": error.message},
            fence=worker_id,
            hold=True,
            mark_finished=True,
        )
        timed_out = self._apply(task_id, write)
        for observer in self._observers:
            observer.timed_out(timed_out)
        return timed_out

    def release_held(self, task_id: str, worker_id: str) -> bool:
        """Free the slot of a run that ended from outside (:meth:`time_out`) once it
        stopped; no new version. Whether the task was still held by ``worker_id``."""
        return self._release_held(check.task_id(task_id), check.worker_id(worker_id))

    def enforce_deadlines(
        self,
        now: datetime | None = None,
        *,
        grace: timedelta = timedelta(seconds=10),
        limit: int = 100,
    ) -> Enforced:
        """Fail the tasks past their deadlines, each by a compare-and-set (the reaper).

        Runs past their ``run_deadline_at`` are failed by :meth:`time_out`;
        tasks never started by their ``start_by`` fail with
        ``DeadlineExpired`` (``started_at`` stays None: they never ran); live
        tasks no run holds past their ``deadline_at`` fail with
        ``DeadlineExceeded``. Runs that were failed so and still hold their
        slot ``grace`` past their deadline are returned, for the caller to
        kill and release (:meth:`release_held`).
        """
        now = None if now is None else check.aware(now, "now")
        limit = check.limit(limit)
        timed_out = []
        for task in self._past_deadlines("run", now, limit):
            try:
                assert task.worker_id is not None  # the read's own term
                timed_out.append(self.time_out(task.id, task.worker_id, known=task))
            except (InvalidTransition, LeaseLost, TaskNotFound):
                continue  # the run ended meanwhile
        unresponsive = self._past_deadlines("held", now, limit, check.ttl(grace) or timedelta(0))
        expired = self._fail_unclaimed(self._past_deadlines("start_by", now, limit), _not_started)
        exceeded = self._fail_unclaimed(self._past_deadlines("deadline", now, limit), _exceeded)
        return Enforced(timed_out, unresponsive, expired, exceeded)

    def _fail_unclaimed(
        self, tasks: Iterable[Task], error_of: Callable[[Task], TaskError]
    ) -> builtins.list[Task]:
        """Fail each of ``tasks`` no run holds, unless it changed since it was read."""
        failed = []
        for task in tasks:
            error = error_of(task)
            write = self._transition(
                OwnerScope(unscoped=True),
                TaskStatus.FAILED,
                {"error": error, "status_message": error.message},
                expected_version=task.version,
                fence=None,
            )
            written = self._observed(self._write(task.id, write), write)
            if written is not None:
                failed.append(written)
        return failed


def spawn_key(name: str, payload: Mapping[str, Any]) -> str:
    """A child's default key: its job and input, hashed (the same work is one child)."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{name}\n{canonical}".encode()).hexdigest()[:32]


class Enforced(NamedTuple):
    """What one pass of :meth:`RunVerbs.enforce_deadlines` did.

    Attributes:
        timed_out: runs failed past their ``run_deadline_at`` (still held).
        unresponsive: runs failed so that still hold their slot past the grace.
        expired: tasks failed never started by their ``start_by``.
        exceeded: tasks no run held failed past their ``deadline_at``.
    """

    timed_out: builtins.list[Task]
    unresponsive: builtins.list[Task]
    expired: builtins.list[Task]
    exceeded: builtins.list[Task]


def _when(moment: datetime | None) -> str:
    return "?" if moment is None else f"{moment:%Y-%m-%dT%H:%M:%SZ}"


def _timed_out(task: Task) -> TaskError:
    """The error of a run failed past its ``run_deadline_at``."""
    if task.deadline_at is not None and task.run_deadline_at == task.deadline_at:
        return _exceeded(task)
    return TaskError(
        type="RunTimedOut",
        message=f"run {task.attempt} passed its timeout (it had to end by "
        f"{_when(task.run_deadline_at)})",
    )


def _exceeded(task: Task) -> TaskError:
    return TaskError(
        type="DeadlineExceeded", message=f"task passed its deadline {_when(task.deadline_at)}"
    )


def _not_started(task: Task) -> TaskError:
    return TaskError(type="DeadlineExpired", message=f"not started by {_when(task.start_by)}")
