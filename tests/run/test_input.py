"""A job that asks for input parks its task; ``resume`` replays it with the answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery

from queuestore import InvalidTransition, TaskContext, TaskQueue, TaskStatus
from queuestore.run.jobs import execute
from tests.celery_support import Published, register


def test_request_input_parks_the_task_and_resume_replays_with_the_answers(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    asked: list[str] = []

    def deploy(ctx: TaskContext, service: str) -> dict[str, Any]:
        first = ctx.request_input(f"Deploy {service}?")
        asked.append("first")
        second = ctx.request_input("Which region?")
        asked.append("second")
        return {"go": first, "region": second}

    registered = register(app, deploy)
    task = queue.submit("test.job", {"service": "api"})

    parked = execute(queue.publisher, registered, task.id)
    assert parked is not None
    assert parked.status is TaskStatus.INPUT_REQUIRED
    assert parked.status_message == "Deploy api?"
    assert parked.worker_id is None

    resumed = queue.resume(task.id, "yes")
    assert resumed.status is TaskStatus.WORKING
    assert resumed.worker_id is None
    assert published.messages[-1]["task_id"] == task.id

    parked = execute(queue.publisher, registered, task.id)
    assert parked is not None
    assert parked.status_message == "Which region?"

    queue.resume(task.id, "eu-west")
    done = execute(queue.publisher, registered, task.id)
    assert done is not None
    assert done.status is TaskStatus.COMPLETED
    assert done.result == {"go": "yes", "region": "eu-west"}
    assert done.answers == ["yes", "eu-west"]
    assert asked == ["first", "first", "second"]


def test_resume_of_a_task_not_waiting_for_input_is_refused(app: Celery, queue: TaskQueue) -> None:
    task = queue.submit("test.job")
    with pytest.raises(InvalidTransition):
        queue.resume(task.id, "yes")


def test_answered_questions_do_not_use_up_the_retries_for_lost_workers(
    app: Celery, queue: TaskQueue
) -> None:
    def ask_twice(ctx: TaskContext) -> list[Any]:
        return [ctx.request_input("first?"), ctx.request_input("second?")]

    registered = register(app, ask_twice)
    task = queue.submit("test.job")
    execute(queue.publisher, registered, task.id)
    queue.resume(task.id, 1)
    execute(queue.publisher, registered, task.id)
    queue.resume(task.id, 2)
    assert queue.store.claim(task.id, "doomed", timedelta(milliseconds=1)) is not None
    later = datetime.now(UTC) + timedelta(minutes=1)

    reaped = queue.store.reap(later, max_lost_runs=3)

    assert [t.status for t in reaped] == [TaskStatus.WORKING]
    assert reaped[0].attempt == 3
