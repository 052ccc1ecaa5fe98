"""Scheduled starts through real ``celery worker`` processes, on Redis and RabbitMQ.

A task submitted with ``delay`` (or ``run_at``) keeps its start in its row; its
message goes out at most ``schedule_ahead`` before the start, with a countdown
to it: from ``submit`` when the start is that near, from the sweep
(beat) otherwise. These tests hold the row's ``started_at`` (the database's
clock) against its ``run_at``: never before it, and within :data:`ON_TIME`
after it. A cancel before the start leaves nothing to run, and a worker killed
while it holds a countdown message hands the task to another, which runs it
once.

The deployments use a lease of 8 s (so ``schedule_ahead`` is 3.6 s, 90 % of the
lease minus ``ack_after``) or 6 s for the kills (2.7 s), and the harness's
sweep every second. Their ``publish_grace`` is 5 s, not the harness's 1 s: a
publish mark is written half the grace after the publish, and with 1 s a
loaded machine's slow first publish let the sweep publish a submitted task a
second time (harmless, the claim takes one; but these tests count publishes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from queuestore import TERMINAL, Task, TaskStatus
from queuestore.broker.transports import redis_transport_options
from tests.integration.harness import (
    Deployment,
    DeploymentFactory,
    LoggedProcess,
    RedisServer,
    build_deployment,
    count_lines,
    wait_for,
)

pytestmark = pytest.mark.integration

ON_TIME = timedelta(seconds=1)
"""How late after its ``run_at`` a scheduled job may start here (a quiet machine takes ms)."""

LEASE = 8
KILL_LEASE = 6
GRACE = 5


@dataclass
class Stack:
    """A deployment and its one worker, with embedded beat (the sweep every second)."""

    deployment: Deployment
    worker: LoggedProcess


BROKERS = [
    pytest.param("redis", id="redis", marks=[pytest.mark.redis, pytest.mark.postgres]),
    pytest.param("rabbitmq", id="rabbitmq", marks=[pytest.mark.rabbitmq, pytest.mark.postgres]),
]


@pytest.fixture(scope="module", params=BROKERS)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    broker = request.param
    root = tmp_path_factory.mktemp(f"scheduled-{broker}")
    deployment = build_deployment(
        request,
        root,
        broker,
        "postgres",
        QUEUESTORE_LEASE=str(LEASE),
        QUEUESTORE_PUBLISH_GRACE=str(GRACE),
    )
    try:
        worker = deployment.start_worker(beat=True)
        yield Stack(deployment, worker)
    finally:
        deployment.close()


def assert_started_on_time(task: Task) -> None:
    assert task.status is TaskStatus.COMPLETED, task.error
    assert task.run_at is not None
    assert task.started_at is not None
    late = task.started_at - task.run_at
    assert timedelta(0) <= late <= ON_TIME, f"started {late.total_seconds():+.3f} s after run_at"


def received(deployment: Deployment, task_id: str) -> bool:
    return "received" in deployment.messages_of(task_id)


def test_a_start_within_schedule_ahead_is_published_by_submit_and_runs_on_time(
    stack: Stack,
) -> None:
    queue = stack.deployment.queue
    assert queue.options.schedule_ahead > timedelta(seconds=3)
    task = queue.submit("tests.count_runs", delay=timedelta(seconds=3))
    assert task.status is TaskStatus.SUBMITTED
    assert task.run_at is not None

    # The message is out at once: a worker holds it, waiting for its countdown.
    wait_for(
        lambda: received(stack.deployment, task.id),
        timeout=2,
        what="the worker to receive the message",
        logs=[stack.worker],
    )
    assert stack.deployment.events_of(task.id) == []
    assert queue.store.get(task.id).status is TaskStatus.SUBMITTED

    done = stack.deployment.wait_status(task.id, *TERMINAL, timeout=20)
    assert_started_on_time(done)
    assert stack.deployment.events_of(task.id) == ["1 run"]
    assert "published" not in stack.deployment.messages_of(task.id)  # the sweep did not


def test_a_start_beyond_schedule_ahead_is_published_by_the_sweep_and_runs_on_time(
    stack: Stack,
) -> None:
    queue = stack.deployment.queue
    run_at = datetime.now(UTC) + queue.options.schedule_ahead + timedelta(seconds=3.5)
    task = queue.submit("tests.count_runs", run_at=run_at)

    # Until the start is within schedule_ahead, no message exists.
    until_near = run_at - queue.options.schedule_ahead - timedelta(seconds=0.5) - datetime.now(UTC)
    time.sleep(until_near.total_seconds())
    assert not received(stack.deployment, task.id)
    assert queue.store.get(task.id).status is TaskStatus.SUBMITTED

    done = stack.deployment.wait_status(task.id, *TERMINAL, timeout=20)
    assert_started_on_time(done)
    assert stack.deployment.events_of(task.id) == ["1 run"]
    assert stack.deployment.messages_of(task.id).count("published") == 1  # by the sweep


def test_a_task_cancelled_before_its_start_never_runs_its_job(stack: Stack) -> None:
    """Three cancels before the start; none of their jobs runs.

    ``revoked``: cancelled by the queue while a worker holds its message (the
    revoke drops it); ``refused``: cancelled in the store only, as by a caller
    whose revoke never reached the worker, so the worker's claim refuses it at
    the start; ``unpublished``: its start was beyond schedule_ahead, so it never
    had a message.
    """
    deployment = stack.deployment
    queue = deployment.queue
    delay = timedelta(seconds=2.5)
    revoked = queue.submit("tests.count_runs", delay=delay)
    refused = queue.submit("tests.count_runs", delay=delay)
    unpublished = queue.submit(
        "tests.count_runs", delay=queue.options.schedule_ahead + timedelta(seconds=1)
    )
    wait_for(
        lambda: received(deployment, revoked.id) and received(deployment, refused.id),
        timeout=2,
        what="the worker to receive both messages",
        logs=[stack.worker],
    )

    queue.cancel(revoked.id)
    queue.store.cancel(refused.id)
    queue.cancel(unpublished.id)

    # At its start the worker's claim refuses the task the store alone cancelled.
    deployment.wait_log(stack.worker, refused.id, "not claimable", timeout=10)
    assert unpublished.run_at is not None
    margin = timedelta(seconds=1.5)
    time.sleep(max((unpublished.run_at + margin - datetime.now(UTC)).total_seconds(), 0))
    for task in (revoked, refused, unpublished):
        assert deployment.events_of(task.id) == [], deployment.logs()
        left = queue.store.get(task.id)
        assert left.status is TaskStatus.CANCELLED
        assert left.started_at is None
        assert left.attempt == 0
    assert not received(deployment, unpublished.id)


# -- a worker killed while it holds a countdown message -------------------------


def _kill_the_worker_holding(
    deployment: Deployment, task_id: str, workers: list[LoggedProcess]
) -> LoggedProcess:
    """Wait until one of ``workers`` received the task's message, then SIGKILL it."""
    wait_for(
        lambda: [worker for worker in workers if count_lines(worker, task_id, "received")],
        timeout=5,
        what="a worker to receive the message",
        logs=workers,
    )
    holding = [worker for worker in workers if count_lines(worker, task_id, "received")]
    assert len(holding) == 1, deployment.logs()
    holding[0].kill()
    return holding[0]


