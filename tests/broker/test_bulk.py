"""Many messages at once on Redis: the templated messages are ``send_task``'s own, in order."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, signals

from queuestore import InMemoryTaskStore, TaskQueue
from queuestore.broker import bulk
from queuestore.broker.transports import priority_config

pytestmark = pytest.mark.redis


@pytest.fixture
def queue(redis_url: str) -> Iterator[TaskQueue]:
    """A queue on the test Redis, on a queue name of its own, with priorities."""
    app = Celery(f"bulk-{uuid.uuid4().hex[:8]}", broker=redis_url, set_as_current=False)
    app.conf.update(priority_config(redis_url))
    app.conf.task_default_queue = f"bulk-{uuid.uuid4().hex}"
    yield TaskQueue(InMemoryTaskStore(), app, priorities=True)
    client = redis.Redis.from_url(redis_url)
    client.delete(*client.keys(f"{app.conf.task_default_queue}*") or ["-"])
    client.close()
    app.close()


def taken(queue: TaskQueue) -> list[dict[str, Any]]:
    """Every message waiting in the queue's lists, oldest first, without its delivery tag."""
    name = queue.app.conf.task_default_queue
    messages = []
    with queue.app.connection_for_write() as connection:
        client = connection.default_channel.client
        for key in sorted(client.keys(f"{name}*")):
            for text in reversed(client.lrange(key, 0, -1)):
                message = json.loads(text)
                message["properties"].pop("delivery_tag")
                message["body"] = json.loads(base64.b64decode(message["body"]))
                messages.append({"key": key, **message})
            client.delete(key)
    return messages


def test_a_batch_sends_the_messages_send_task_would_in_order(queue: TaskQueue) -> None:
    items = [{"name": f"x.{i % 2}", "priority": i % 3, "input": {"i": i}} for i in range(7)]
    tasks = queue.submit_many(items)
    templated = taken(queue)
    for task in tasks:
        queue.publisher.publish(task)

    assert templated == taken(queue)
    by_priority = sorted(tasks, key=lambda task: -task.priority)  # a list a priority, in order
    assert [message["headers"]["id"] for message in templated] == [task.id for task in by_priority]


def test_templates_are_not_used_where_a_receiver_watches_each_publish(queue: TaskQueue) -> None:
    seen: list[str] = []

    def watch(headers: dict[str, Any], **_: Any) -> None:
        seen.append(headers["id"])

    signals.before_task_publish.connect(watch, weak=False)
    try:
        tasks = queue.submit_many([{"name": "x.y"} for _ in range(3)])
    finally:
        signals.before_task_publish.disconnect(watch)

    assert seen == [task.id for task in tasks]
    assert len(taken(queue)) == 3


def test_a_message_that_does_not_look_as_expected_makes_no_template() -> None:
    text = json.dumps({"headers": {"id": "other"}, "properties": {"body_encoding": "base64"}})

    assert bulk.template("celery", text, "abc") is None
