"""The store owns a claimed task, whatever the broker's timeouts: recovery and long jobs.

- A worker SIGKILLed holding running and prefetched messages: every task runs
  elsewhere within a few seconds of the lease, on Redis (whose visibility
  timeout follows the lease) and on RabbitMQ, and completes once.
- A job longer than a private RabbitMQ node's ``consumer_timeout`` completes
  once: its message is acknowledged once the store shows it claimed, on the
  prefork pool after ``ack_after``, on the solo pool at its claim.
- A solo worker on Redis runs a job longer than the lease from one delivery:
  another worker does not get its message back after the visibility timeout.
- A deep queue behind slow jobs is not redelivered: nothing that only waits
  its turn is published or delivered twice.
- A prefork worker rides out a Redis restart with runs in flight: it stays up,
  its runs end once, and it serves new tasks (Celery 5.7's consumer restart
  would otherwise die on an ``AttributeError``, see :mod:`queuestore.run.blips`).

Only processes and servers the tests started are stopped or killed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery.signals import before_task_publish

from queuestore import TERMINAL, TaskStatus
from tests.integration.harness import (
    Deployment,
    DeploymentFactory,
    RabbitMQNode,
    RedisServer,
    count_lines,
    wait_for,
)

pytestmark = pytest.mark.integration

LEASE_SECONDS = 3.0
"""The harness's lease (``FAST``): ack_after is half of it, Redis's visibility timeout all."""


@contextmanager
def publishes_recorded(deployment: Deployment) -> Iterator[None]:
    """Record this process's publishes as the test app's workers record theirs."""

    def published(headers: dict[str, Any] | None = None, **_: Any) -> None:
        task_id = (headers or {}).get("id")
        if task_id is not None:
            with open(deployment.records / f"{task_id}.messages", "a") as file:
                file.write("published\n")

    before_task_publish.connect(published, weak=False)
    try:
        yield
    finally:
        before_task_publish.disconnect(published)


def started_attempts(deployment: Deployment, task_id: str) -> list[str]:
    return [event for event in deployment.events_of(task_id) if event.endswith(" start")]


@pytest.mark.postgres
@pytest.mark.parametrize(
    "broker",
    [
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("rabbitmq", marks=pytest.mark.rabbitmq),
    ],
)
def test_every_task_of_a_killed_worker_runs_elsewhere_soon_and_completes_once(
    deployment: DeploymentFactory, broker: str
) -> None:
    stack = deployment(broker, "postgres")
    # Two running and six prefetched, waiting their turn in the worker's memory.
    first = stack.start_worker(concurrency=2, options=["--prefetch-multiplier=4"])
    with publishes_recorded(stack):
        tasks = [stack.queue.submit("tests.sleep", {"seconds": 2.0}) for _ in range(8)]
    wait_for(
        lambda: (
            all("received" in stack.messages_of(task.id) for task in tasks)
            and sum(bool(started_attempts(stack, task.id)) for task in tasks) == 2
        ),
        timeout=30,
        what="the first worker to run two tasks and hold the other six",
        logs=stack.processes,
    )
    first.kill()
    killed_at = time.monotonic()

    stack.start_worker(concurrency=2, beat=True)
    ready_at = time.monotonic()
    done = [stack.wait_status(task.id, *TERMINAL, timeout=60) for task in tasks]
    recovered_in = time.monotonic() - ready_at

    assert {task.status for task in done} == {TaskStatus.COMPLETED}, stack.logs()
    for task in tasks:
        ends = [event for event in stack.events_of(task.id) if event.endswith(" end")]
        assert len(ends) == 1, (task.id, stack.events_of(task.id))
    # Lease (claimed runs, then the reaper) or visibility timeout (prefetched
    # messages) plus one sweep, plus eight two-second runs on two slots.
    assert recovered_in < 20 + 4 * 2.0, (recovered_in, time.monotonic() - killed_at)


@pytest.mark.postgres
@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_a_job_longer_than_rabbitmqs_consumer_timeout_completes_once(
    deployment: DeploymentFactory, own_rabbitmq: RabbitMQNode, pool: str
) -> None:
    stack = deployment(own_rabbitmq.url, "postgres", QUEUESTORE_TERMINATE_ON_CANCEL="false")
    worker = stack.start_worker(pool=pool, concurrency=1)
    with publishes_recorded(stack):
        long = stack.queue.submit("tests.sleep", {"seconds": 25.0})
        wait_for(
            lambda: started_attempts(stack, long.id),
            timeout=30,
            what="the long job to start",
            logs=stack.processes,
        )
        behind = stack.queue.submit("tests.count_runs")

    done = stack.wait_status(long.id, *TERMINAL, timeout=90)
    after = stack.wait_status(behind.id, *TERMINAL, timeout=60)

    assert done.status is TaskStatus.COMPLETED, stack.logs()
    assert after.status is TaskStatus.COMPLETED, stack.logs()
    assert stack.events_of(long.id) == ["1 start", "1 end"], stack.logs()
    assert stack.messages_of(long.id) == ["published", "received"], stack.logs()
    assert stack.messages_of(behind.id) == ["published", "received"], stack.logs()
    assert worker.alive(), stack.logs()
    log = worker.text()
    assert "PRECONDITION_FAILED" not in log, log[-4000:]
    assert "PreconditionFailed" not in log, log[-4000:]


@pytest.mark.postgres
@pytest.mark.redis
def test_a_deep_queue_behind_slow_jobs_is_published_and_delivered_once(
    deployment: DeploymentFactory,
) -> None:
    stack = deployment("redis", "postgres")
    waiting_count = int(os.environ.get("QUEUESTORE_TEST_DEEP_QUEUE", "2000"))
    with publishes_recorded(stack):
        # Slow jobs run past Redis's visibility timeout (the lease) on both slots.
        slow = [stack.queue.submit("tests.sleep", {"seconds": 4 * LEASE_SECONDS}) for _ in range(2)]
        stack.start_worker(concurrency=2)
        wait_for(
            lambda: all(started_attempts(stack, task.id) for task in slow),
            timeout=30,
            what="the slow jobs to start",
            logs=stack.processes,
        )
        waiting = [stack.queue.submit("tests.count_runs") for _ in range(waiting_count)]
        stack.start_beat()  # the reaper and the sweep run throughout
        for task in [*slow, *waiting]:
            assert stack.wait_status(task.id, *TERMINAL, timeout=180).status is (
                TaskStatus.COMPLETED
            ), stack.logs()

    for task in slow:
        assert stack.messages_of(task.id) == ["published", "received"], stack.logs()
        assert stack.events_of(task.id) == ["1 start", "1 end"]
    tasks = [*slow, *waiting]
    messages = [stack.messages_of(task.id) for task in tasks]
    publishes = sum(lines.count("published") for lines in messages) / len(tasks)
    deliveries = sum(lines.count("received") for lines in messages) / len(tasks)
    assert publishes <= 1.05, publishes
    assert deliveries <= 1.05, deliveries
    assert all(len(stack.records_of(task.id)) == 1 for task in waiting)


def test_a_prefork_worker_rides_out_a_redis_restart_with_runs_in_flight(
    deployment: DeploymentFactory, own_redis: RedisServer
) -> None:
    stack = deployment(own_redis.url, "sqlite")
    # Free pool slots keep the consumer waiting on Redis when it goes away.
    worker = stack.start_worker(concurrency=4)
    running = [stack.queue.submit("tests.sleep", {"seconds": 6.0}) for _ in range(2)]
    wait_for(
        lambda: all(started_attempts(stack, task.id) for task in running),
        timeout=30,
        what="the runs to start",
        logs=stack.processes,
    )
    own_redis.stop()
    stack.wait_log(worker, "Connection to broker lost")
    time.sleep(2.0)
    own_redis.start()  # the same port, and empty
    wait_for(
        lambda: count_lines(worker, "Connected to redis") >= 2,
        timeout=60,
        what="the worker to connect again",
        logs=[worker],
    )

    done = [stack.wait_status(task.id, *TERMINAL, timeout=60) for task in running]
    after = [stack.queue.submit("tests.count_runs") for _ in range(4)]
    served = [stack.wait_status(task.id, *TERMINAL, timeout=60) for task in after]

    assert worker.alive(), stack.logs()
    assert {task.status for task in [*done, *served]} == {TaskStatus.COMPLETED}, stack.logs()
    for task in running:
        ends = [event for event in stack.events_of(task.id) if event.endswith(" end")]
        assert len(ends) == 1, (task.id, stack.events_of(task.id))
    assert "Unrecoverable error" not in worker.text(), worker.text()[-4000:]


@pytest.mark.redis
def test_a_solo_worker_on_redis_runs_a_job_longer_than_the_lease_from_one_delivery(
    deployment: DeploymentFactory,
) -> None:
    # Redis's visibility timeout is the lease: 6 s, and the job runs 16 s. Any
    # consumer of the queue gives back a message unacknowledged that long: the
    # second worker would, while the first runs the job.
    stack = deployment("redis", "sqlite", QUEUESTORE_LEASE="6")
    solo = {"pool": "solo", "concurrency": 1, "QUEUESTORE_TERMINATE_ON_CANCEL": "false"}
    worker = stack.start_worker(**solo)  # type: ignore[arg-type]
    with publishes_recorded(stack):
        long = stack.queue.submit("tests.sleep", {"seconds": 16.0})
        wait_for(
            lambda: started_attempts(stack, long.id),
            timeout=30,
            what="the long job to start",
            logs=stack.processes,
        )
        other = stack.start_worker(**solo)  # type: ignore[arg-type]
        behind = stack.queue.submit("tests.count_runs")
        done = stack.wait_status(long.id, *TERMINAL, timeout=90)
        after = stack.wait_status(behind.id, *TERMINAL, timeout=60)

    assert done.status is TaskStatus.COMPLETED, stack.logs()
    assert after.status is TaskStatus.COMPLETED, stack.logs()
    assert stack.events_of(long.id) == ["1 start", "1 end"], stack.logs()
    assert stack.messages_of(long.id) == ["published", "received"], stack.logs()
    assert stack.messages_of(behind.id) == ["published", "received"], stack.logs()
    assert "no event loop" not in worker.text() + other.text()
