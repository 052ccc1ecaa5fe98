"""Every submitted task reaches the broker: publish marks, and the sweep after an outage."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from celery import Celery

from queuestore import StoreUnavailable, TaskQueue, TaskStatus
from tests.celery_support import Published, reconfigure


def test_submit_with_the_broker_down_keeps_the_task_and_the_sweep_publishes_it(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    published.broker_down = True
    task = queue.submit("test.job", {"n": 1})
    assert queue.store.get(task.id).status is TaskStatus.SUBMITTED
    assert published.messages == []

    reconfigure(queue, publish_grace=timedelta(0))
    assert queue.sweep() == 0
    published.broker_down = False
    assert queue.sweep() == 1
    assert [m["task_id"] for m in published.messages] == [task.id]
    assert queue.sweep() == 0


def test_submit_marks_the_task_published_in_the_background(app: Celery, queue: TaskQueue) -> None:
    queue.publisher.marks.interval = 3600  # only a full batch or a flush writes
    queue.publisher.marks.batch_size = 3
    queue.publisher.marks.delay = 0
    first = [queue.submit("test.job") for _ in range(2)]
    assert {t.id for t in queue.store.unpublished(timedelta(0))} == {t.id for t in first}

    queue.submit("test.job")  # the third fills a batch: the thread writes it at once
    deadline = time.monotonic() + 5
    while queue.store.unpublished(timedelta(0)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queue.store.unpublished(timedelta(0)) == []


def test_a_mark_waits_its_delay_and_a_task_claimed_meanwhile_gets_none(
    app: Celery, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert queue.publisher.marks.delay == queue.options.publish_grace.total_seconds() / 2
    queue.publisher.marks.delay = 0.5
    queue.publisher.marks.interval = 0.01
    written: list[list[tuple[str, int]]] = []
    real = queue.store.mark_published_many
    monkeypatch.setattr(
        queue.store, "mark_published_many", lambda marks: (written.append(marks), real(marks))
    )
    claimed_soon, left_waiting = queue.submit("test.job"), queue.submit("test.job")
    assert queue.store.claim(claimed_soon.id, "w1", timedelta(seconds=30)) is not None
    time.sleep(0.2)
    assert written == []  # not due yet
    assert [t.id for t in queue.store.unpublished(timedelta(0))] == [left_waiting.id]

    deadline = time.monotonic() + 5
    while queue.store.unpublished(timedelta(0)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queue.store.unpublished(timedelta(0)) == []
    # Both marks at the version they were published at: the store skips the claimed one.
    assert sorted(mark for batch in written for mark in batch) == sorted(
        [(claimed_soon.id, claimed_soon.version), (left_waiting.id, left_waiting.version)]
    )


def test_a_mark_written_after_the_task_moved_on_does_not_hide_it_from_the_sweep(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    queue.publisher.marks.interval = 3600
    task = queue.submit("test.job")
    claimed = queue.store.claim(task.id, "w1", timedelta(seconds=1))
    assert claimed is not None
    assert claimed.lease_expires_at is not None
    queue.store.reap(claimed.lease_expires_at + timedelta(seconds=1))  # released: needs a message

    queue.publisher.marks.flush()  # the late mark of the first message

    reconfigure(queue, publish_grace=timedelta(0))
    assert queue.sweep() == 1
    assert [m["task_id"] for m in published.messages] == [task.id, task.id]


def test_publish_marks_wait_out_a_store_outage(
    app: Celery, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.publisher.marks.interval = 3600
    task = queue.submit("test.job")
    real = queue.store.mark_published_many
    monkeypatch.setattr(
        queue.store,
        "mark_published_many",
        lambda marks: (_ for _ in ()).throw(StoreUnavailable("restarting")),
    )
    queue.publisher.marks.flush()
    monkeypatch.setattr(queue.store, "mark_published_many", real)
    assert [t.id for t in queue.store.unpublished(timedelta(0))] == [task.id]

    queue.publisher.marks.flush()
    assert queue.store.unpublished(timedelta(0)) == []
