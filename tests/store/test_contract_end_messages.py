"""A finished task's message describes its end, and its error names the run that raised it.

A terminal write that gives no ``status_message`` replaces the last one (a
job's "half way", a retry's "retrying: ..."): a failure with the error's one
line, anything else with none. One it gives is kept (a cancel's reason). An
error a run reports carries the run's ``attempt``, as the errors its retries
keep do; the reaper's ``WorkerLost`` too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from queuestore import TaskError, TaskStatus, TaskStore

from .support import reach

LEASE = timedelta(seconds=30)


def running(store: TaskStore, message: str = "half way", worker_id: str = "w1") -> str:
    """A task claimed by ``worker_id`` whose run reported ``message``; its id."""
    task = store.create("x.y")
    assert store.claim(task.id, worker_id, LEASE) is not None
    store.report(task.id, worker_id, progress=0.5, status_message=message)
    return task.id


@pytest.mark.parametrize("status", [TaskStatus.COMPLETED, TaskStatus.CANCELLED])
def test_an_end_without_a_message_clears_the_runs_last_one(
    store: TaskStore, status: TaskStatus
) -> None:
    task_id = running(store)

    ended = store.update(task_id, status=status)

    assert ended.status_message is None
    assert store.get(task_id).status_message is None


def test_a_rejected_task_keeps_no_message(store: TaskStore) -> None:
    task = store.create("x.y")
    store.update(task.id, status_message="looking at it")

    assert store.update(task.id, status=TaskStatus.REJECTED).status_message is None


def test_a_failure_says_its_errors_first_line(store: TaskStore) -> None:
    task_id = running(store)
    error = TaskError(type="httpx.ConnectError", message="connection refused\n  at line 3")

    failed = store.report(task_id, "w1", status=TaskStatus.FAILED, error=error)

    assert failed.status_message == "httpx.ConnectError: connection refused"
    assert failed.error is not None
    assert failed.error.message == error.message


def test_a_failure_without_a_message_says_its_error_type(store: TaskStore) -> None:
    task_id = running(store)

    failed = store.update(task_id, status=TaskStatus.FAILED, error={"type": "Timeout"})

    assert failed.status_message == "Timeout"


def test_an_end_that_gives_a_message_keeps_it(store: TaskStore) -> None:
    done = store.update(running(store), status=TaskStatus.COMPLETED, status_message="42 rows")
    cancelled = store.cancel(running(store), reason="not needed")
    failed = store.update(
        running(store), status=TaskStatus.FAILED, error={"type": "E"}, status_message="gave up"
    )

    assert done.status_message == "42 rows"
    assert cancelled.status_message == "not needed"
    assert failed.status_message == "gave up"


def test_a_live_write_without_a_message_keeps_it(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)
    store.update(task.id, status_message="half way")

    assert store.update(task.id, progress=0.7).status_message == "half way"


def test_the_last_failure_after_retries_replaces_the_retrys_message(store: TaskStore) -> None:
    task = store.create("x.y")
    assert store.claim(task.id, "w1", LEASE) is not None
    error = {"type": "httpx.ConnectError", "message": "refused"}
    store.retry(task.id, "w1", error=error, run_at=datetime.now(UTC) - timedelta(seconds=1))
    assert store.get(task.id).status_message == "retrying: httpx.ConnectError: refused"
    assert store.claim(task.id, "w2", LEASE) is not None

    failed = store.report(task.id, "w2", status=TaskStatus.FAILED, error=error)

    assert failed.status_message == "httpx.ConnectError: refused"
    assert [kept.attempt for kept in failed.errors] == [1]
    assert failed.error is not None
    assert failed.error.attempt == 2


@pytest.mark.parametrize("known", [True, False])
def test_a_runs_error_carries_its_attempt(store: TaskStore, known: bool) -> None:
    task_id = running(store)
    held = store.get(task_id)

    failed = store.report(
        task_id,
        "w1",
        status=TaskStatus.FAILED,
        error={"type": "E", "message": "boom"},
        known=held if known else None,
    )

    assert failed.error is not None
    assert failed.error.attempt == held.attempt == 1
    assert store.get(task_id).error == failed.error


def test_the_reapers_failure_says_what_it_found(store: TaskStore) -> None:
    task = store.create("x.y")
    claimed = store.claim(task.id, "w1", LEASE)
    assert claimed is not None
    assert claimed.lease_expires_at is not None

    (failed,) = store.reap(now=claimed.lease_expires_at + timedelta(seconds=1), max_lost_runs=1)

    assert failed.status is TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.type == "WorkerLost"
    assert failed.error.attempt == 1
    assert failed.status_message == f"WorkerLost: {failed.error.message}"
    assert "w1" in failed.status_message
