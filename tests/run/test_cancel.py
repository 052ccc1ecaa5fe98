"""A cancel stops the run: its next write raises, and nothing it returns is stored."""

from __future__ import annotations

from celery import Celery

from queuestore import TaskContext, TaskQueue, TaskStatus
from queuestore.run.jobs import execute
from tests.celery_support import Published, register


def test_a_write_after_cancel_stops_the_job_and_the_task_stays_cancelled(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    reached: list[str] = []

    def call(ctx: TaskContext) -> str:
        queue.cancel(ctx.task_id, reason="user asked")
        try:
            ctx.progress(0.5)
            ctx.flush()
        finally:
            reached.append("finally")
        reached.append("after the write")
        return "never stored"

    task = queue.submit("test.job")
    left = execute(queue.publisher, register(app, call), task.id)

    assert reached == ["finally"]
    assert left is not None
    stored = queue.store.get(task.id)
    assert stored.status is TaskStatus.CANCELLED
    assert stored.status_message == "user asked"
    assert stored.result is None
    assert published.revoked == [(task.id, {"terminate": True, "signal": "SIGUSR1"})]


def test_a_job_that_ignores_the_cancel_cannot_complete_the_task(
    app: Celery, queue: TaskQueue
) -> None:
    def call(ctx: TaskContext) -> str:
        queue.store.cancel(ctx.task_id)
        return "finished anyway"

    task = queue.submit("test.job")
    execute(queue.publisher, register(app, call), task.id)
    stored = queue.store.get(task.id)
    assert stored.status is TaskStatus.CANCELLED
    assert stored.result is None


def test_a_task_cancelled_before_it_starts_never_runs_its_body(
    app: Celery, queue: TaskQueue
) -> None:
    runs: list[int] = []
    registered = register(app, lambda ctx: runs.append(1))
    task = queue.submit("test.job")
    queue.cancel(task.id)
    assert execute(queue.publisher, registered, task.id) is None
    assert runs == []
