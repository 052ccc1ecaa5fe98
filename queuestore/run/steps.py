"""Named steps of a job: a unit of work whose result the store keeps, so no later run repeats it.

``ctx.step("fetch", fetch, url)`` runs ``fetch(url)`` once: its JSON result is
recorded under the task and the name ``"fetch"``, fenced by the run's lease,
and every later run of the task (after a crash, a retry, an answer, a sleep
or a wait for children) gets the recorded result without calling ``fetch``.
Steps are keyed by name, never by the order of the calls: a deploy that adds,
removes or reorders steps keeps what was recorded.

The guarantee: a step's body runs at least once; its recorded result exists
exactly once. A crash between the body's effect and the record's commit runs
the body again on the next run; once recorded, every run gets that result.

A :class:`StepLog` is one job call's view of the task's steps: the names it
used (each once), and the steps recorded by earlier runs, read once, at the
first step of a run that has a predecessor.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import JsonValue

from queuestore.core import validation as check
from queuestore.core.errors import (
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    TaskNotFound,
)
from queuestore.core.models import Step, StepKind, StepStatus, TaskError
from queuestore.run.interrupts import interrupts
from queuestore.run.lease import Run, riding_out_outages
from queuestore.run.suspend import Suspended
from queuestore.store.backend import StepOutcome

T = TypeVar("T")

__all__ = ["StepLog", "error_of", "step"]


def error_of(exc: BaseException, attempt: int | None = None) -> TaskError:
    """The :class:`TaskError` an exception of a job (or of a step) is recorded as.

    Args:
        exc: what the job (or the step) raised.
        attempt: the run that raised it (``Task.attempt``), where known.
    """
    kind = type(exc)
    qualified = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else (f"{kind.__module__}.{kind.__qualname__}")
    )
    # The message is the job's text: keep it storable (PostgreSQL refuses NUL).
    message = str(exc).replace("\x00", "\ufffd")[:10_000]
    return TaskError(type=qualified, message=message, attempt=attempt)


class StepLog:
    """The steps of one call of a job: the names it used, and those earlier runs recorded.

    Args:
        run: the run the job is called in.
    """

    def __init__(self, run: Run) -> None:
        self._run = run
        self._used: set[str] = set()
        self._kept: dict[str, Step] | None = None
        self.depth = 0
        """How many step bodies are running (steps may nest)."""

    def take(self, name: object, kind: StepKind) -> tuple[str, Step | None]:
        """Claim ``name`` for this call, and the step an earlier run recorded under it.

        Raises:
            InvalidTaskData: a bad name, a name used already in this call, or
                the name of a step of another kind.
        """
        checked = check.step_name(name)
        if checked in self._used:
            raise InvalidTaskData(
                f"{checked!r} already ran in this run: give each call its own name",
                field="step",
                task_id=self._run.task_id,
            )
        self._used.add(checked)
        kept = self._earlier().get(checked)
        if kept is not None and kept.kind is not kind:
            raise InvalidTaskData(
                f"{checked!r} is a {kept.kind} of this task, not a {kind}",
                field="step",
                task_id=self._run.task_id,
            )
        return checked, kept

    def _earlier(self) -> dict[str, Step]:
        """The steps earlier runs recorded, read once (a first run has none to read)."""
        if self._kept is None:
            if self._run.task.attempt <= 1:
                self._kept = {}
            else:
                store, task_id = self._run.publisher.store, self._run.task_id
                steps = self.stored(lambda: store.run_steps(task_id))
                self._kept = {step.name: step for step in steps}
        return self._kept

    def record(self, outcome: StepOutcome) -> Step:
        """Record ``outcome`` under the run's lease, riding out a database restart.

        Raises:
            InvalidTaskData: the result is not JSON or too large.
            JobCancelled: the task was cancelled or its lease lost.
        """
        store, run = self._run.publisher.store, self._run
        recorded = self.stored(lambda: store.record_step(run.task_id, run.worker_id, outcome))
        assert self._kept is not None  # read by take()
        self._kept[recorded.name] = recorded
        return recorded

    def stored(self, call: Callable[[], T]) -> T:
        """A store call of the run's, riding out a database restart; a lost task stops the run.

        Raises:
            JobCancelled: the task was cancelled or its lease lost.
        """
        try:
            with interrupts.deferred():
                return riding_out_outages(call, self._run.task_id)
        except (InvalidTransition, LeaseLost, TaskNotFound) as exc:
            self._run.stop()
            raise self._run.stopped_error() from exc

    def run(self, name: object, body: Callable[..., Any], *args: Any, **kwargs: Any) -> JsonValue:
        """Run ``body`` as the step ``name`` unless an earlier run completed it; its result.

        Raises:
            InvalidTaskData: a bad or reused name, or a result that is not JSON
                or too large (the body ran: a later run runs it again).
            JobCancelled: the task was cancelled or its lease lost.
        """
        checked, kept = self.take(name, StepKind.STEP)
        if kept is not None and kept.status is StepStatus.COMPLETED:
            return kept.result
        self._run.report({"status_message": f"step {checked}"})
        started = time.monotonic()
        self.depth += 1
        try:
            value = body(*args, **kwargs)
        except Exception as exc:
            self.depth -= 1
            self.record(_ended(checked, started, error=error_of(exc, self._run.task.attempt)))
            raise
        except BaseException:  # a stop (cancel, time-out) or a suspend: nothing to record
            self.depth -= 1
            raise
        self.depth -= 1
        return self.record(_ended(checked, started, result=value)).result

    def sleep(self, name: object, wake: Callable[[datetime], datetime]) -> None:
        """Sleep ``name`` until ``wake(now)``: the run ends, and a later run passes it.

        The first call of a name records its wake time as a step of kind
        ``sleep`` (``now`` on the store's clock, as this run reckons it), then
        ends the run (:class:`Suspended`). A run that finds it recorded
        returns once it started at or after that time, else ends again: it
        came early (its park was lost and the reaper gave it a run).

        Raises:
            InvalidTaskData: a bad or reused name, or one of another kind.
            JobCancelled: the task was cancelled or its lease lost.
            Suspended: the run ends here until the wake time.
        """
        self.refuse_inside_a_step("sleep")
        checked, kept = self.take(name, StepKind.SLEEP)
        if kept is None:
            until = wake(self._run.store_now())
            self.record(
                StepOutcome(
                    name=checked,
                    kind=StepKind.SLEEP,
                    status=StepStatus.COMPLETED,
                    result={"until": until.isoformat()},
                )
            )
        else:
            until = _wake_time(kept)
        if self._run.claimed_at >= until:
            return
        raise Suspended(until, f"sleeping until {until:%Y-%m-%dT%H:%M:%SZ} ({checked})")

    def refuse_inside_a_step(self, what: str) -> None:
        """Refuse a call that ends the run (a sleep, a wait...) inside a step's body.

        Raises:
            InvalidTaskData: a step's body is running.
        """
        if self.depth:
            raise InvalidTaskData(
                f"{what} ends the run: call it between steps, not inside one",
                field="step",
                task_id=self._run.task_id,
            )


def _ended(
    name: str, started: float, *, result: Any = None, error: TaskError | None = None
) -> StepOutcome:
    return StepOutcome(
        name=name,
        kind=StepKind.STEP,
        status=StepStatus.COMPLETED if error is None else StepStatus.FAILED,
        result=result,
        error=error,
        elapsed=timedelta(seconds=time.monotonic() - started),
    )


def _wake_time(sleep: Step) -> datetime:
    """The wake time a recorded sleep holds."""
    until = sleep.result.get("until") if isinstance(sleep.result, dict) else None
    if not isinstance(until, str):
        raise InvalidTaskData(f"sleep {sleep.name!r} holds no wake time", field="step")
    return datetime.fromisoformat(until).astimezone(UTC)


def step(name: str | None = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Make a function of ``(ctx, *args, **kwargs)`` a named step of the job that calls it.

    ``@step()`` names it by its qualified name, ``@step("fetch")`` by the name
    given. A call ``fetch(ctx, url, step_key="a")`` runs as the step
    ``"fetch:a"``: give each call in a run its own key when a job calls the
    same step more than once. See :meth:`TaskContext.step
    <queuestore.TaskContext.step>` for what a step guarantees.
    """

    def wrap(function: Callable[..., T]) -> Callable[..., T]:
        base = name or function.__qualname__

        @functools.wraps(function)
        def call(ctx: Any, *args: Any, step_key: str | None = None, **kwargs: Any) -> T:
            key = base if step_key is None else f"{base}:{step_key}"
            result: T = ctx.step(key, function, ctx, *args, **kwargs)
            return result

        return call

    return wrap
