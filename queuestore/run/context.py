"""What a running job sees of its task: :class:`TaskContext`, and the signals that end a run.

A context is the job's view over one :class:`~queuestore.run.lease.Run`: it checks
what the job reports, and the run batches it (see :mod:`queuestore.run.lease`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, ParamSpec, overload

from pydantic import JsonValue

from queuestore.core import validation as check
from queuestore.core.errors import InvalidTaskData
from queuestore.core.flow import retry_after
from queuestore.core.models import Artifact, Task
from queuestore.run.children import Children, FindJob, spawn_arguments
from queuestore.run.lease import JobCancelled, Run
from queuestore.run.pauses import pause_and_wait
from queuestore.run.steps import StepLog
from queuestore.run.suspend import Suspended
from queuestore.store.backend import UNSET, Unset

P = ParamSpec("P")

__all__ = ["InputRequested", "JobCancelled", "Suspended", "TaskContext"]


class InputRequested(BaseException):
    """Ends the current run in ``input_required``; raised by :meth:`TaskContext.request_input`."""

    def __init__(self, prompt: str) -> None:
        super().__init__(prompt)
        self.prompt = prompt


class TaskContext:
    """What a running job sees of its task, and how it reports back.

    Reports (:meth:`progress`, :meth:`set_message`, :meth:`add_artifact`) are
    checked at once and written in batches: at most every
    ``TaskQueue.report_interval``, by the worker's heartbeat thread, and
    finally together with the job's outcome, so a job never waits on the
    database to report. Each batch is one compare-and-set fenced by this run's
    lease; :meth:`flush` writes the batch now. With a ``report_interval`` of
    zero every report is written before the call returns.

    When the task was cancelled (or reassigned after a lost lease) the next
    report or :meth:`raise_if_cancelled` raises :class:`JobCancelled`.
    """

    def __init__(self, run: Run, *, find_job: FindJob | None = None) -> None:
        self._run = run
        self._questions = 0
        self._unnamed_sleeps = 0
        self._steps = StepLog(run)
        self._children = Children(run, self._steps, find_job)

    @property
    def task(self) -> Task:
        """The task as this run last wrote or saw it."""
        return self._run.task

    @property
    def task_id(self) -> str:
        """The id of the task this run works on."""
        return self._run.task_id

    @property
    def worker_id(self) -> str:
        """This run's fencing token: the worker that holds the task's lease."""
        return self._run.worker_id

    @property
    def attempt(self) -> int:
        """Which run this is: 1 for the first; each answered question, each retry
        of the job's retry policy and each retry after a lost worker starts another."""
        return self._run.task.attempt

    @property
    def parent_id(self) -> str | None:
        """The task whose run spawned this one; None for a root task."""
        return self._run.task.parent_id

    @property
    def run_started_at(self) -> datetime:
        """When this run's claim took the task, on the store's clock."""
        return self._run.claimed_at

    @property
    def cancelled(self) -> bool:
        """Whether the task was cancelled (or taken from this run) as far as this run knows."""
        return self._run.stopped

    def raise_if_cancelled(self) -> None:
        """Stop here if the task was cancelled; call it in long loops.

        Raises:
            JobCancelled: the task was cancelled or its lease lost.
        """
        if self._run.stopped:
            raise self._run.stopped_error()

    def progress(self, fraction: float | None, message: str | Unset | None = UNSET) -> None:
        """Report how far the job got (0..1), optionally with a status message.

        Raises:
            InvalidTaskData: ``fraction`` is not within 0..1, or the message is invalid.
        """
        values: dict[str, Any] = {"progress": check.progress(fraction)}
        if message is not UNSET:
            values["status_message"] = check.message(message)
        self._run.report(values)

    def set_message(self, message: str | None) -> None:
        """Set the human-readable status message.

        Raises:
            InvalidTaskData: the message is invalid.
        """
        self._run.report({"status_message": check.message(message)})

    def add_artifact(self, artifact: Artifact | Mapping[str, Any], *, append: bool = False) -> None:
        """Publish an artifact; with ``append`` its parts extend the one with the same id.

        Raises:
            InvalidTaskData: the artifact is invalid or over the payload limit.
        """
        checked = check.artifact(artifact, self._run.publisher.store.max_payload_bytes)
        self._run.report({}, (checked, append))

    def flush(self) -> None:
        """Write what the job reported and was not written yet, before returning.

        Raises:
            JobCancelled: the task was cancelled or its lease lost.
        """
        self.raise_if_cancelled()
        self._run.flush()

    def step(
        self, name: str, body: Callable[P, Any], /, *args: P.args, **kwargs: P.kwargs
    ) -> JsonValue:
        """Run ``body(*args, **kwargs)`` as the named step ``name``, once for the task.

        When the body returns, its result (JSON, within the store's payload
        limit) is recorded under the task and ``name``, fenced by this run's
        lease, and returned as stored. Any later run of the task -- after a
        crash, a retry, an answer, a sleep or a wait for children -- gets that
        result without calling the body. A body that raises has its error
        recorded and the exception goes on; the next run runs it again.

        A step's body runs at least once; its recorded result exists exactly
        once. Steps are keyed by name, not by the order of the calls: give
        each call in a run its own name (a name used twice in one run is
        refused), and keep a name for the same work across deploys. Steps may
        nest; a sleep, a wait or a question inside a step's body is refused.

        Raises:
            InvalidTaskData: a bad or reused name, or a result the store refuses.
            JobCancelled: the task was cancelled or its lease lost.
        """
        return self._steps.run(name, body, *args, **kwargs)

    @overload
    def sleep(self, duration: timedelta | float, /) -> None: ...
    @overload
    def sleep(self, name: str, duration: timedelta | float, /) -> None: ...
    def sleep(
        self, name: str | timedelta | float, duration: timedelta | float | None = None, /
    ) -> None:
        """Sleep ``duration`` (a timedelta, or seconds) without holding a worker.

        The first call records its wake time and ends the run: the task stays
        ``working`` with no worker slot and no broker message held, and the
        store runs the job again at that time (the sweep publishes it, as for
        ``run_at``). That run passes this call at once, with finished steps
        skipped. A cancel meanwhile means it never wakes. A duration of zero or
        less returns at once.

        ``ctx.sleep(duration)`` names the sleep by its place among this run's
        unnamed sleeps (``sleep 1``, ``sleep 2``...), so a job must reach them
        in the same order on every run, as DBOS's ``sleep`` asks; a named one,
        ``ctx.sleep("cool down", duration)``, is found by its name wherever it
        comes, like a step (one name per sleep of the job).

        Raises:
            InvalidTaskData: a bad duration, or a bad or reused name.
        """
        name, duration = self._sleep_name(name, duration)
        if isinstance(duration, int | float) and not isinstance(duration, bool):
            duration = timedelta(seconds=duration)
        if not isinstance(duration, timedelta):
            raise InvalidTaskData("must be a timedelta or a number of seconds", field="duration")
        if duration <= timedelta(0):
            return
        self._steps.sleep(name, lambda now: now + duration)

    @overload
    def sleep_until(self, when: datetime, /) -> None: ...
    @overload
    def sleep_until(self, name: str, when: datetime, /) -> None: ...
    def sleep_until(self, name: str | datetime, when: datetime | None = None, /) -> None:
        """Sleep until ``when`` (timezone-aware) without holding a worker; see :meth:`sleep`
        (``ctx.sleep_until(when)``, or named, ``ctx.sleep_until(name, when)``).

        Raises:
            InvalidTaskData: a naive ``when``, or a bad or reused name.
        """
        name, when = self._sleep_name(name, when)
        until = check.aware(when, "when").astimezone(UTC)
        self._steps.sleep(name, lambda _: until)

    def _sleep_name(self, name: object, value: object) -> tuple[str, Any]:
        """(name, value) of a sleep called with both, or with the value alone (named by
        its place among the run's unnamed sleeps)."""
        if value is not None:
            return check.step_name(name), value
        if isinstance(name, str):
            raise InvalidTaskData("a named sleep needs its duration or time", field="duration")
        self._unnamed_sleeps += 1
        return f"sleep {self._unnamed_sleeps}", name

    def pause(
        self, key: str | None = None, *, until: float | timedelta | datetime | str
    ) -> NoReturn:
        """Pause ``key`` everywhere until ``until``, and run this task again after it.

        For a provider that said "too many requests": no task of ``key`` (by
        default this task's own key, as its job's rate limit takes it, else its
        job name) starts on any worker until then; this run ends, holding no
        worker and no broker message, and the job runs again from its start
        (finished steps skipped). ``until`` is seconds, a duration, a
        timezone-aware time, or an HTTP ``Retry-After`` value. Raising
        :class:`~queuestore.RetryAfter` does the same.

        Raises:
            InvalidTaskData: ``until`` is none of those, or ``key`` is empty.
        """
        try:
            when = retry_after(until)
        except ValueError as exc:
            raise InvalidTaskData(str(exc), field="until") from None
        raise pause_and_wait(self._run, key, when)

    def spawn(
        self,
        job: Any,
        input: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        timeout: timedelta | None = None,
        start_by: datetime | None = None,
        deadline: datetime | None = None,
        priority: int | None = None,
        context_id: str | None = None,
        ttl: timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Task:
        """Start a child task running ``job`` (a :class:`~queuestore.Job` or its name).

        The child is a task of its own (``parent_id`` is this task's), owned
        by this task's owner; its context, ttl and priority default to this
        task's, and its deadlines are no later than this task's ``deadline``.
        ``key`` names it among this task's children -- by default its job and
        input, so the same work is one child: a run that spawns again after a
        crash, a sleep or a wait gets the child it started, and starts nothing
        twice. Give distinct keys to run the same job and input twice.

        Raises:
            InvalidTaskData: bad arguments, input the registered job cannot take,
                or a tree deeper than the queue allows.
            JobCancelled: the task was cancelled or its lease lost.
        """
        child = spawn_arguments(
            job,
            input,
            key=key,
            timeout=timeout,
            start_by=start_by,
            deadline=deadline,
            priority=priority,
            context_id=context_id,
            ttl=ttl,
            metadata=metadata,
        )
        return self._children.spawn_many([child])[0]

    def spawn_many(self, children: Iterable[Mapping[str, Any]]) -> list[Task]:
        """:meth:`spawn` for many children, in one transaction: each a mapping of its
        arguments (``job`` required). Returns them in the order given."""
        return self._children.spawn_many(children)

    def children(self) -> list[Task]:
        """This task's children, oldest first, as the store holds them now."""
        return self._children.all()

    def wait(self, children: Iterable[Task | str] | None = None) -> list[Task]:
        """Wait until ``children`` (tasks or ids; None: every child) have all ended.

        When they have, they are returned in the order given (every child
        oldest first) with their status, result or error. Until then this ends
        the run without holding a worker slot: the task stays ``working``,
        parked, and runs again from the start when the last of them ends
        (steps, sleeps and children done are not repeated); this call then
        returns them at once.

        Raises:
            InvalidTaskData: a task that is not a child of this one.
        """
        return self._children.wait(children)

    def wait_results(self, children: Iterable[Task | str] | None = None) -> list[JsonValue]:
        """:meth:`wait`, then the children's results in the same order.

        Raises:
            ChildFailed: a child did not complete (the first such, in order).
        """
        return self._children.results(children)

    def request_input(self, prompt: str) -> JsonValue:
        """Ask the caller a question and return the answer.

        The first time, this ends the run: the task goes to ``input_required``
        with ``prompt`` as its message, and no worker waits. ``TaskQueue.resume``
        stores the answer and runs the job again from the start; this call then
        returns the answer. A job may ask several questions: each call returns
        the answer to the question asked at the same point.
        """
        self._steps.refuse_inside_a_step("request_input")
        index = self._questions
        self._questions += 1
        if index < len(self._run.task.answers):
            return self._run.task.answers[index]
        raise InputRequested(prompt)
