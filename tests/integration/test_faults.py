"""Faults, for real: workers SIGKILLed mid-task, a broker down at submit, a database restart.

Only processes and servers the tests started are stopped or killed: the
shared PostgreSQL, Redis and RabbitMQ are never touched. The broker outage
runs on a redis-server of the test's own; the database restarts are those of a
PostgreSQL cluster of the module's own (``initdb`` + ``pg_ctl``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from queuestore import TERMINAL, Task, TaskStatus
from tests.integration.harness import (
    Deployment,
    DeploymentFactory,
    LoggedProcess,
    PostgresCluster,
    RedisServer,
    count_lines,
    wait_for,
)

pytestmark = pytest.mark.integration


def _kill_the_worker_running(
    deployment: Deployment, task_id: str, workers: list[LoggedProcess]
) -> LoggedProcess:
    """Wait until one of ``workers`` runs the task, then SIGKILL it with all its children."""
    wait_for(
        lambda: deployment.records_of(task_id),
        timeout=30,
        what="the job to start",
        logs=deployment.processes,
    )
    pid = int(deployment.records_of(task_id)[0].rsplit(" ", 1)[1])
    running = [worker for worker in workers if worker.owns(pid)]
    assert len(running) == 1, f"job pid {pid} is in none of the workers{deployment.logs()}"
    running[0].kill()
    return running[0]


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_a_job_whose_worker_is_sigkilled_is_retried_by_the_reaper_on_another_worker(
    deployment: DeploymentFactory,
) -> None:
    stack = deployment("rabbitmq", "postgres")
    workers = [stack.start_worker(wait=False), stack.start_worker(wait=False)]
    stack.start_beat()
    for worker in workers:
        stack.wait_ready(worker, worker.name.split()[1])
    task = stack.queue.submit("tests.sleep", {"seconds": 0.2, "first_attempt_seconds": 120})

    killed = _kill_the_worker_running(stack, task.id, workers)

    done = stack.wait_status(task.id, *TERMINAL, timeout=60)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert done.attempt == 2
    assert done.result == {"attempt": 2, "slept": 0.2}
    assert stack.events_of(task.id) == ["1 start", "2 start", "2 end"]
    second_pid = int(stack.records_of(task.id)[1].rsplit(" ", 1)[1])
    assert not killed.owns(second_pid)


@pytest.mark.postgres
@pytest.mark.redis
def test_a_job_whose_worker_dies_on_its_last_attempt_fails_with_worker_lost(
    deployment: DeploymentFactory,
) -> None:
    stack = deployment("redis", "postgres", QUEUESTORE_MAX_LOST_RUNS="1")
    workers = [stack.start_worker(wait=False), stack.start_worker(wait=False)]
    stack.start_beat()
    for worker in workers:
        stack.wait_ready(worker, worker.name.split()[1])
    task = stack.queue.submit("tests.sleep", {"seconds": 120})

    _kill_the_worker_running(stack, task.id, workers)

    done = stack.wait_status(task.id, *TERMINAL, timeout=60)
    assert done.status is TaskStatus.FAILED
    assert done.error is not None
    assert done.error.type == "WorkerLost"
    assert done.attempt == 1
    assert stack.events_of(task.id) == ["1 start"]


@pytest.mark.postgres
@pytest.mark.redis
def test_a_worker_frozen_past_its_lease_cannot_change_the_task_another_worker_took(
    deployment: DeploymentFactory, tmp_path: Path
) -> None:
    """SIGSTOP a worker mid-job (a long GC pause, a frozen VM) until its task is reclaimed.

    Once resumed, the frozen run's job returns and its outcome (with its
    progress) is written fenced by a lease it no longer holds: refused. The
    second run's progress stays, and its result is the one the task keeps.
    """
    stack = deployment("redis", "postgres")
    gates = tmp_path / "gates"
    gates.mkdir()
    first_worker = stack.start_worker(concurrency=1)
    task = stack.queue.submit("tests.gated", {"gates": str(gates)})

    def at_gate(attempt: int) -> Callable[[], Task | None]:
        def reached() -> Task | None:
            current = stack.queue.store.get(task.id)
            # The message names the run: a claim keeps the last run's progress (0.5).
            waiting = current.attempt == attempt and current.progress == 0.5
            waiting = waiting and current.status_message == f"run {attempt} at its gate"
            return current if waiting and current.worker_id is not None else None

        return reached

    first = wait_for(at_gate(1), timeout=30, what="run 1 at its gate", logs=stack.processes)
    first_worker.freeze()
    try:
        stack.start_worker(concurrency=1, beat=True)  # its beat reaps, it runs the retry
        second = wait_for(at_gate(2), timeout=60, what="run 2 at its gate", logs=stack.processes)
        (gates / "1").touch()
    finally:
        first_worker.thaw()

    def first_run_over() -> Task | None:
        current = stack.queue.store.get(task.id)
        dropped = any(
            task.id in line and "outcome dropped" in line
            for line in first_worker.text().splitlines()
        )
        return current if dropped or current.worker_id != second.worker_id else None

    held = wait_for(first_run_over, timeout=45, what="run 1's outcome", logs=stack.processes)
    assert stack.events_of(task.id) == ["1 start", "2 start", "1 end"]
    assert held.status is TaskStatus.WORKING
    assert held.worker_id == second.worker_id != first.worker_id
    assert (held.attempt, held.progress, held.status_message) == (2, 0.5, "run 2 at its gate")
    assert held.result is None

    (gates / "2").touch()
    done = stack.wait_status(task.id, *TERMINAL)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert done.result == {"attempt": 2}
    assert stack.events_of(task.id) == ["1 start", "2 start", "1 end", "2 end"]


def test_the_reaper_retries_a_task_killed_on_the_embedded_broker(
    deployment: DeploymentFactory,
) -> None:
    """The filesystem broker has no redelivery: the message is gone with the worker."""
    stack = deployment("filesystem", "sqlite")
    first = stack.start_worker(concurrency=1)
    task = stack.queue.submit("tests.sleep", {"seconds": 0.2, "first_attempt_seconds": 120})
    _kill_the_worker_running(stack, task.id, [first])

    stack.start_worker(concurrency=1, beat=True)

    done = stack.wait_status(task.id, *TERMINAL, timeout=60)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert done.attempt == 2
    assert stack.events_of(task.id) == ["1 start", "2 start", "2 end"]


@pytest.mark.postgres
def test_a_task_submitted_while_the_broker_is_down_is_published_once_it_is_back(
    own_redis: RedisServer, deployment: DeploymentFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # own_redis first: it is torn down last, after the worker stopped cleanly.
    stack = deployment(own_redis.url, "postgres")
    # At DEBUG, Celery's line for each sweep is written even when it finds nothing.
    worker = stack.start_worker(beat=True, options=["--loglevel=DEBUG"])
    own_redis.stop()

    with caplog.at_level(logging.WARNING, logger="queuestore.submit.queue"):
        task = stack.queue.submit("tests.count_runs")

    # The publish failed (the caller logs it) and the store knows no message went out.
    assert f"task {task.id} stays queued in the store" in caplog.text
    assert [t.id for t in stack.queue.store.unpublished(timedelta(0))] == [task.id]
    own_redis.start()

    done = stack.wait_status(task.id, *TERMINAL, timeout=90)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert "sweep published 1 waiting tasks" in worker.text()
    assert stack.events_of(task.id) == ["1 run"]
    # The sweep keeps running: two more sweeps later, it has not published the task again.
    sweeps = count_lines(worker, "queuestore.sweep[", "succeeded")
    wait_for(
        lambda: count_lines(worker, "queuestore.sweep[", "succeeded") >= sweeps + 2,
        timeout=30,
        what="two more sweeps",
        logs=[worker],
    )
    assert stack.events_of(task.id) == ["1 run"]


@pytest.fixture(scope="module")
def restartable(
    own_postgres: PostgresCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Deployment, LoggedProcess, PostgresCluster]]:
    """A worker on a database we may restart, with the embedded broker (which we do not)."""
    root: Path = tmp_path_factory.mktemp("restartable")
    stack = Deployment(
        root=root,
        database_url=own_postgres.url,
        broker_url="filesystem://",
        # Longer than any outage below, so the reaper never steps in.
        overrides={"QUEUESTORE_LEASE": "30"},
    )
    stack.migrate()
    try:
        worker = stack.start_worker(beat=True)
        yield stack, worker, own_postgres
    finally:
        stack.close()


def test_a_running_job_survives_a_database_restart(
    restartable: tuple[Deployment, LoggedProcess, PostgresCluster],
) -> None:
    stack, worker, database = restartable
    task = stack.queue.submit("tests.sleep", {"seconds": 2})
    wait_for(
        lambda: stack.events_of(task.id) == ["1 start"],
        timeout=30,
        what="the job to start",
        logs=[worker],
    )

    database.stop()
    # The job ends while the database is down: its outcome write has to wait.
    wait_for(
        lambda: stack.events_of(task.id) == ["1 start", "1 end"],
        timeout=30,
        what="the job to end",
        logs=[worker],
    )
    stack.wait_log(worker, "store unavailable writing task", task.id)
    database.start()

    done = stack.wait_status(task.id, *TERMINAL, timeout=90)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert done.result == {"attempt": 1, "slept": 2}


def test_a_message_that_arrives_while_the_database_is_down_is_not_lost(
    restartable: tuple[Deployment, LoggedProcess, PostgresCluster],
) -> None:
    stack, worker, database = restartable
    task = stack.queue.store.create("tests.count_runs")

    database.stop()
    stack.queue.publish(task)  # the broker is up: only the claim cannot reach the store
    stack.wait_log(worker, task.id, "store unavailable", timeout=30)
    database.start()

    done = stack.wait_status(task.id, *TERMINAL, timeout=90)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert stack.events_of(task.id) == ["1 run"]


def test_a_caller_reads_right_through_a_database_restart(
    restartable: tuple[Deployment, LoggedProcess, PostgresCluster],
) -> None:
    """Every pooled connection dies with the server: a read retries once on a fresh one."""
    stack, _, database = restartable
    store = stack.queue.store
    tasks = [store.create("tests.count_runs") for _ in range(3)]
    assert store.get(tasks[0].id).id == tasks[0].id

    database.stop()
    database.start()

    assert store.get(tasks[1].id).id == tasks[1].id
    assert {t.id for t in store.list(name="tests.count_runs").tasks} >= {t.id for t in tasks}
    assert store.cancel(tasks[2].id).status is TaskStatus.CANCELLED
