"""A job's own retry in the store: ``retry`` ends a run as a wait for the next one.

Every backend must keep each retried run's error, release the task unclaimed
with its next start in ``run_at``, fence the write to the run's lease, and
leave the task cancellable while it waits (tests/worker/test_retries.py runs
the policy that calls it).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from queuestore import (
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    Task,
    TaskError,
    TaskStatus,
    TaskStore,
)
from queuestore.store.observer import StoreObserver
from queuestore.store.runs import lost_runs

LEASE = timedelta(minutes=5)
AHEAD = timedelta(seconds=12)


def claimed(store: TaskStore, worker: str = "w1") -> Task:
    task = store.claim(store.create("x.y").id, worker, LEASE)
    assert task is not None
    return task


def test_a_retry_keeps_the_error_and_waits_unclaimed_for_its_start(store: TaskStore) -> None:
    task = claimed(store)
    start = datetime.now(UTC) + timedelta(seconds=5)

    waiting = store.retry(
        task.id, "w1", error=TaskError(type="Timeout", message="slow"), run_at=start
    )

    assert waiting.status is TaskStatus.WORKING
    assert (waiting.worker_id, waiting.lease_expires_at) == (None, None)
    assert waiting.run_at == start
    assert waiting.errors == [TaskError(type="Timeout", message="slow", attempt=1)]
    assert waiting.status_message == "retrying: Timeout: slow"
    assert waiting.error is None
    assert store.get(task.id) == waiting
    assert [t.id for t in store.unpublished(timedelta(0), ahead=AHEAD)] == [task.id]
    assert store.unpublished(timedelta(0), ahead=timedelta(seconds=1)) == []


def test_each_retry_appends_its_error_with_its_run(store: TaskStore) -> None:
    task = claimed(store)
    now = datetime.now(UTC)
    store.retry(task.id, "w1", error={"type": "A", "message": "one"}, run_at=now)
    again = store.claim(task.id, "w2", LEASE)
    assert again is not None

    waiting = store.retry(task.id, "w2", error={"type": "B"}, run_at=now, known=again)

    assert [(e.type, e.attempt) for e in waiting.errors] == [("A", 1), ("B", 2)]
    assert store.get(task.id).errors == waiting.errors


def test_a_retry_is_fenced_to_the_run_that_holds_the_task(store: TaskStore) -> None:
    task = claimed(store)
    start = datetime.now(UTC)

    with pytest.raises(LeaseLost):
        store.retry(task.id, "w-other", error={"type": "X"}, run_at=start)
    store.cancel(task.id)
    with pytest.raises(InvalidTransition):
        store.retry(task.id, "w1", error={"type": "X"}, run_at=start)

    assert store.get(task.id).errors == []


def test_a_bad_retry_is_refused_and_writes_nothing(store: TaskStore) -> None:
    task = claimed(store)

    with pytest.raises(InvalidTaskData, match="error"):
        store.retry(task.id, "w1", error={"message": "no type"}, run_at=datetime.now(UTC))
    with pytest.raises(InvalidTaskData, match="run_at"):
        store.retry(task.id, "w1", error={"type": "X"}, run_at=datetime(2031, 1, 1))

    assert store.get(task.id) == task


def test_a_task_waiting_for_its_retry_can_be_cancelled(store: TaskStore) -> None:
    task = claimed(store)
    store.retry(task.id, "w1", error={"type": "X"}, run_at=datetime.now(UTC) + timedelta(hours=1))

    cancelled = store.cancel(task.id, reason="give up")

    assert cancelled.status is TaskStatus.CANCELLED
    assert store.claim(task.id, "w2", LEASE) is None
    assert store.unpublished(timedelta(0), ahead=timedelta(days=1)) == []


def test_retried_runs_are_not_lost_runs_for_the_reaper(store: TaskStore) -> None:
    task = claimed(store)
    for worker in ("w2", "w3"):
        store.retry(
            task.id,
            store.get(task.id).worker_id or "",
            error={"type": "X"},
            run_at=datetime.now(UTC),
        )
        assert store.claim(task.id, worker, LEASE) is not None
    running = store.get(task.id)
    assert running.lease_expires_at is not None

    assert (running.attempt, lost_runs(running)) == (3, 1)
    reaped = store.reap(now=running.lease_expires_at + timedelta(seconds=1), max_lost_runs=2)

    assert [t.status for t in reaped] == [TaskStatus.WORKING]  # retried, not failed


def test_observers_hear_of_a_retry(store: TaskStore) -> None:
    heard: list[Task] = []

    class Heard(StoreObserver):
        def retried(self, task: Task) -> None:
            heard.append(task)

    store.observe(Heard())
    task = claimed(store)
    waiting = store.retry(task.id, "w1", error={"type": "X"}, run_at=datetime.now(UTC))

    assert heard == [waiting]
