"""A run told to back off: ``RetryAfter`` and ``ctx.pause`` pause a key and retry after it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from celery import Celery

from queuestore import (
    FlowControl,
    InMemoryTaskStore,
    RateLimit,
    RetryAfter,
    TaskContext,
    TaskQueue,
    TaskStatus,
)
from queuestore.core.flow import retry_after
from queuestore.run.jobs import execute, job
from tests.celery_support import Published

BY_PROVIDER = FlowControl(rates={"test.call": RateLimit(100, key="input.provider")})


@pytest.fixture
def queue(app: Celery, published: Published) -> TaskQueue:
    """A queue whose ``test.call`` has a rate per provider, on the in-memory store."""
    return TaskQueue(
        InMemoryTaskStore(),
        app,
        lease=timedelta(seconds=5),
        heartbeat_interval=timedelta(seconds=0.05),
        flow=BY_PROVIDER,
    )


def test_a_retry_after_pauses_the_task_s_key_and_the_task_waits_for_it(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    @job(app, name="test.call")
    def call(ctx: TaskContext, provider: str) -> int:
        if ctx.attempt == 1 and provider == "busy":
            raise RetryAfter(30)
        return ctx.attempt

    told = queue.submit("test.call", {"provider": "busy"})
    waited = execute(queue.publisher, call, told.id)

    [pause] = queue.store.pauses()
    assert (pause.kind, pause.value) == ("key", "busy")
    assert pause.until is not None
    assert waited is not None
    assert (waited.status, waited.worker_id, waited.errors) == (TaskStatus.WORKING, None, [])
    assert waited.run_at == pause.until
    assert waited.status_message == f"paused: key busy until {pause.until.isoformat()}"

    same_key = queue.submit("test.call", {"provider": "busy"})
    assert execute(queue.publisher, call, same_key.id) is None  # refused: it waits
    assert queue.store.get(same_key.id).run_at == pause.until
    other = execute(queue.publisher, call, queue.submit("test.call", {"provider": "idle"}).id)
    assert other is not None
    assert other.status is TaskStatus.COMPLETED


def test_ctx_pause_names_any_key_and_a_job_without_a_key_pauses_itself(
    app: Celery, queue: TaskQueue
) -> None:
    until = datetime.now(UTC) + timedelta(minutes=1)

    @job(app, name="test.keyless")
    def keyless(ctx: TaskContext, key: str | None = None) -> None:
        if key:
            ctx.pause(key, until=until)
        raise RetryAfter(until)

    execute(queue.publisher, keyless, queue.submit("test.keyless", {"key": "vendor"}).id)
    execute(queue.publisher, keyless, queue.submit("test.keyless").id)

    paused = {(pause.kind.value, pause.value, pause.until) for pause in queue.store.pauses()}
    assert paused == {("key", "vendor", until), ("job", "test.keyless", until)}


def test_retry_after_reads_seconds_durations_times_and_http_dates() -> None:
    now = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)

    assert retry_after("120", now) == now + timedelta(seconds=120)
    assert retry_after(1.5, now) == now + timedelta(seconds=1.5)
    assert retry_after(timedelta(minutes=1), now) == now + timedelta(minutes=1)
    assert retry_after("Mon, 07 Dec 2026 12:05:00 GMT", now) == now + timedelta(minutes=5)
    for bad in ("soon", -float("nan"), True, datetime(2026, 1, 1)):
        with pytest.raises(ValueError, match="Retry-After"):
            retry_after(bad, now)  # type: ignore[arg-type]
