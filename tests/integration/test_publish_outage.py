"""A broker that goes away under a long-running caller: its tasks wait in the store.

A caller process (an API server) publishes once, then its Redis goes away:
``submit_many`` returns the committed tasks as ``submit`` does, raising nothing,
and ``POST /tasks:batch`` answers 201; the sweep publishes them once Redis is
back. Only the Redis server the test started is stopped.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from celery import Celery

from queuestore import SqlTaskStore, TaskQueue, TaskStatus
from queuestore.beat.sweep import sweep
from tests.integration.harness import RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture
def queue(own_redis: RedisServer, tmp_path: Path) -> Iterator[TaskQueue]:
    """A caller's queue on a SQLite store and the test's own Redis, without workers."""
    app = Celery(f"caller-{uuid.uuid4().hex[:8]}", broker=own_redis.url, set_as_current=False)
    app.conf.broker_connection_retry = False
    store = SqlTaskStore(f"sqlite:///{tmp_path / 'queuestore.db'}")
    store.migrate()
    yield TaskQueue(store, app, publish_grace=timedelta(0))
    app.close()
    store.close()


def waiting_messages(queue: TaskQueue) -> int:
    with queue.app.connection_for_write() as connection:
        return int(connection.default_channel.client.llen("celery"))


def test_submit_many_keeps_its_tasks_for_the_sweep_when_redis_goes_away(
    queue: TaskQueue, own_redis: RedisServer
) -> None:
    first = queue.submit_many([{"name": "x.y", "input": {"i": i}} for i in range(3)])
    assert waiting_messages(queue) == len(first)
    queue.publisher.marks.flush()
    own_redis.stop()

    later = queue.submit_many([{"name": "x.y", "input": {"i": i}} for i in range(3)])
    alone = queue.submit("x.y")

    assert [task.status for task in later] == [TaskStatus.SUBMITTED] * 3
    assert [queue.store.get(task.id).status for task in [*later, alone]] == [
        TaskStatus.SUBMITTED
    ] * 4
    own_redis.start()  # empty: the first batch's messages are for republish_after
    assert sweep(queue.publisher) == len(later) + 1
    assert waiting_messages(queue) == len(later) + 1


def test_a_batch_over_http_is_created_when_redis_goes_away(
    queue: TaskQueue, own_redis: RedisServer
) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from queuestore import Settings
    from queuestore.http import create_app

    items = [{"name": "x.y", "input": {"i": i}} for i in range(3)]
    with TestClient(create_app(Settings(), queue=queue)) as http:
        assert http.post("/tasks:batch", json={"tasks": items}).status_code == 201
        own_redis.stop()
        response = http.post("/tasks:batch", json={"tasks": items})

    assert response.status_code == 201, response.text
    created = [task["id"] for task in response.json()["tasks"]]
    assert [queue.store.get(task_id).status for task_id in created] == [TaskStatus.SUBMITTED] * 3