def _held_then_killed(make: Deployment) -> tuple[Task, Task]:
    """Two workers and beat; a task 2 s ahead; the worker holding it killed before then.

    Returns the task as submitted and as it ended, run once by the other worker.
    """
    workers = [make.start_worker(concurrency=1, wait=False) for _ in range(2)]
    make.start_beat()
    for worker in workers:
        make.wait_ready(worker, worker.name.split()[1])
    task = make.queue.submit("tests.count_runs", delay=timedelta(seconds=2))
    assert task.run_at is not None
    killed = _kill_the_worker_holding(make, task.id, workers)
    assert datetime.now(UTC) < task.run_at, "the kill came after the start"
    done = make.wait_status(task.id, *TERMINAL, timeout=KILL_LEASE + 20)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert done.attempt == 1
    assert make.events_of(task.id) == ["1 run"]
    # The one message, the one submit published, went from the killed worker to the other.
    assert make.messages_of(task.id) == ["received", "received"]
    run_pid = int(make.records_of(task.id)[0].rsplit(" ", 1)[1])
    assert not killed.owns(run_pid)
    assert any(worker.owns(run_pid) for worker in workers if worker is not killed)
    return task, done


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_on_rabbitmq_a_countdown_message_of_a_killed_worker_runs_once_at_its_start(
    deployment: DeploymentFactory,
) -> None:
    """The killed connection's unacknowledged message goes to the other worker at once."""
    make = deployment(
        "rabbitmq",
        "postgres",
        QUEUESTORE_LEASE=str(KILL_LEASE),
        QUEUESTORE_PUBLISH_GRACE=str(GRACE),
    )
    _, done = _held_then_killed(make)
    assert_started_on_time(done)


@pytest.mark.postgres
def test_on_redis_a_countdown_message_of_a_killed_worker_runs_once_after_the_visibility_timeout(
    own_redis: RedisServer, deployment: DeploymentFactory
) -> None:
    """Redis hands the message on once its visibility timeout (the lease) has passed.

    The timeout counts from the fetch, just after the submit; kombu looks for
    such messages every ``unacked_restore_interval``. The task runs late, by up
    to ``lease + restore interval - delay``: the price of a worker's death on Redis.

    On a redis-server of the test's own: kombu keeps one index of unacknowledged
    messages per Redis database, and any worker on it restores every message
    older than its own visibility timeout, so on a shared database the shortest
    lease among its deployments would set the timing.
    """
    # own_redis first: it is torn down last, after the workers stopped.
    make = deployment(
        own_redis.url,
        "postgres",
        QUEUESTORE_LEASE=str(KILL_LEASE),
        QUEUESTORE_PUBLISH_GRACE=str(GRACE),
    )
    task, done = _held_then_killed(make)
    assert done.run_at is not None
    assert done.started_at is not None
    lease = timedelta(seconds=KILL_LEASE)
    restore = timedelta(seconds=redis_transport_options(lease)["unacked_restore_interval"])
    after_submit = (done.started_at - task.created_at).total_seconds()
    assert lease <= done.started_at - task.created_at <= lease + restore + ON_TIME, after_submit
