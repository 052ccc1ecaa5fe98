"""Scheduled start in the store: ``run_at`` kept in the row, and the sweep's view of it.

Every backend must keep a job's start time and return a scheduled job to the
sweep only as its start comes within ``ahead``; the queue then publishes
it with a countdown (tests/submitting/test_schedule.py).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from queuestore import InvalidTaskData, TaskStatus, TaskStore

AHEAD = timedelta(seconds=12)
LEASE = timedelta(minutes=5)
NO_GRACE = timedelta(0)
LONG_GRACE = timedelta(hours=1)


def due_ids(store: TaskStore, older_than: timedelta, ahead: timedelta = AHEAD) -> list[str]:
    return [task.id for task in store.unpublished(older_than, ahead=ahead)]


def test_a_start_time_is_kept_in_utc_and_read_back(store: TaskStore) -> None:
    start = datetime(2031, 1, 2, 3, 4, 5, 678_901, tzinfo=timezone(timedelta(hours=2)))

    task = store.create("x.y", run_at=start)

    assert task.run_at == start
    assert task.run_at is not None
    assert task.run_at.utcoffset() == timedelta(0)
    assert store.get(task.id).run_at == start
    assert store.list().tasks[0].run_at == start
    assert store.create("x.y").run_at is None


def test_a_bad_start_time_is_refused_and_writes_nothing(store: TaskStore) -> None:
    edge = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=2)))  # before year 1 in UTC
    for wrong in (datetime(2031, 1, 1), "2031-01-01T00:00:00Z", 1_900_000_000, edge):
        with pytest.raises(InvalidTaskData, match="run_at"):
            store.create("x.y", run_at=wrong, task_id="t-refused")  # type: ignore[arg-type]
    with pytest.raises(InvalidTaskData, match="only a job"):
        store.create("x.y", job=False, run_at=datetime.now(UTC), task_id="t-refused")

    assert store.count() == 0


def test_a_job_starting_beyond_the_look_ahead_is_not_due(store: TaskStore) -> None:
    later = store.create("x.y", run_at=datetime.now(UTC) + timedelta(hours=1))

    assert due_ids(store, NO_GRACE) == []
    assert due_ids(store, NO_GRACE, ahead=timedelta(hours=2)) == [later.id]
    assert store.unpublished_count() == 0  # not late: its start has not come


def test_a_job_starting_within_the_look_ahead_waits_the_grace_like_any_other(
    store: TaskStore,
) -> None:
    # Its start was within the look-ahead when it was created: submit published it.
    soon = store.create("x.y", run_at=datetime.now(UTC) + timedelta(seconds=5))
    overdue = store.create("x.y", run_at=datetime.now(UTC) - timedelta(hours=1))

    assert due_ids(store, LONG_GRACE) == []
    assert due_ids(store, NO_GRACE) == [overdue.id, soon.id]
    assert due_ids(store, NO_GRACE, ahead=timedelta(seconds=1)) == [overdue.id]


def test_a_job_submit_did_not_publish_is_due_as_its_start_comes_near(store: TaskStore) -> None:
    # Created further ahead than the look-ahead, so submit left it to the sweep:
    # once its start is within the look-ahead no grace holds it back.
    ahead = timedelta(milliseconds=300)
    task = store.create("x.y", run_at=datetime.now(UTC) + ahead + timedelta(milliseconds=150))
    assert due_ids(store, LONG_GRACE, ahead=ahead) == []

    time.sleep(0.3)

    assert due_ids(store, LONG_GRACE, ahead=ahead) == [task.id]


def test_the_sweep_orders_scheduled_and_unscheduled_jobs_by_when_they_became_due(
    store: TaskStore,
) -> None:
    at_once = store.create("x.y")
    overdue = store.create("x.y", run_at=datetime.now(UTC) - timedelta(hours=1))
    soon = store.create("x.y", run_at=datetime.now(UTC) + timedelta(seconds=3))
    sooner = store.create("x.y", run_at=datetime.now(UTC) + timedelta(seconds=2))

    assert due_ids(store, NO_GRACE) == [at_once.id, overdue.id, sooner.id, soon.id]
    assert due_ids(store, NO_GRACE)[:2] == [
        task.id for task in store.unpublished(NO_GRACE, ahead=AHEAD, limit=2)
    ]


def test_a_published_claimed_or_cancelled_scheduled_job_is_not_due(store: TaskStore) -> None:
    start = datetime.now(UTC) + timedelta(seconds=5)
    published = store.create("x.y", run_at=start)
    claimed = store.create("x.y", run_at=datetime.now(UTC))  # its start has come
    cancelled = store.create("x.y", run_at=start)
    waiting = store.create("x.y", run_at=start)
    store.mark_published(published.id)
    store.claim(claimed.id, "w1", LEASE)
    store.cancel(cancelled.id)

    assert due_ids(store, NO_GRACE) == [waiting.id]
    republished = store.unpublished(NO_GRACE, republish_after=NO_GRACE, ahead=AHEAD)
    assert {task.id for task in republished} == {waiting.id, published.id}


def test_a_cancel_before_the_start_leaves_nothing_to_run(store: TaskStore) -> None:
    task = store.create("x.y", run_at=datetime.now(UTC) + timedelta(hours=1))

    store.cancel(task.id, reason="not needed")

    assert store.claim(task.id, "w1", LEASE) is None
    assert store.get(task.id).status is TaskStatus.CANCELLED
    assert due_ids(store, NO_GRACE, ahead=timedelta(days=1)) == []


def test_the_backlog_counts_a_scheduled_job_once_its_start_is_late(store: TaskStore) -> None:
    store.create("x.y", run_at=datetime.now(UTC) - timedelta(minutes=10))
    store.create("x.y", run_at=datetime.now(UTC) + timedelta(minutes=10))
    store.create("x.y")

    assert store.unpublished_count() == 2
    assert store.unpublished_count(timedelta(minutes=5)) == 1


def test_a_claim_before_the_start_is_refused(store: TaskStore) -> None:
    later = store.create("x.y", run_at=datetime.now(UTC) + timedelta(hours=1))
    due = store.create("x.y", run_at=datetime.now(UTC) - timedelta(seconds=1))

    assert store.claim(later.id, "w1", LEASE) is None
    assert store.get(later.id) == later  # nothing written
    claimed = store.claim(due.id, "w1", LEASE)
    assert claimed is not None
    assert claimed.status is TaskStatus.WORKING
