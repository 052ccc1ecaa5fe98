"""Cleanup: terminal tasks past their TTL go, live tasks never do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from queuestore import LIVE, TERMINAL, Task, TaskStatus, TaskStore

from .support import reach

HOUR = timedelta(hours=1)
FAR_FUTURE = datetime(2999, 1, 1, tzinfo=UTC)


def finished(store: TaskStore, status: TaskStatus = TaskStatus.COMPLETED, **create: object) -> Task:
    task = reach(store, status, **create)
    assert task.finished_at is not None
    return task


def remaining(store: TaskStore) -> set[str]:
    return {t.id for t in store.iterate(limit=1000)}


def test_a_terminal_task_goes_once_its_ttl_has_passed(store: TaskStore) -> None:
    task = finished(store)
    assert task.finished_at is not None

    assert store.cleanup(HOUR, now=task.finished_at + HOUR - timedelta(seconds=1)) == 0
    assert remaining(store) == {task.id}
    assert store.cleanup(HOUR, now=task.finished_at + HOUR + timedelta(seconds=1)) == 1
    assert remaining(store) == set()
    assert store.cleanup(HOUR, now=FAR_FUTURE) == 0


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_every_terminal_status_is_cleaned_up(store: TaskStore, status: TaskStatus) -> None:
    finished(store, status)

    assert store.cleanup(HOUR, now=FAR_FUTURE) == 1
    assert remaining(store) == set()


@pytest.mark.parametrize("status", sorted(LIVE))
def test_a_live_task_is_never_cleaned_up(store: TaskStore, status: TaskStatus) -> None:
    task = reach(store, status, ttl=timedelta(0))

    assert store.cleanup(timedelta(0), now=FAR_FUTURE) == 0
    assert store.get(task.id) == task


def test_cleanup_leaves_live_tasks_among_expired_ones(store: TaskStore) -> None:
    live = {reach(store, status).id for status in sorted(LIVE) for _ in range(2)}
    for status in sorted(TERMINAL):
        finished(store, status)

    assert store.cleanup(timedelta(0), now=FAR_FUTURE) == len(TERMINAL)
    assert remaining(store) == live


def test_a_task_with_its_own_ttl_expires_by_it(store: TaskStore) -> None:
    short = finished(store, ttl=timedelta(seconds=10))
    long = finished(store, ttl=2 * HOUR)
    default = finished(store)
    latest = max(t.finished_at for t in (short, long, default))  # type: ignore[type-var]

    assert store.cleanup(HOUR, now=latest + timedelta(seconds=11)) == 1
    assert remaining(store) == {long.id, default.id}
    assert store.cleanup(HOUR, now=latest + HOUR + timedelta(seconds=1)) == 1
    assert remaining(store) == {long.id}
    assert store.cleanup(HOUR, now=latest + 2 * HOUR + timedelta(seconds=1)) == 1
    assert remaining(store) == set()


def test_a_ttl_of_zero_expires_at_once(store: TaskStore) -> None:
    task = finished(store, ttl=timedelta(0))
    assert task.finished_at is not None

    assert store.cleanup(HOUR, now=task.finished_at) == 1


def test_cleanup_without_now_uses_the_stores_clock(store: TaskStore) -> None:
    finished(store)

    assert store.cleanup(HOUR) == 0
    assert store.cleanup(timedelta(0)) == 1
    assert remaining(store) == set()


def test_now_may_be_given_in_any_timezone(store: TaskStore) -> None:
    task = finished(store)
    assert task.finished_at is not None
    plus_five = timezone(timedelta(hours=5))
    just_before = (task.finished_at + HOUR - timedelta(seconds=1)).astimezone(plus_five)

    assert store.cleanup(HOUR, now=just_before) == 0
    assert store.cleanup(HOUR, now=just_before + timedelta(seconds=2)) == 1


def test_cleanup_deletes_in_batches_of_batch_size(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(25):
        finished(store)
    live = store.create("x.y")
    batches: list[int] = []
    delete_batch = store._delete_expired

    def counting(ttl: timedelta, now: datetime | None, batch_size: int) -> int:
        deleted = delete_batch(ttl, now, batch_size)
        batches.append(deleted)
        return deleted

    monkeypatch.setattr(store, "_delete_expired", counting)

    assert store.cleanup(timedelta(0), batch_size=10, now=FAR_FUTURE) == 25
    assert batches == [10, 10, 5]
    assert remaining(store) == {live.id}


def test_a_tasks_own_ttl_is_exact_to_the_microsecond(store: TaskStore) -> None:
    ttl = timedelta(milliseconds=1)
    tasks = [finished(store, ttl=ttl) for _ in range(8)]

    for task in tasks:
        assert task.finished_at is not None
        expiry = task.finished_at + ttl
        due = {t.id for t in tasks if t.finished_at + ttl <= expiry}  # type: ignore[operator]
        assert store.cleanup(HOUR, now=expiry - timedelta(microseconds=1)) == 0
        expected = len(due & remaining(store))
        assert store.cleanup(HOUR, now=expiry) == expected
        assert task.id not in remaining(store)
