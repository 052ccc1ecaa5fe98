"""Deadlines the store enforces: a start-by, a task's deadline, and each run's timeout.

Every backend must refuse a claim past a task's ``start_by`` (unless it
started) or ``deadline_at``, set each run's ``run_deadline_at`` at its claim,
fail a run past it (keeping its slot until released) and refuse the run's
later writes, and fail the tasks the reaper finds past a deadline.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from queuestore import InvalidTaskData, InvalidTransition, Task, TaskStatus, TaskStore
from queuestore.core.models import StepKind, StepStatus
from queuestore.store.backend import StepOutcome

LEASE = timedelta(minutes=5)
SECOND = timedelta(seconds=1)


def claimed(
    store: TaskStore, worker: str = "w1", *, job_timeout: timedelta | None = None, **create: object
) -> Task:
    task = store.create("x.y", **create)  # type: ignore[arg-type]
    held = store.claim(task.id, worker, LEASE, timeout=job_timeout)
    assert held is not None
    return held


def started_at_claim(task: Task) -> datetime:
    assert task.lease_expires_at is not None
    return task.lease_expires_at - LEASE


def test_a_task_not_started_by_its_start_by_never_runs(store: TaskStore) -> None:
    passed = store.create("x.y", start_by=datetime.now(UTC) - SECOND)
    later = store.create("x.y", start_by=datetime.now(UTC) + timedelta(hours=1))

    assert store.claim(passed.id, "w1", LEASE) is None
    enforced = store.enforce_deadlines()

    assert [t.id for t in enforced.expired] == [passed.id]
    failed = store.get(passed.id)
    assert (failed.status, failed.started_at, failed.attempt) == (TaskStatus.FAILED, None, 0)
    assert failed.error is not None
    assert failed.error.type == "DeadlineExpired"
    assert store.claim(later.id, "w1", LEASE) is not None


def test_a_task_that_started_is_not_held_to_its_start_by(store: TaskStore) -> None:
    task = claimed(store, start_by=datetime.now(UTC) + timedelta(milliseconds=50))
    store.suspend(task.id, "w1", until=datetime.now(UTC), message="later")

    assert store.enforce_deadlines(datetime.now(UTC) + SECOND).expired == []
    assert store.claim(task.id, "w2", LEASE) is not None


def test_the_claim_sets_when_the_run_must_end(store: TaskStore) -> None:
    deadline = datetime.now(UTC) + timedelta(hours=1)
    own = claimed(store, timeout=timedelta(seconds=30), job_timeout=timedelta(seconds=5))
    jobs = claimed(store, job_timeout=timedelta(seconds=5))
    capped = claimed(store, timeout=timedelta(days=1), deadline=deadline)
    unbounded = claimed(store)

    assert own.run_timeout == timedelta(seconds=30)
    assert own.run_deadline_at == started_at_claim(own) + timedelta(seconds=30)
    assert jobs.run_deadline_at == started_at_claim(jobs) + timedelta(seconds=5)
    assert capped.run_deadline_at == deadline
    assert unbounded.run_deadline_at is None
    assert store.get(own.id) == own


def test_a_run_past_its_deadline_fails_and_keeps_its_slot_until_released(
    store: TaskStore,
) -> None:
    task = claimed(store, timeout=timedelta(milliseconds=100))
    assert task.run_deadline_at is not None
    assert store.enforce_deadlines(task.run_deadline_at - SECOND).timed_out == []

    (timed_out,) = store.enforce_deadlines(task.run_deadline_at).timed_out

    assert (timed_out.status, timed_out.worker_id) == (TaskStatus.FAILED, "w1")
    assert timed_out.error is not None
    assert timed_out.error.type == "RunTimedOut"
    assert timed_out.finished_at is not None
    assert store.running_counts() == {(None, "x.y"): 1}
    with pytest.raises(InvalidTransition):
        store.report(task.id, "w1", status=TaskStatus.COMPLETED, result="late")
    with pytest.raises(InvalidTransition):
        store.record_step(
            task.id, "w1", StepOutcome(name="s", kind=StepKind.STEP, status=StepStatus.COMPLETED)
        )
    assert store.enforce_deadlines(task.run_deadline_at).unresponsive == []
    grace = timedelta(seconds=10)
    (unresponsive,) = store.enforce_deadlines(
        task.run_deadline_at + grace, grace=grace
    ).unresponsive
    assert unresponsive.id == task.id

    assert store.release_held(task.id, "w1") is True

    released = store.get(task.id)
    assert (released.worker_id, released.version) == (None, timed_out.version)
    assert store.running_counts() == {}
    assert store.release_held(task.id, "w1") is False


def test_the_run_itself_times_out_its_task(store: TaskStore) -> None:
    task = claimed(store, timeout=timedelta(minutes=1))

    timed_out = store.time_out(task.id, "w1", known=task)

    assert (timed_out.status, timed_out.worker_id) == (TaskStatus.FAILED, "w1")
    with pytest.raises(InvalidTransition):
        store.time_out(task.id, "w1")


def test_a_run_cut_short_by_the_tasks_deadline_exceeds_it(store: TaskStore) -> None:
    deadline = datetime.now(UTC) + timedelta(minutes=1)
    task = claimed(store, deadline=deadline, job_timeout=timedelta(hours=1))

    (failed,) = store.enforce_deadlines(deadline).timed_out

    assert failed.id == task.id
    assert failed.error is not None
    assert failed.error.type == "DeadlineExceeded"


def test_a_live_task_no_run_holds_fails_past_its_deadline(store: TaskStore) -> None:
    deadline = datetime.now(UTC) + timedelta(minutes=1)
    queued = store.create("x.y", deadline=deadline)
    parked = claimed(store, deadline=deadline)
    store.report(parked.id, "w1", status=TaskStatus.INPUT_REQUIRED)
    sleeping = claimed(store, "w2", deadline=deadline)
    store.suspend(sleeping.id, "w2", until=deadline + timedelta(hours=1), message="sleeping")

    exceeded = store.enforce_deadlines(deadline).exceeded

    assert {t.id for t in exceeded} == {queued.id, parked.id, sleeping.id}
    for task in exceeded:
        assert task.status is TaskStatus.FAILED
        assert task.error is not None
        assert task.error.type == "DeadlineExceeded"
    assert store.enforce_deadlines(deadline).exceeded == []


def test_a_claim_past_the_tasks_deadline_is_refused(store: TaskStore) -> None:
    task = store.create("x.y", deadline=datetime.now(UTC) - SECOND)

    assert store.claim(task.id, "w1", LEASE) is None


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"start_by": datetime(2030, 1, 1)}, "start_by"),
        ({"deadline": "tomorrow"}, "deadline"),
        ({"timeout": timedelta(0)}, "timeout"),
        ({"timeout": 30}, "timeout"),
    ],
)
def test_bad_deadlines_are_refused(store: TaskStore, given: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidTaskData) as refused:
        store.create("x.y", **given)  # type: ignore[arg-type]

    assert refused.value.field == field
    assert store.count() == 0
