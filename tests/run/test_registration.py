"""A registered job is a late-acked Celery task of its app that runs the stored task.

It checks the input a submit gives it, retries the message through a store outage at the
claim, names its worker, and fails the task on a soft time limit.
"""

from __future__ import annotations

import os
import re
import socket
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

from queuestore import InvalidTaskData, StoreUnavailable, TaskContext, TaskQueue, TaskStatus
from queuestore.run.jobs import execute, new_worker_id
from tests.celery_support import Published, register


def test_a_job_registers_a_late_acked_celery_task_of_this_app_only(app: Celery) -> None:
    def noop(ctx: TaskContext) -> None:
        return None

    registered = register(app, noop, name="test.registered")

    task = registered.celery_task
    assert "test.registered" in app.tasks
    assert (task.name, task.acks_late, task.ignore_result) == ("test.registered", True, True)
    other = Celery("other", broker="memory://", set_as_current=False)
    assert "test.registered" not in other.tasks


def test_the_celery_task_runs_the_job_on_the_stored_task(app: Celery, queue: TaskQueue) -> None:
    def double(ctx: TaskContext, n: int) -> dict[str, int]:
        return {"twice": n * 2}

    registered = register(app, double)
    task = queue.submit("test.job", {"n": 21})

    registered.celery_task.apply(args=(task.id,), throw=True)

    done = queue.store.get(task.id)
    assert (done.status, done.result) == (TaskStatus.COMPLETED, {"twice": 42})


def test_submit_refuses_input_the_job_cannot_take_and_writes_nothing(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    register(app, lambda ctx, month: month)
    with pytest.raises(InvalidTaskData) as refused:
        queue.submit("test.job", {"mnth": "2026-11"})
    assert refused.value.field == "input.month"
    assert queue.store.list().tasks == []
    assert published.messages == []


def test_a_queue_is_found_by_its_app_and_a_missing_one_is_explained(queue: TaskQueue) -> None:
    found = TaskQueue.of(queue.app)
    assert (found.publisher, found.store, found.options) == (
        queue.publisher,
        queue.store,
        queue.options,
    )
    with pytest.raises(RuntimeError, match="no TaskQueue"):
        TaskQueue.of(Celery("other", set_as_current=False))


@pytest.mark.parametrize(("retries", "countdown"), [(0, 1.0), (1, 2.0), (2, 2.5), (10, 2.5)])
def test_a_store_outage_at_the_claim_retries_the_message_with_a_backoff_below_ack_after(
    app: Celery,
    queue: TaskQueue,
    monkeypatch: pytest.MonkeyPatch,
    retries: int,
    countdown: float,
) -> None:
    def never(ctx: TaskContext) -> str:
        return "never run"

    registered = register(app, never)
    task = queue.submit("test.job")
    outage = StoreUnavailable("database restarting")

    def claim(*args: Any, **kwargs: Any) -> None:
        raise outage

    asked: list[dict[str, Any]] = []

    def retry(**options: Any) -> Exception:
        asked.append(options)
        return RuntimeError("retry requested")

    monkeypatch.setattr(queue.store, "claim", claim)
    monkeypatch.setattr(registered.celery_task, "retry", retry)

    with pytest.raises(RuntimeError, match="retry requested"):
        registered.celery_task.apply(args=(task.id,), retries=retries, throw=True)
    assert asked == [{"exc": outage, "countdown": countdown, "max_retries": None}]


def test_a_worker_id_names_the_host_and_process_of_the_run() -> None:
    assert re.fullmatch(
        rf"{re.escape(socket.gethostname())}:{os.getpid()}:[0-9a-f]{{8}}", new_worker_id()
    )


def test_a_soft_time_limit_fails_the_task_unless_it_was_taken_from_the_run(
    app: Celery, queue: TaskQueue
) -> None:
    def call(ctx: TaskContext, take: str) -> None:
        if take == "cancel":
            queue.store.cancel(ctx.task_id)
        if take == "delete":
            queue.store.delete(ctx.task_id)
        raise SoftTimeLimitExceeded()

    registered = register(app, call)
    ran_out = queue.submit("test.job", {"take": "nothing"})
    cancelled = queue.submit("test.job", {"take": "cancel"})
    deleted = queue.submit("test.job", {"take": "delete"})

    failed = execute(queue.publisher, registered, ran_out.id)
    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.type == "billiard.exceptions.SoftTimeLimitExceeded"
    left = execute(queue.publisher, registered, cancelled.id)
    assert left is not None
    assert left.status is TaskStatus.WORKING  # as the run last saw it: nothing written
    assert queue.store.get(cancelled.id).status is TaskStatus.CANCELLED
    assert execute(queue.publisher, registered, deleted.id) is not None
