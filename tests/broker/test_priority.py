"""Priorities through the queue: the message's priority as each broker reads it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery

from queuestore import InMemoryTaskStore, InvalidTaskData, TaskQueue
from queuestore.broker.transports import priority_config
from queuestore.config import Settings
from tests.celery_support import Published


def queue_on(
    broker: str, monkeypatch: pytest.MonkeyPatch, **options: object
) -> tuple[TaskQueue, Published]:
    app = Celery("test_priority", broker=broker, set_as_current=False)
    published = Published.on(app, monkeypatch)
    return TaskQueue(InMemoryTaskStore(), app, **options), published  # type: ignore[arg-type]


def test_without_priorities_the_messages_carry_none(queue: TaskQueue, published: Published) -> None:
    task = queue.submit("x.y", priority=9)

    assert task.priority == 9
    assert "priority" not in published.messages[0]


@pytest.mark.parametrize(
    ("broker", "sent"),
    [("amqp://guest@localhost//", {0: 0, 5: 5, 9: 9}), ("redis://localhost/0", {0: 9, 5: 4, 9: 0})],
)
def test_with_priorities_each_broker_gets_its_own_reading(
    broker: str, sent: dict[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # RabbitMQ delivers the highest first; kombu's Redis transport pops the lowest first.
    queue, published = queue_on(broker, monkeypatch, priorities=True)

    for priority in sent:
        queue.submit("x.y", priority=priority)
    queue.submit_many([{"name": "x.y", "priority": 9}])
    queue.submit("x.y", priority=9, delay=timedelta(seconds=1))

    assert [message["priority"] for message in published.messages] == [
        *sent.values(),
        sent[9],
        sent[9],
    ]


def test_a_bad_priority_is_refused_before_anything_is_written(
    queue: TaskQueue, published: Published
) -> None:
    with pytest.raises(InvalidTaskData, match="priority"):
        queue.submit("x.y", priority=10)
    with pytest.raises(InvalidTaskData, match=r"tasks\[0\]\.priority"):
        queue.submit_many([{"name": "x.y", "priority": -1}])

    assert queue.store.count() == 0
    assert published.messages == []


def test_the_setting_configures_the_brokers_and_the_queue(app: Celery) -> None:
    rabbit = Settings(broker_url="amqp://guest@localhost//", priorities=True).celery_config()
    assert (rabbit["task_queue_max_priority"], rabbit["task_default_priority"]) == (9, 0)
    redis = Settings(broker_url="redis://localhost/0", priorities=True).celery_config()
    assert redis["broker_transport_options"]["priority_steps"] == list(range(10))
    assert "task_queue_max_priority" not in Settings(broker_url="redis://x/0").celery_config()
    assert priority_config("amqp://x//") == {
        "task_queue_max_priority": 9,
        "task_default_priority": 0,
    }

    queue = Settings(priorities=True).make_queue(app, store=InMemoryTaskStore(), beat=False)
    assert queue.options.priorities is True
