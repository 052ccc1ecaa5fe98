"""Scheduled start through the queue: ``submit(run_at=..., delay=...)`` and the sweep.

In process on the in-memory store, with the broker replaced by a recorder;
tests/integration/test_scheduled_start.py runs the same with real workers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery

from queuestore import InMemoryTaskStore, InvalidTaskData, TaskQueue, TaskStatus
from queuestore.aio import AsyncTaskQueue
from queuestore.config import Settings
from queuestore.run.jobs import execute, job
from tests.celery_support import Published

AHEAD = timedelta(seconds=12)


def countdowns(published: Published) -> dict[str, float | None]:
    return {message["task_id"]: message["countdown"] for message in published.messages}


def test_a_start_within_the_look_ahead_is_published_at_once_with_a_countdown(
    queue: TaskQueue, published: Published
) -> None:
    task = queue.submit("x.y", delay=timedelta(seconds=5))

    assert task.status is TaskStatus.SUBMITTED
    assert task.run_at is not None
    countdown = countdowns(published)[task.id]
    assert countdown is not None
    assert 4 < countdown <= 5


def test_a_later_start_waits_in_the_store_until_the_sweep_finds_it_near(
    app: Celery, published: Published
) -> None:
    queue = TaskQueue(InMemoryTaskStore(), app, schedule_ahead=timedelta(milliseconds=300))
    start = datetime.now(UTC) + timedelta(milliseconds=600)
    task = queue.submit("x.y", run_at=start)
    assert published.messages == []
    assert queue.sweep() == 0

    time.sleep(0.4)
    assert queue.sweep() == 1

    countdown = countdowns(published)[task.id]
    assert countdown is not None
    assert 0 < countdown <= 0.3
    queue.publisher.marks.flush()
    assert queue.sweep() == 0  # published once


def test_a_start_in_the_past_is_published_without_a_countdown(
    queue: TaskQueue, published: Published
) -> None:
    task = queue.submit("x.y", run_at=datetime.now(UTC) - timedelta(hours=1))

    assert countdowns(published) == {task.id: None}


def test_a_cancel_before_the_start_means_the_job_is_never_published(
    app: Celery, published: Published
) -> None:
    queue = TaskQueue(InMemoryTaskStore(), app, schedule_ahead=timedelta(milliseconds=200))
    task = queue.submit("x.y", delay=timedelta(milliseconds=300))
    queue.cancel(task.id)

    time.sleep(0.2)

    assert queue.sweep() == 0
    assert published.messages == []


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"run_at": datetime.now(UTC), "delay": timedelta(seconds=1)}, "delay"),
        ({"delay": timedelta(seconds=-1)}, "delay"),
        ({"delay": 5}, "delay"),
        ({"run_at": datetime(2031, 1, 1)}, "run_at"),
    ],
)
def test_a_bad_start_is_refused_and_writes_nothing(
    queue: TaskQueue, published: Published, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidTaskData) as refused:
        queue.submit("x.y", **options)

    assert refused.value.field == field
    assert queue.store.count() == 0
    assert published.messages == []


def test_a_naive_start_is_refused_with_what_to_pass_instead(queue: TaskQueue) -> None:
    with pytest.raises(InvalidTaskData) as refused:
        queue.submit("x.y", run_at=datetime(2031, 1, 1))

    assert "timezone-aware" in str(refused.value)
    assert "datetime.now(UTC)" in str(refused.value)


def test_the_look_ahead_defaults_within_the_lease_and_must_fit_in_it(app: Celery) -> None:
    assert TaskQueue(InMemoryTaskStore(), app).options.schedule_ahead == timedelta(seconds=12)
    short = TaskQueue(InMemoryTaskStore(), app, lease=timedelta(seconds=4))
    assert short.options.schedule_ahead == timedelta(seconds=1.8)  # 90% of lease - ack_after

    for wrong in (timedelta(0), timedelta(seconds=15)):
        with pytest.raises(ValueError, match="schedule_ahead"):
            TaskQueue(InMemoryTaskStore(), app, schedule_ahead=wrong)


def test_a_sweep_slower_than_the_look_ahead_is_warned_of(
    queue: TaskQueue, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="queuestore.beat.schedule"):
        queue.install_beat_schedule(sweep_interval=timedelta(seconds=10))
        assert caplog.records == []
        queue.install_beat_schedule(sweep_interval=timedelta(seconds=30))

    assert "scheduled tasks may start late" in caplog.text


def test_the_async_queue_schedules_alike(queue: TaskQueue, published: Published) -> None:
    start = datetime.now(UTC) + timedelta(hours=1)

    async def submit() -> None:
        task = await AsyncTaskQueue(queue).submit("x.y", run_at=start)
        assert task.run_at == start
        later = await AsyncTaskQueue(queue).submit("x.y", delay=timedelta(hours=2))
        assert later.run_at is not None
        assert later.run_at > start

    asyncio.run(submit())
    assert published.messages == []


def test_the_setting_reaches_the_queue(app: Celery, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUEUESTORE_SCHEDULE_AHEAD", "5")
    settings = Settings()

    queue = settings.make_queue(app, store=InMemoryTaskStore(), beat=False)

    assert queue.options.schedule_ahead == timedelta(seconds=5)


def test_a_message_that_comes_before_the_start_is_published_again_for_it(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    calls: list[int] = []
    registered = job(app, name="x.y")(lambda ctx: calls.append(1))
    task = queue.submit("x.y", delay=timedelta(seconds=3))
    published.messages.clear()

    assert execute(queue.publisher, registered, task.id) is None  # early: not run

    assert calls == []
    (again,) = published.messages
    assert again["task_id"] == task.id
    assert 2 < again["countdown"] <= 3
    assert queue.store.get(task.id).status is TaskStatus.SUBMITTED


def test_a_duplicate_or_cancelled_message_is_dropped_not_published_again(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    registered = job(app, name="x.y")(lambda ctx: None)
    cancelled = queue.submit("x.y", delay=timedelta(seconds=3))
    queue.cancel(cancelled.id)
    published.messages.clear()

    assert execute(queue.publisher, registered, cancelled.id) is None
    assert execute(queue.publisher, registered, "missing-task") is None

    assert published.messages == []
