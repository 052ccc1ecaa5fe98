"""A run that suspends: it ends with no error, holds nothing, and its job runs again later."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from celery import Celery

from queuestore import TaskContext, TaskQueue, TaskStatus
from queuestore.run.context import Suspended
from queuestore.run.jobs import execute, job
from tests.celery_support import Published


def test_a_suspended_run_waits_for_its_time_then_runs_the_job_again(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    runs: list[int] = []

    @job(app, name="test.naps")
    def naps(ctx: TaskContext) -> str:
        runs.append(ctx.attempt)
        if len(runs) == 1:
            ctx.progress(0.5, "half way")
            raise Suspended(datetime.now(UTC) + timedelta(milliseconds=200), "resting")
        return "rested"

    task = queue.submit("test.naps")
    first = execute(queue.publisher, naps, task.id)

    assert first is not None
    assert (first.status, first.worker_id, first.status_message) == (
        TaskStatus.WORKING,
        None,
        "resting",
    )
    assert (first.progress, first.suspends, first.errors) == (0.5, 1, [])
    countdown = published.messages[-1]["countdown"]
    assert 0 < countdown <= 0.2  # published for its time, as a scheduled start is
    assert execute(queue.publisher, naps, task.id) is None  # too early: put back
    time.sleep(0.2)

    done = execute(queue.publisher, naps, task.id)

    assert done is not None
    assert (done.status, done.result, runs) == (TaskStatus.COMPLETED, "rested", [1, 2])


def test_a_suspend_after_a_cancel_writes_nothing(app: Celery, queue: TaskQueue) -> None:
    @job(app, name="test.naps")
    def naps(ctx: TaskContext) -> None:
        queue.cancel(ctx.task_id)
        raise Suspended(datetime.now(UTC) + timedelta(seconds=1), "resting")

    task = queue.submit("test.naps")

    assert execute(queue.publisher, naps, task.id) is None
    assert queue.store.get(task.id).status is TaskStatus.CANCELLED
