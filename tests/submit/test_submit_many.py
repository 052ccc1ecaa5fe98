"""submit_many: one transaction, then the messages on one broker connection."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from kombu.exceptions import OperationalError

from queuestore import InMemoryTaskStore, InvalidTaskData, TaskContext, TaskQueue
from queuestore.aio import AsyncTaskQueue
from tests.celery_support import Published, register


def test_the_tasks_are_committed_then_published_on_one_connection(
    app: Celery, queue: TaskQueue, published: Published, monkeypatch: pytest.MonkeyPatch
) -> None:
    producers: list[Any] = []
    send = published.send_task

    def recording(name: str, **options: Any) -> None:
        producers.append(options.pop("producer", None))
        send(name, **options)

    monkeypatch.setattr(app, "send_task", recording)

    tasks = queue.submit_many([{"name": "x.y", "input": {"i": i}} for i in range(50)])

    assert [message["task_id"] for message in published.messages] == [task.id for task in tasks]
    assert len(producers) == 50
    assert producers[0] is not None
    assert all(producer is producers[0] for producer in producers)


def test_held_keys_and_later_starts_are_not_published(
    queue: TaskQueue, published: Published
) -> None:
    held = queue.submit("x.y", unique_key="k")
    tasks = queue.submit_many(
        [
            {"name": "x.y", "unique_key": "k"},
            {"name": "x.y", "delay": timedelta(hours=1)},
            {"name": "x.y", "delay": timedelta(seconds=2)},
        ]
    )

    assert tasks[0] == held
    assert tasks[1].run_at is not None
    countdowns = {message["task_id"]: message["countdown"] for message in published.messages}
    assert set(countdowns) == {held.id, tasks[2].id}
    assert 1 < countdowns[tasks[2].id] <= 2


def test_a_bad_item_is_named_and_nothing_is_written(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    def build(ctx: TaskContext, month: str) -> None: ...

    register(app, build, name="reports.build")
    cases = [
        ({"name": "reports.build", "input": {"year": 2026}}, "tasks[1].input.month"),
        ({"name": "x.y", "delay": -timedelta(seconds=1)}, "tasks[1].delay"),
        (
            {"name": "x.y", "delay": timedelta(seconds=1), "run_at": None, "ttl": "1h"},
            "tasks[1].ttl",
        ),
        ({"delay": timedelta(seconds=1)}, "tasks[1]"),
    ]
    for bad, field in cases:
        with pytest.raises(InvalidTaskData) as refused:
            queue.submit_many([{"name": "x.y"}, bad])
        assert refused.value.field == field

    assert queue.store.count() == 0
    assert published.messages == []


@pytest.mark.parametrize(
    ("given", "kind"), [("otters", "a string"), (["otters"], "an array"), (3, "a number")]
)
def test_an_input_that_is_not_an_object_is_refused_in_json_s_words(
    app: Celery, queue: TaskQueue, published: Published, given: object, kind: str
) -> None:
    """Not Python's "argument after ** must be a mapping": what the input must be, and is."""

    def build(ctx: TaskContext, month: str) -> None: ...

    register(app, build, name="reports.build")
    for name in ("reports.build", "not.registered.here"):
        with pytest.raises(InvalidTaskData) as refused:
            queue.submit_many([{"name": name, "input": given}])
        said = str(refused.value)
        assert said.startswith("tasks[0].input: must be a JSON object")
        assert said.endswith(f"not {kind}")
        assert "mapping" not in said
        assert "Signature" not in said
    with pytest.raises(InvalidTaskData, match=f"input: must be a JSON object.*not {kind}$"):
        queue.store.create("x.y", given)  # type: ignore[arg-type]

    assert queue.store.count() == 0
    assert published.messages == []


def test_a_broker_down_part_way_leaves_the_rest_to_the_sweep(
    queue: TaskQueue, published: Published, monkeypatch: pytest.MonkeyPatch
) -> None:
    send = published.send_task
    calls = {"n": 0}

    def failing_after_two(name: str, **options: Any) -> None:
        calls["n"] += 1
        if calls["n"] > 2:
            raise OperationalError("connection refused")
        send(name, **options)

    monkeypatch.setattr(queue.app, "send_task", failing_after_two)

    tasks = queue.submit_many([{"name": "x.y"} for _ in range(5)])

    assert len(published.messages) == 2
    assert calls["n"] == 3  # it stops at the first failure
    waiting = queue.store.unpublished(timedelta(0))
    assert {task.id for task in waiting} == {task.id for task in tasks}  # no mark yet for any


def test_the_async_queue_submits_many(queue: TaskQueue, published: Published) -> None:
    tasks = asyncio.run(AsyncTaskQueue(queue).submit_many([{"name": "x.y"}, {"name": "x.y"}]))

    assert [message["task_id"] for message in published.messages] == [task.id for task in tasks]


@pytest.mark.parametrize("broker", ["redis_url", "amqp_url"])
def test_on_a_real_broker_every_message_arrives_once(
    broker: str, request: pytest.FixtureRequest
) -> None:
    url: str = request.getfixturevalue(broker)
    app = Celery("test_submit_many_broker", broker=url, set_as_current=False)
    app.conf.task_default_queue = f"submit-many-{uuid.uuid4().hex}"
    queue = TaskQueue(InMemoryTaskStore(), app)
    try:
        tasks = queue.submit_many([{"name": "x.y", "input": {"i": i}} for i in range(2500)])

        with app.connection_for_write() as connection:
            channel = connection.default_channel
            bodies = []
            while (
                message := channel.basic_get(app.conf.task_default_queue, no_ack=True)
            ) is not None:
                bodies.append(message.headers["id"])
        assert bodies == [task.id for task in tasks]
    finally:
        with app.connection_for_write() as connection:
            connection.default_channel.queue_delete(app.conf.task_default_queue)
        queue.publisher.marks.flush()
        app.close()
