"""A run's verbs: how a worker claims a task, keeps it, reports on it and loses it.

These verbs (:class:`RunVerbs`) are part of every
:class:`~queuestore.store.base.TaskStore`; they live apart from the callers'
verbs because only workers, the reaper and the sweep use them.
"""

from __future__ import annotations

import builtins
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final, NamedTuple

from queuestore.core import validation as check
from queuestore.core.concurrency import ConcurrencyLimits
from queuestore.core.cursor import CursorKey
from queuestore.core.errors import (
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    TaskConflict,
    TaskNotFound,
)
from queuestore.core.models import (
    PARKED,
    TERMINAL,
    Artifact,
    Step,
    StepKind,
    StepStatus,
    Task,
    TaskError,
    TaskStatus,
    new_task_id,
)
from queuestore.core.owner import OwnerScope
from queuestore.core.watch import Listener, StatusChange
from queuestore.store.backend import (
    _RACE_RETRIES,
    UNSET,
    ListQuery,
    NewChild,
    StepOutcome,
    StoreBackend,
    SweepFilter,
    Unset,
    Write,
)
from queuestore.store.pending import PENDING_STATUSES

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
"""What an item of :meth:`RunVerbs.spawn` may hold."""


class RunVerbs(StoreBackend):
    """Claim, heartbeat, report and reap: a run's life under a lease, and the publish marks."""

    def claim(
        self,
        task_id: str,
        worker_id: str,
        lease: timedelta,
        *,
        limits: ConcurrencyLimits | None = None,
        timeout: timedelta | None = None,
    ) -> Task | None:
        """Take an unclaimed task for one run: ``working``, leased to ``worker_id``.

        Returns None when the task is claimed, parked, terminal or gone: the
        message that asked for this run is a duplicate and should be dropped;
        or when its start (``run_at``) has not come on the store's clock: the
        message came early, and the task should be published again for its
        start (the worker does: :func:`queuestore.run.jobs.execute`); or, with
        ``limits``, when its owner or its job has as many running tasks as
        its limit allows: the task should wait for a slot (:meth:`wait_for_slot`).
        The count and the claim are one atomic decision, so no number of
        racing workers runs more than the limit.

        The claim sets ``run_deadline_at``, when the run must end: the task's
        ``run_timeout``, else ``timeout`` (the job's), from now, and no later
        than its ``deadline_at``. It is refused past the task's ``start_by``
        (unless an earlier run started it) or its ``deadline_at``: the
        reaper ends such a task (:meth:`enforce_deadlines`).
        """
        write = Write(
            scope=OwnerScope(unscoped=True),
            from_statuses=PENDING_STATUSES,
            status=TaskStatus.WORKING,
            fence=None,
            claim=(check.worker_id(worker_id), _lease(lease)),
            mark_started=True,
            timeout=check.timeout(timeout),
        )
        task_id = check.task_id(task_id)
        if limits:
            return self._observed(self._claim_within(task_id, write, limits), write)
        return self._observed(self._write(task_id, write), write)

    def wait_for_slot(self, task_id: str, *, version: int) -> Task | None:
        """Leave a task whose claim its concurrency limit refused waiting, with no message.

        The task stays unclaimed and live, and its publish mark is cleared
        (a mark still to be written for its message is void: the version
        moves on), so that a hand-off (:meth:`unpublished` with ``freed_by``)
        or the sweep publishes it when a slot is free. None when the
        task moved on from ``version`` (claimed, cancelled, published again).
        """
        write = Write(
            scope=OwnerScope(unscoped=True),
            from_statuses=PENDING_STATUSES,
            expected_version=check.positive_int(version, "version"),
            fence=None,
            release=True,
        )
        task = self._write(check.task_id(task_id), write)
        if task is not None:
            for observer in self._observers:
                observer.waited_for_slot(task)
        return task

    def running_counts(self) -> dict[tuple[str | None, str], int]:
        """How many tasks workers hold now, by ``(owner, job name)``: the slots in use."""
        return self._running_counts()

    def heartbeat(self, task_id: str, worker_id: str, lease: timedelta) -> Task:
        """Extend the lease and return the task, so the worker sees a cancel.

        The lease is extended only while ``worker_id`` holds a ``working`` task;
        otherwise the task is returned unchanged and the worker should stop.

        Raises:
            TaskNotFound: the task was deleted.
        """
        task_id = check.task_id(task_id)
        task = self._extend_lease(task_id, check.worker_id(worker_id), _lease(lease))
        if task is None:
            task = self._fetch(task_id, OwnerScope(unscoped=True))
        if task is None:
            raise TaskNotFound(task_id)
        return task

    @contextmanager
    def subscribe_stops(self) -> Iterator[Listener]:
        """Listen for runs that someone other than their worker ended (a cancel).

        A worker listens here to hear of a cancel at once; unlike
        :meth:`subscribe`, a backend with a channel per kind of change wakes
        it for nothing else. Here, every change that ends a run is passed on,
        so the listener may return changes a worker made itself: callers look
        up each task id among their runs.
        """
        with self.subscribe() as listen:

            def stops(seconds: float) -> builtins.list[StatusChange]:
                return [
                    (task_id, status)
                    for task_id, status in listen(seconds)
                    if status in TERMINAL or status in PARKED
                ]

            yield stops

    def reap(
        self, now: datetime | None = None, *, max_lost_runs: int = 3, limit: int = 100
    ) -> builtins.list[Task]:
        """Recover tasks whose worker died: retry them, or fail them after ``max_lost_runs``.

        Each write is conditioned on the lease it found expired, so a worker
        that renews it meanwhile keeps its task. A retried task stays
        ``working`` but unclaimed, for its job to be
        published again; a failed one gets a ``WorkerLost`` error. Only lost
        runs count against ``max_lost_runs``: a run that ended in
        ``input_required`` was not lost (see :func:`lost_runs`).
        """
        now = None if now is None else check.aware(now, "now")
        check.positive_int(max_lost_runs, "max_lost_runs")
        reaped = []
        for task in self._expired_leases(now, check.limit(limit)):
            if lost_runs(task) >= max_lost_runs:
                error = TaskError(
                    type="WorkerLost",
                    message=f"worker {task.worker_id} stopped renewing its lease; "
                    f"{lost_runs(task)} of {max_lost_runs} runs lost",
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
            written = self._observed(self._write(task.id, write), write)
            if written is not None:
                reaped.append(written)
                for observer in self._observers:
                    observer.reaped(written)
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

    def retry(
        self,
        task_id: str,
        worker_id: str,
        *,
        error: TaskError | Mapping[str, Any],
        run_at: datetime,
        known: Task | None = None,
    ) -> Task:
        """End a run whose job failed and will run again: a job's own retry.

        A compare-and-set fenced by the run's lease, like :meth:`report`: the
        task stays ``working`` but unclaimed (as the reaper leaves a lost
        run's), ``error`` is appended to ``Task.errors`` with the run's
        ``attempt``, and ``run_at`` is when the next run may start (its
        backoff), for the sweep to publish as for a scheduled task. A
        cancel while it waits ends it as any cancel does.

        Args:
            known: the run's latest copy of the task; it spares the read first.

        Raises:
            InvalidTaskData: ``error`` or ``run_at`` is invalid; nothing is written.
            InvalidTransition: the task is no longer ``working``.
            LeaseLost: ``worker_id`` no longer holds the task.
            TaskNotFound: the task is gone.
        """
        task_id = check.task_id(task_id)
        worker_id = check.worker_id(worker_id)
        failed = check.record(TaskError, error, "error", self.max_payload_bytes)
        start = check.aware(run_at, "run_at")
        write = Write(
            scope=OwnerScope(unscoped=True),
            from_statuses=frozenset({TaskStatus.WORKING}),
            fence=worker_id,
            values={
                "run_at": start,
                "status_message": f"retrying: {failed.type}: {failed.message}"[:10_000],
            },
            release=True,
        )

        def appended(task: Task) -> dict[str, Any]:
            kept = failed.model_copy(update={"attempt": task.attempt})
            return {"errors": [*task.errors, kept]}

        task = self._read_modify_write(task_id, write, appended, known=known)
        for observer in self._observers:
            observer.retried(task)
        return task

    def suspend(
        self,
        task_id: str,
        worker_id: str,
        *,
        until: datetime | None = None,
        message: str | None,
        waits_on: Iterable[str] | None = None,
        known: Task | None = None,
    ) -> Task | None:
        """End a run to wait, until ``until`` or until child tasks end: neither failed nor lost.

        A compare-and-set fenced by the run's lease, like :meth:`retry`, but
        with no error: the task stays ``working`` but unclaimed, with
        ``status_message`` set to ``message``, and ``suspends`` counts the run,
        so the reaper never takes it for a lost one. No status changes, so no
        callback hears of it. A cancel while it waits ends it as any cancel does.

        With ``until``, ``run_at`` is set to it, for the sweep to publish the
        task as a scheduled start's. With ``waits_on`` (child task ids; empty
        for every child) the task is *parked*: no run may claim it and the
        sweep leaves it until none of those children is live, when
        :meth:`wake` (or the sweep's :meth:`wake_due`) makes it pending again.
        The park is refused, and None returned with nothing written, when none
        of them is live any more: the run may go on.

        Args:
            known: the run's latest copy of the task; it spares the read first.

        Raises:
            InvalidTaskData: ``until``, ``message`` or ``waits_on`` is invalid, or
                neither ``until`` nor ``waits_on`` is given; nothing is written.
            InvalidTransition: the task is no longer ``working``.
            LeaseLost: ``worker_id`` no longer holds the task.
            TaskNotFound: the task is gone.
        """
        task_id = check.task_id(task_id)
        worker_id = check.worker_id(worker_id)
        message = check.message(message)
        if waits_on is not None:
            if until is not None:
                raise InvalidTaskData("give until or waits_on, not both", field="waits_on")
            return self._parked(task_id, worker_id, message, waits_on)
        if until is None:
            raise InvalidTaskData("is required: when the run wakes", field="until")
        write = Write(
            scope=OwnerScope(unscoped=True),
            from_statuses=frozenset({TaskStatus.WORKING}),
            fence=worker_id,
            values={"run_at": check.aware(until, "until"), "status_message": message},
            release=True,
        )
        return self._read_modify_write(
            task_id, write, lambda task: {"suspends": task.suspends + 1}, known=known
        )

    def _parked(
        self, task_id: str, worker_id: str, message: str | None, waits_on: Iterable[str]
    ) -> Task | None:
        """:meth:`suspend` with ``waits_on``: park the task, or None if nothing waited is live."""
        if isinstance(waits_on, str):
            raise InvalidTaskData("must be a list of task ids", field="waits_on")
        ids = [check.task_id(child, "waits_on") for child in waits_on]
        parked = self._park(task_id, worker_id, message, ids)
        if parked is None:
            self._explain_refusal(task_id, _held_by(worker_id))
        return parked

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
            self._explain_refusal(parent_id, _held_by(worker_id))
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
        held = _held_by(worker_id)
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

    def mark_published(self, task_id: str, *, version: int | None = None) -> None:
        """Record that the message for the task's next run was published.

        Args:
            version: mark the task only while it is still at this version, the
                one the message was published for.
        """
        if version is not None:
            check.positive_int(version, "version")
        self._mark_published([(check.task_id(task_id), version)])

    def mark_published_many(self, tasks: Iterable[tuple[str, int]]) -> None:
        """:meth:`mark_published` for many ``(task_id, version)`` pairs, in one write.

        A task whose version moved on since its message went out (claimed,
        released, cancelled) is left alone.
        """
        marks: builtins.list[tuple[str, int | None]] = [
            (check.task_id(task_id), check.positive_int(version, "version"))
            for task_id, version in tasks
        ]
        if marks:
            self._mark_published(marks)

    def unpublished(
        self,
        older_than: timedelta,
        *,
        republish_after: timedelta | None = None,
        ahead: timedelta = timedelta(0),
        limit: int = 100,
        limits: ConcurrencyLimits | None = None,
        freed_by: Task | None = None,
    ) -> builtins.list[Task]:
        """Unclaimed tasks whose message never went out, in the order they became due.

        Args:
            older_than: skip tasks written more recently, which ``submit`` may
                still be publishing.
            republish_after: also return tasks published this long ago and
                still unclaimed, whose message a broker may have lost (a worker
                killed with prefetched messages on a broker that does not
                redeliver). A duplicate message is harmless: the claim drops it.
            ahead: also return scheduled tasks (``run_at``) that start within
                this long, to publish with a countdown to their start; a
                scheduled task starting later is never returned. A scheduled
                task that ``submit`` did not publish (its start was more than
                ``ahead`` past its creation) needs no ``older_than``.
            limits: return no more tasks of an owner, or of a job, than its
                limit leaves free slots for (counting the running tasks); the
                tasks of owners and jobs at their limit wait.
            freed_by: with ``limits``, only the tasks that may take the slot
                this task's run freed: its owner's, where the owner's limit
                applies, and its job's, where the job's does (a hand-off).
        """
        older_than = check.ttl(older_than) or timedelta(0)
        republish = None if republish_after is None else check.ttl(republish_after)
        ahead = check.ttl(ahead) or timedelta(0)
        limit = check.limit(limit)
        if not limits:
            return self._unpublished(older_than, republish, ahead, limit)
        slots = limits.slots(self._running_counts())
        among = SweepFilter(full_owners=slots.full_owners(), full_jobs=slots.full_jobs())
        if freed_by is not None:
            caps = limits.caps(freed_by.owner, freed_by.name)
            if caps == (None, None):
                return []
            among = among._replace(
                owner=freed_by.owner if caps.owner is not None else None,
                job=freed_by.name if caps.job is not None else None,
            )
        due = self._unpublished(older_than, republish, ahead, limit, among)
        return [task for task in due if slots.take(task)]


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


def _held_by(worker_id: str) -> Write:
    """The conditions of a run's write: a working task its worker holds."""
    return Write(
        scope=OwnerScope(unscoped=True),
        from_statuses=frozenset({TaskStatus.WORKING}),
        fence=worker_id,
    )


def lost_runs(task: Task) -> int:
    """How many runs of a working task were lost, counting its current one.

    Every claim adds one to ``attempt``: the first run, each run after an
    answer (``provide_input``), each run after its job's retry policy retried
    it, each run after a suspended one, and each retry after a lost worker.
    The answers are counted in ``answers``, the job's retries in ``errors`` and
    the suspended runs in ``suspends``, so the rest are the first run and the
    lost runs' retries.
    """
    return task.attempt - len(task.answers) - len(task.errors) - task.suspends


def _lease(value: object) -> timedelta:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidTaskData("must be a positive timedelta", field="lease")
    return value


def stops_a_run(write: Write) -> bool:
    """Whether ``write`` ends a task's run from outside it: a caller's cancel or update.

    It releases the task (terminal or parked) without being fenced to a
    worker: a run's own writes and the reaper's are fenced to the run's worker.
    A time-out (:meth:`RunVerbs.time_out`) is fenced yet ends the run from outside.
    """
    return (write.release and write.fence is UNSET) or write.hold
