"""Unique tasks through the queue: a second submit with a live key joins the first."""

from __future__ import annotations

import asyncio

from queuestore import TaskQueue, TaskStatus
from queuestore.aio import AsyncTaskQueue
from tests.celery_support import Published


def test_a_second_submit_returns_the_live_task_and_publishes_nothing(
    queue: TaskQueue, published: Published
) -> None:
    first = queue.submit("reports.build", {"month": "11"}, owner="alice", unique_key="nov")

    again = queue.submit("reports.build", {"month": "11"}, owner="alice", unique_key="nov")

    assert again == first
    assert [message["task_id"] for message in published.messages] == [first.id]


def test_once_the_task_ended_the_key_submits_a_new_one(
    queue: TaskQueue, published: Published
) -> None:
    first = queue.submit("x.y", unique_key="k")
    queue.cancel(first.id)

    second = queue.submit("x.y", unique_key="k")

    assert second.id != first.id
    assert second.status is TaskStatus.SUBMITTED
    assert [message["task_id"] for message in published.messages] == [first.id, second.id]


def test_a_given_task_id_with_a_held_key_returns_the_holder(queue: TaskQueue) -> None:
    first = queue.submit("x.y", unique_key="k")

    assert queue.submit("x.y", unique_key="k", task_id="t-mine") == first
    assert queue.store.count() == 1


def test_the_async_queue_passes_the_key(queue: TaskQueue, published: Published) -> None:
    async def submit_twice() -> tuple[str, str]:
        aqueue = AsyncTaskQueue(queue)
        first = await aqueue.submit("x.y", unique_key="k")
        second = await aqueue.submit("x.y", unique_key="k")
        return first.id, second.id

    first, second = asyncio.run(submit_twice())

    assert first == second
    assert len(published.messages) == 1
