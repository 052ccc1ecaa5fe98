"""A run's verbs: how a worker claims a task, keeps it, reports on it and loses it.

These verbs (:class:`RunVerbs`) are part of every
:class:`~queuestore.store.base.TaskStore`; they live apart from the callers'
verbs because only workers, the reaper and the sweep use them.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from queuestore.core import validation as check
from queuestore.core.concurrency import ConcurrencyLimits
from queuestore.core.errors import (
    InvalidTaskData,
    TaskNotFound,
)
from queuestore.core.flow import FlowControl
from queuestore.core.models import (
    PARKED,
    TERMINAL,
    Artifact,
    Task,
    TaskError,
    TaskStatus,
)
from queuestore.core.owner import OwnerScope
from queuestore.core.watch import Listener, StatusChange
from queuestore.store.backend import (
    UNSET,
    StoreBackend,
    SweepFilter,
    Unset,
    Write,
    held_by,
)
from queuestore.store.pending import PENDING_STATUSES


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
        flow: FlowControl | None = None,
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

        With ``flow``, it is refused while a pause of the task's job, owner or
        key is in force, and while the starts its rate limit counted over the
        last period leave no room for its cost; an admitted claim logs its
        start in the same transaction. The task should then wait
        (:meth:`wait_for_flow`).
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
        if limits or flow is not None:
            claimed = self._claim_within(task_id, write, limits or None, flow)
            return self._observed(claimed, write)
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
                    attempt=task.attempt,
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

        An ``error`` without an ``attempt`` gets the run's, and a terminal
        ``status`` without a ``status_message`` gets the message of the end
        (the error's summary, or none), as for every terminal write.

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
        if isinstance(values.get("error"), TaskError):
            values["error"] = self._of_the_run(values["error"], task_id, worker_id, known)
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

    def _of_the_run(
        self, error: TaskError, task_id: str, worker_id: str, known: Task | None
    ) -> TaskError:
        """``error`` with the ``attempt`` of the run ``worker_id`` holds, unless it has one.

        The run's copy (``known``) gives it; without one, a read does. A task
        the worker no longer holds leaves the error as it is: the write that
        follows is refused.
        """
        if error.attempt is not None:
            return error
        held = known if known is not None and known.id == task_id else None
        if held is None or held.worker_id != worker_id:
            held = self._fetch(task_id, OwnerScope(unscoped=True))
        if held is None or held.worker_id != worker_id:
            return error
        return error.model_copy(update={"attempt": held.attempt})

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
        message = f"retrying: {failed.summary}"

        def appended(task: Task) -> dict[str, Any]:
            kept = failed.model_copy(update={"attempt": task.attempt})
            return {"errors": [*task.errors, kept]}

        task = self._end_run_to_wait(
            task_id, worker_id, run_at=start, message=message, counted=appended, known=known
        )
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
        return self._end_run_to_wait(
            task_id,
            worker_id,
            run_at=check.aware(until, "until"),
            message=message,
            counted=lambda task: {"suspends": task.suspends + 1},
            known=known,
        )

    def _end_run_to_wait(
        self,
        task_id: str,
        worker_id: str,
        *,
        run_at: datetime,
        message: str | None,
        counted: Callable[[Task], Mapping[str, Any]],
        known: Task | None,
    ) -> Task:
        """The write of :meth:`retry` and :meth:`suspend`: ``working``, unclaimed, until ``run_at``.

        Fenced by the run's lease; ``counted`` adds what the run's end counts
        (an error, a suspend), computed from the row it is written over.
        """
        write = Write(
            scope=OwnerScope(unscoped=True),
            from_statuses=frozenset({TaskStatus.WORKING}),
            fence=worker_id,
            values={"run_at": run_at, "status_message": message},
            release=True,
        )
        return self._read_modify_write(task_id, write, counted, known=known)

    def _parked(
        self, task_id: str, worker_id: str, message: str | None, waits_on: Iterable[str]
    ) -> Task | None:
        """:meth:`suspend` with ``waits_on``: park the task, or None if nothing waited is live."""
        if isinstance(waits_on, str):
            raise InvalidTaskData("must be a list of task ids", field="waits_on")
        ids = [check.task_id(child, "waits_on") for child in waits_on]
        parked = self._park(task_id, worker_id, message, ids)
        if parked is None:
            self._explain_refusal(task_id, held_by(worker_id))
        return parked

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
