"""A run whose lease ran out is reaped: it loses the task, and the retry is published."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from celery import Celery

from queuestore import Artifact, Task, TaskContext, TaskQueue, TaskStatus
from queuestore.run.jobs import execute
from tests.celery_support import Published, eventually, register


def test_a_reaped_run_loses_its_lease_and_the_retry_is_published(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    outcome: list[str] = []
    reaped: list[str] = []

    def call(ctx: TaskContext) -> None:
        later = datetime.now(UTC) + timedelta(minutes=5)
        reaped.extend(t.id for t in queue.store.reap(later, max_lost_runs=3))
        try:
            ctx.progress(0.9)
            ctx.flush()
        except BaseException as signal:
            outcome.append(type(signal).__name__)
            raise

    task = queue.submit("test.job")
    registered = register(app, call)
    execute(queue.publisher, registered, task.id)
    assert reaped == [task.id]
    assert outcome == ["JobCancelled"]
    stored = queue.store.get(task.id)
    assert stored.status is TaskStatus.WORKING
    assert stored.worker_id is None
    assert queue.store.claim(task.id, "another-worker", timedelta(seconds=5)) is not None


@pytest.mark.parametrize("ending", ["returns", "raises", "asks"])
def test_a_run_whose_task_was_reaped_and_reclaimed_cannot_write_its_outcome(
    app: Celery, queue: TaskQueue, ending: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A run frozen past its lease (a GC pause) wakes up to find the task is another run's."""
    second: list[Task] = []

    def call(ctx: TaskContext) -> str:
        ctx.progress(0.9, "stale run")
        ctx.add_artifact(Artifact(artifact_id="log", parts=["stale"]), append=True)
        later = datetime.now(UTC) + timedelta(minutes=5)
        queue.store.reap(later, max_lost_runs=3)
        taken = queue.store.claim(ctx.task_id, "second-run", timedelta(minutes=1))
        assert taken is not None
        second.append(
            queue.store.report(
                ctx.task_id,
                "second-run",
                known=taken,
                artifacts=[(Artifact(artifact_id="log", parts=["second"]), False)],
                progress=0.2,
                status_message="second run",
            )
        )
        if ending == "raises":
            raise RuntimeError("stale failure")
        if ending == "asks":
            ctx.request_input("stale question?")
        return "stale result"

    task = queue.submit("test.job")
    with caplog.at_level(logging.INFO, logger="queuestore.run.jobs"):
        left = execute(queue.publisher, register(app, call), task.id)

    assert left is None
    assert "outcome dropped" in caplog.text
    (held,) = second
    assert held.attempt == 2
    assert queue.store.get(task.id) == held
    done = queue.store.report(task.id, "second-run", known=held, status="completed", result="ok")
    assert (done.status, done.result, done.progress) == (TaskStatus.COMPLETED, "ok", 0.2)
    assert [(a.artifact_id, a.parts) for a in done.artifacts] == [("log", ["second"])]


def test_the_reaper_republishes_a_first_lost_run_at_once(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    task = queue.submit("test.job")
    queue.store.claim(task.id, "dead-worker", timedelta(milliseconds=1))
    reaped = eventually(queue.reap)  # the store's clock passes the lease within moments
    assert [t.id for t in reaped] == [task.id]
    assert published.messages[-1]["task_id"] == task.id
    assert published.messages[-1]["countdown"] is None
