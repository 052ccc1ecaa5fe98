"""Concurrency limits through the queue: refused claims wait unpublished, ended runs hand on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from pydantic import ValidationError

from queuestore import (
    ConcurrencyLimits,
    InMemoryTaskStore,
    Task,
    TaskContext,
    TaskQueue,
    TaskStatus,
)
from queuestore.config import Settings
from queuestore.metrics.prometheus import SLOT_WAITS, instrument
from queuestore.run.jobs import execute
from tests.celery_support import Published, register

LEASE = timedelta(seconds=30)


@pytest.fixture
def limited(app: Celery, published: Published) -> TaskQueue:
    """A queue that runs one task per owner at a time, and two of ``x.report``."""
    limits = ConcurrencyLimits(per_owner=1, per_job={"x.report": 2})
    return TaskQueue(InMemoryTaskStore(), app, limits=limits, publish_grace=timedelta(0))


def ids(published: Published) -> list[str]:
    return [message["task_id"] for message in published.messages]


def test_a_claim_refused_at_the_limit_leaves_the_task_waiting_unpublished(
    app: Celery, limited: TaskQueue, published: Published
) -> None:
    registered = register(app, lambda ctx: "done")
    running = limited.submit("test.job", owner="a")
    waiting = limited.submit("test.job", owner="a")
    assert limited.store.claim(running.id, "elsewhere", LEASE) is not None
    published.messages.clear()

    assert execute(limited.publisher, registered, waiting.id) is None

    left = limited.store.get(waiting.id)
    assert (left.status, left.worker_id, left.version) == (
        TaskStatus.SUBMITTED,
        None,
        waiting.version + 1,
    )
    assert published.messages == []  # no message waits for it: it holds no worker
    assert limited.sweep() == 0  # nor does the sweep publish it while the slot is held

    ended = limited.store.report(running.id, "elsewhere", status="completed")
    assert limited.hand_off(ended) == 1
    assert ids(published) == [waiting.id]
    assert execute(limited.publisher, registered, waiting.id).status is TaskStatus.COMPLETED  # type: ignore[union-attr]


def test_a_claim_refused_at_the_limit_counts_in_the_metrics_by_job(
    app: Celery, limited: TaskQueue
) -> None:
    instrument(limited.store)
    before = SLOT_WAITS.labels("test.job")._value.get()
    registered = register(app, lambda ctx: None)
    running = limited.submit("test.job", owner="a")
    limited.store.claim(running.id, "elsewhere", LEASE)

    execute(limited.publisher, registered, limited.submit("test.job", owner="a").id)

    assert SLOT_WAITS.labels("test.job")._value.get() == before + 1


def test_a_run_that_ends_hands_its_slot_to_the_next_waiting_task(
    app: Celery, limited: TaskQueue, published: Published
) -> None:
    refused: list[Task | None] = []

    def first(ctx: TaskContext) -> str:
        # While this run holds a's only slot, the next task of a cannot start.
        refused.append(execute(limited.publisher, registered, later.id))
        return "first"

    registered = register(app, first)
    task = limited.submit("test.job", owner="a")
    later = limited.submit("test.job", owner="a")
    published.messages.clear()

    assert execute(limited.publisher, registered, task.id).status is TaskStatus.COMPLETED  # type: ignore[union-attr]

    assert refused == [None]
    assert ids(published) == [later.id]  # handed on when the first run ended


@pytest.mark.parametrize("ending", ["fails", "asks for input", "is cancelled"])
def test_every_end_of_a_run_hands_its_slot_on(
    app: Celery, limited: TaskQueue, published: Published, ending: str
) -> None:
    from queuestore import InputRequested, JobCancelled

    def job(ctx: TaskContext) -> None:
        if ending == "fails":
            raise RuntimeError("boom")
        if ending == "asks for input":
            raise InputRequested("which month?")
        limited.cancel(ctx.task_id)
        raise JobCancelled

    registered = register(app, job)
    task = limited.submit("test.job", owner="a")
    later = limited.submit("test.job", owner="a")
    limited.store.wait_for_slot(later.id, version=later.version)
    published.messages.clear()

    execute(limited.publisher, registered, task.id)

    assert ids(published) == [later.id]


def test_a_flood_puts_no_more_messages_in_the_broker_than_there_are_free_slots(
    limited: TaskQueue, published: Published
) -> None:
    flood = limited.submit_many([{"name": "test.job", "owner": "a"} for _ in range(50)])
    reports = limited.submit_many([{"name": "x.report", "owner": f"r{i}"} for i in range(3)])

    assert ids(published) == [flood[0].id, reports[0].id, reports[1].id]
    assert all(task.status is TaskStatus.SUBMITTED for task in flood)
    # A submit counts the running tasks: once a's first run holds its slot, a's
    # next submit waits too (before that claim, a message would go out, and the
    # claim would turn it away).
    limited.store.claim(flood[0].id, "w", LEASE)
    limited.submit("test.job", owner="a")
    assert len(published.messages) == 3


def test_a_resumed_task_waits_for_a_slot_as_a_new_one_does(
    limited: TaskQueue, published: Published
) -> None:
    running = limited.submit("test.job", owner="a")
    asked = limited.submit("test.job", owner="a")
    limited.store.claim(asked.id, "w", LEASE)
    limited.store.report(asked.id, "w", status="input_required")
    limited.store.claim(running.id, "elsewhere", LEASE)
    published.messages.clear()

    resumed = limited.resume(asked.id, "yes")

    assert resumed.status is TaskStatus.WORKING
    assert published.messages == []
    ended = limited.store.report(running.id, "elsewhere", status="completed")
    assert limited.hand_off(ended) == 1
    assert ids(published) == [asked.id]


def test_a_job_limit_holds_across_owners(
    app: Celery, limited: TaskQueue, published: Published
) -> None:
    registered = register(app, lambda ctx: None, name="x.report")
    reports = [limited.submit("x.report", owner=f"tenant-{i}") for i in range(3)]
    for index, task in enumerate(reports[:2]):
        assert limited.store.claim(task.id, f"w{index}", LEASE) is not None

    assert execute(limited.publisher, registered, reports[2].id) is None
    assert limited.store.get(reports[2].id).worker_id is None


def test_the_sweep_publishes_only_as_many_as_there_are_free_slots(
    limited: TaskQueue, published: Published
) -> None:
    published.broker_down = True
    a = [limited.submit("test.job", owner="a") for _ in range(3)]
    b = [limited.submit("test.job", owner="b") for _ in range(3)]
    free = [limited.submit("test.job") for _ in range(2)]
    published.broker_down = False

    assert limited.sweep() == 4

    assert set(ids(published)) == {a[0].id, b[0].id, free[0].id, free[1].id}


def test_a_retry_waiting_for_its_slot_is_not_taken_for_an_early_message(
    app: Celery, limited: TaskQueue, published: Published
) -> None:
    registered = register(app, lambda ctx: None)
    running = limited.submit("test.job", owner="a")
    past = limited.submit("test.job", owner="a", run_at=datetime.now(UTC) - timedelta(seconds=1))
    limited.store.claim(running.id, "elsewhere", LEASE)
    published.messages.clear()

    assert execute(limited.publisher, registered, past.id) is None

    assert published.messages == []  # waits for the slot, not published again and again


def test_the_reaper_hands_a_dead_worker_s_slot_on(
    app: Celery, limited: TaskQueue, published: Published
) -> None:
    lost = limited.submit("test.job", owner="a")
    later = limited.submit("test.job", owner="a")
    limited.store.claim(lost.id, "dead", timedelta(milliseconds=1))
    limited.store.wait_for_slot(later.id, version=later.version)
    published.messages.clear()

    reaped = eventually_reaped(limited)

    assert [task.id for task in reaped] == [lost.id]
    assert ids(published) == [lost.id]  # the retry takes the slot its lost run held


def test_a_task_the_reaper_fails_hands_its_slot_on(app: Celery, published: Published) -> None:
    queue = TaskQueue(
        InMemoryTaskStore(), app, limits=ConcurrencyLimits(per_owner=1), max_lost_runs=1
    )
    lost = queue.submit("test.job", owner="a")
    later = queue.submit("test.job", owner="a")
    queue.store.claim(lost.id, "dead", timedelta(milliseconds=1))
    queue.store.wait_for_slot(later.id, version=later.version)
    published.messages.clear()

    assert [task.status for task in eventually_reaped(queue)] == [TaskStatus.FAILED]
    assert ids(published) == [later.id]


def eventually_reaped(queue: TaskQueue) -> list[Task]:
    import time

    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        reaped = queue.reap()
        if reaped:
            return reaped
        time.sleep(0.01)
    return []


def test_unlimited_queues_count_nothing(app: Celery, queue: TaskQueue) -> None:
    calls: list[Any] = []
    queue.store.running_counts = lambda: calls.append(1) or {}  # type: ignore[method-assign]
    registered = register(app, lambda ctx: None)

    execute(queue.publisher, registered, queue.submit("test.job", owner="a").id)
    queue.sweep()

    assert calls == []


def test_settings_configure_the_limits(app: Celery, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUEUESTORE_OWNER_CONCURRENCY", "4")
    monkeypatch.setenv("QUEUESTORE_JOB_CONCURRENCY", '{"x.report": 2}')

    queue = Settings().make_queue(app, InMemoryTaskStore(), beat=False)

    assert queue.options.limits == ConcurrencyLimits(per_owner=4, per_job={"x.report": 2})
    monkeypatch.setenv("QUEUESTORE_OWNER_CONCURRENCY", "0")
    with pytest.raises(ValidationError, match="owner_concurrency"):
        Settings()
    monkeypatch.delenv("QUEUESTORE_OWNER_CONCURRENCY")
    monkeypatch.setenv("QUEUESTORE_JOB_CONCURRENCY", '{"x.report": 0}')
    with pytest.raises(ValidationError, match="job_concurrency"):
        Settings()
    with pytest.raises(TypeError, match="ConcurrencyLimits"):
        TaskQueue(InMemoryTaskStore(), app, limits={"per_owner": 1})  # type: ignore[arg-type]
