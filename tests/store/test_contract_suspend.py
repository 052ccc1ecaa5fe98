"""A suspended run in the store: ``suspend`` ends a run to wait, neither failed nor lost.

Every backend must release the task unclaimed with its wake time in
``run_at`` and the wait in its message, count the run in ``suspends`` (so the
reaper never takes it for a lost one), fence the write to the run's lease, and
leave the task cancellable while it waits.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from queuestore import InvalidTaskData, InvalidTransition, LeaseLost, Task, TaskStatus, TaskStore
from queuestore.store.runs import lost_runs

LEASE = timedelta(minutes=5)
AHEAD = timedelta(seconds=12)


def claimed(store: TaskStore, worker: str = "w1") -> Task:
    task = store.claim(store.create("x.y").id, worker, LEASE)
    assert task is not None
    return task


def test_a_suspended_run_waits_unclaimed_for_its_time_with_no_error(store: TaskStore) -> None:
    task = claimed(store)
    until = datetime.now(UTC) + timedelta(seconds=5)

    waiting = store.suspend(task.id, "w1", until=until, message="sleeping until later")

    assert (waiting.status, waiting.worker_id, waiting.lease_expires_at) == (
        TaskStatus.WORKING,
        None,
        None,
    )
    assert (waiting.run_at, waiting.status_message) == (until, "sleeping until later")
    assert (waiting.suspends, waiting.errors, waiting.error) == (1, [], None)
    assert store.get(task.id) == waiting
    assert [t.id for t in store.unpublished(timedelta(0), ahead=AHEAD)] == [task.id]
    assert store.unpublished(timedelta(0), ahead=timedelta(seconds=1)) == []
    assert store.claim(task.id, "w2", LEASE) is None  # not before its time


def test_a_suspended_run_is_not_a_lost_one(store: TaskStore) -> None:
    task = claimed(store)
    now = datetime.now(UTC)
    for worker in ("w2", "w3"):
        store.suspend(task.id, "w1" if worker == "w2" else "w2", until=now, message=None)
        again = store.claim(task.id, worker, LEASE)
        assert again is not None

    current = store.get(task.id)
    assert (current.attempt, current.suspends) == (3, 2)
    assert lost_runs(current) == 1  # the run now going, as for a first run


def test_only_the_run_holding_the_task_may_suspend_it(store: TaskStore) -> None:
    task = claimed(store)
    later = datetime.now(UTC) + timedelta(minutes=1)

    with pytest.raises(LeaseLost):
        store.suspend(task.id, "someone-else", until=later, message=None)
    store.cancel(task.id)
    with pytest.raises(InvalidTransition):
        store.suspend(task.id, "w1", until=later, message=None)
    assert store.get(task.id).suspends == 0


def test_a_bad_wake_time_is_refused_and_writes_nothing(store: TaskStore) -> None:
    task = claimed(store)

    with pytest.raises(InvalidTaskData) as refused:
        store.suspend(task.id, "w1", until=datetime(2030, 1, 1), message=None)  # naive

    assert refused.value.field == "until"
    assert store.get(task.id) == task


def test_a_cancel_while_it_waits_means_it_never_runs_again(store: TaskStore) -> None:
    task = claimed(store)
    store.suspend(task.id, "w1", until=datetime.now(UTC), message="waiting")

    cancelled = store.cancel(task.id)

    assert cancelled.status is TaskStatus.CANCELLED
    assert store.claim(task.id, "w2", LEASE) is None
    assert store.unpublished(timedelta(0), ahead=AHEAD) == []
