"""Priorities through a real ``celery worker`` on Redis and RabbitMQ, under a backlog.

With ``QUEUESTORE_PRIORITIES=true`` the app declares its queues for priorities
(RabbitMQ's ``x-max-priority``, Redis's priority steps) and every message
carries its task's priority as that broker reads it. One worker process runs
one job at a time and prefetches none beyond it (the package's prefetch
multiplier of 1), so the messages that wait do so in the broker, which must
hand out the urgent ones first.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from queuestore import TERMINAL, Task, TaskStatus
from tests.integration.harness import Deployment, build_deployment

pytestmark = pytest.mark.integration

BROKERS = [
    pytest.param("redis", id="redis", marks=[pytest.mark.redis, pytest.mark.postgres]),
    pytest.param("rabbitmq", id="rabbitmq", marks=[pytest.mark.rabbitmq, pytest.mark.postgres]),
]


@pytest.fixture(params=BROKERS)
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp(f"priorities-{request.param}")
    deployment = build_deployment(
        request, root, request.param, "postgres", QUEUESTORE_PRIORITIES="true"
    )
    try:
        yield deployment
    finally:
        deployment.close()


def started(task: Task) -> float:
    assert task.status is TaskStatus.COMPLETED, task.error
    assert task.started_at is not None
    return task.started_at.timestamp()


def test_under_a_backlog_the_urgent_tasks_start_first(deployment: Deployment) -> None:
    worker = deployment.start_worker(concurrency=1)
    queue = deployment.queue
    assert queue.options.priorities
    blocker = queue.submit("tests.sleep", {"seconds": 2})
    deployment.wait_status(blocker.id, TaskStatus.WORKING, timeout=30)

    # Behind the running job, in the broker: six of the default priority, then three urgent.
    low = [queue.submit("tests.sleep", {"seconds": 0.1}) for _ in range(6)]
    high = [queue.submit("tests.sleep", {"seconds": 0.1}, priority=9) for _ in range(3)]

    done = {
        task.id: deployment.wait_status(task.id, *TERMINAL, timeout=60) for task in [*low, *high]
    }
    last_urgent = max(started(done[task.id]) for task in high)
    first_default = min(started(done[task.id]) for task in low)
    assert last_urgent < first_default, worker.tail()
    # Among the default ones, the broker kept the order they were submitted in.
    assert sorted(low, key=lambda task: started(done[task.id])) == low
