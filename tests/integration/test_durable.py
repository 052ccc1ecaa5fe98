"""Durable work inside a task, through real worker processes.

- A job SIGKILLed inside its fourth step completes on the next run with the
  first three steps run once (side effects counted in the database).
- A 60 s durable sleep holds no worker slot, and wakes within a sweep of its time.
- A parent fanning out to 100 children holds no slot while they run.
- Cancelling a parent cancels every live child.
- A run timeout stops a CPU-bound job in the solo, threads and prefork pools.
- A start-by passed while the task was queued means its job never runs.
- A task submitted in the caller's transaction exists if and only if it commits.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from queuestore import LIVE, TERMINAL, StepStatus, TaskNotFound, TaskStatus
from tests.integration.harness import Deployment, DeploymentFactory, LoggedProcess, wait_for

pytestmark = pytest.mark.integration


def side_effects(stack: Deployment, task_id: str) -> Counter[str]:
    """How often each step's body ran, as the jobs recorded it in the database."""
    with stack.queue.store.engine.connect() as connection:  # type: ignore[attr-defined]
        rows = connection.execute(
            text("SELECT step FROM it_side_effects WHERE task_id = :task_id"), {"task_id": task_id}
        )
        return Counter(row[0] for row in rows)


def create_side_effects(stack: Deployment) -> None:
    with stack.queue.store.engine.begin() as connection:  # type: ignore[attr-defined]
        connection.execute(
            text(
                "CREATE TABLE IF NOT EXISTS it_side_effects "
                "(task_id TEXT, step TEXT, attempt INTEGER, pid INTEGER)"
            )
        )


def the_worker_running(stack: Deployment, pid: int, workers: list[LoggedProcess]) -> LoggedProcess:
    running = [worker for worker in workers if worker.owns(pid)]
    assert len(running) == 1, f"job pid {pid} is in none of the workers{stack.logs()}"
    return running[0]


@pytest.mark.postgres
@pytest.mark.redis
def test_a_job_killed_inside_its_fourth_step_resumes_there(
    deployment: DeploymentFactory,
) -> None:
    stack = deployment("redis", "postgres")
    create_side_effects(stack)
    workers = [stack.start_worker(wait=False), stack.start_worker(wait=False)]
    stack.start_beat()
    for worker in workers:
        stack.wait_ready(worker, worker.name.split()[1])
    task = stack.queue.submit("tests.five_steps")

    wait_for(lambda: stack.records_of(task.id), timeout=30, what="step 4", logs=stack.processes)
    pid = int(stack.records_of(task.id)[0].rsplit(" ", 1)[1])
    the_worker_running(stack, pid, workers).kill()

    done = stack.wait_status(task.id, *TERMINAL, timeout=60)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert (done.attempt, done.result) == (2, [10, 20, 30, 40, 50])
    assert side_effects(stack, task.id) == {"s1": 1, "s2": 1, "s3": 1, "s4": 2, "s5": 1}
    steps = stack.queue.store.steps(task.id)
    assert [(s.name, s.status, s.attempt) for s in steps] == [
        ("s1", StepStatus.COMPLETED, 1),
        ("s2", StepStatus.COMPLETED, 1),
        ("s3", StepStatus.COMPLETED, 1),
        ("s4", StepStatus.COMPLETED, 2),
        ("s5", StepStatus.COMPLETED, 2),
    ]


@pytest.mark.postgres
@pytest.mark.redis
def test_a_long_durable_sleep_holds_no_worker_slot_and_wakes_on_time(
    deployment: DeploymentFactory,
) -> None:
    stack = deployment("redis", "postgres")
    stack.start_worker(pool="solo", concurrency=1, beat=True)
    task = stack.queue.submit("tests.nap", {"seconds": 60})

    asleep = wait_for(
        lambda: (t := stack.queue.store.get(task.id)).run_at is not None and t,
        timeout=30,
        what="the job to go to sleep",
        logs=stack.processes,
    )
    assert (asleep.status, asleep.worker_id) == (TaskStatus.WORKING, None)
    others = [stack.queue.submit("tests.count_runs") for _ in range(5)]
    for other in others:  # the only slot is free
        assert stack.wait_status(other.id, *TERMINAL, timeout=10).status is TaskStatus.COMPLETED

    done = stack.wait_status(task.id, *TERMINAL, timeout=90)

    assert done.status is TaskStatus.COMPLETED, done.error
    assert asleep.run_at is not None
    woke_at = datetime.fromisoformat(done.result["woke_at"])  # type: ignore[index]
    assert asleep.run_at <= woke_at <= asleep.run_at + timedelta(seconds=2)  # a sweep, a claim
    assert stack.events_of(task.id) == ["1 before"]


@pytest.mark.postgres
@pytest.mark.redis
def test_a_parent_fanning_out_to_100_children_holds_no_slot_while_they_run(
    deployment: DeploymentFactory,
) -> None:
    stack = deployment("redis", "postgres")
    stack.start_worker(concurrency=1, beat=True)  # one slot: a parent holding it would hang
    parent = stack.queue.submit("tests.fan_out", {"n": 100})

    done = stack.wait_status(parent.id, *TERMINAL, timeout=120)

    assert done.status is TaskStatus.COMPLETED, done.error
    assert done.result == sum(i * i for i in range(100))
    assert stack.events_of(parent.id) == ["1 start", "2 start"]
    children = list(stack.queue.store.iterate(parent_id=parent.id, limit=1000))
    assert len(children) == 100
    assert {child.status for child in children} == {TaskStatus.COMPLETED}
    assert all(stack.events_of(child.id) == ["1 run"] for child in children)


@pytest.mark.postgres
@pytest.mark.redis
def test_cancelling_a_parent_cancels_every_live_child(deployment: DeploymentFactory) -> None:
    stack = deployment("redis", "postgres")
    stack.start_worker(concurrency=4, beat=True)
    parent = stack.queue.submit("tests.fan_out", {"n": 20, "job": "tests.sleep", "seconds": 120})
    store = stack.queue.store

    wait_for(
        lambda: store.count(parent_id=parent.id, status="working") >= 4,
        timeout=30,
        what="four children running",
        logs=stack.processes,
    )
    running = [t.id for t in store.iterate(parent_id=parent.id, status="working")]
    stack.queue.cancel(parent.id)

    wait_for(
        lambda: store.count(parent_id=parent.id, status=LIVE) == 0,
        timeout=10,
        what="every child cancelled",
        logs=stack.processes,
    )
    assert store.get(parent.id).status is TaskStatus.CANCELLED
    children = list(store.iterate(parent_id=parent.id))
    assert len(children) == 20
    assert {child.status for child in children} == {TaskStatus.CANCELLED}
    for child_id in running:
        wait_for(
            lambda child_id=child_id: any(
                "stopped:" in event for event in stack.events_of(child_id)
            ),
            timeout=10,
            what=f"child {child_id} to stop",
            logs=stack.processes,
        )


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.parametrize("pool", ["solo", "threads", "prefork"])
def test_a_run_timeout_stops_a_cpu_bound_job_in_every_pool(
    deployment: DeploymentFactory, pool: str
) -> None:
    overrides = {"QUEUESTORE_TIMEOUT_GRACE": "2"}
    if pool != "prefork":
        overrides["QUEUESTORE_TERMINATE_ON_CANCEL"] = "false"
    stack = deployment("redis", "postgres", **overrides)
    worker = stack.start_worker(pool=pool, concurrency=1, beat=True)
    task = stack.queue.submit("tests.spin", timeout=timedelta(seconds=2))

    done = stack.wait_status(task.id, *TERMINAL, timeout=30)

    assert done.status is TaskStatus.FAILED
    assert done.error is not None
    assert done.error.type == "RunTimedOut"
    assert done.started_at is not None
    assert done.finished_at is not None
    assert done.finished_at - done.started_at <= timedelta(seconds=2 + 2 + 1 + 1)
    wait_for(
        lambda: "1 stopped:RunTimedOut" in stack.events_of(task.id),
        timeout=10,
        what="the job to be interrupted",
        logs=[worker],
    )
    after = stack.queue.submit("tests.count_runs")  # the only slot is free again
    assert stack.wait_status(after.id, *TERMINAL, timeout=20).status is TaskStatus.COMPLETED
    assert worker.alive()


@pytest.mark.postgres
@pytest.mark.redis
def test_a_job_that_swallows_its_interrupt_is_killed_after_the_grace_on_prefork(
    deployment: DeploymentFactory,
) -> None:
    stack = deployment("redis", "postgres", QUEUESTORE_TIMEOUT_GRACE="2")
    worker = stack.start_worker(pool="prefork", concurrency=1, beat=True)
    task = stack.queue.submit("tests.spin", {"stubborn": True}, timeout=timedelta(seconds=2))

    done = stack.wait_status(task.id, *TERMINAL, timeout=30)

    assert done.status is TaskStatus.FAILED
    assert done.finished_at is not None
    assert done.started_at is not None
    assert done.finished_at - done.started_at <= timedelta(seconds=4)
    stack.wait_log(worker, "killing pool process")
    after = stack.queue.submit("tests.count_runs")
    assert stack.wait_status(after.id, *TERMINAL, timeout=30).status is TaskStatus.COMPLETED
    wait_for(  # its slot freed by the reaper, the grace after its deadline
        lambda: stack.queue.store.get(task.id).worker_id is None,
        timeout=10,
        what="the slot to be freed",
        logs=stack.processes,
    )


@pytest.mark.postgres
@pytest.mark.redis
def test_a_start_by_passed_while_queued_means_the_job_never_runs(
    deployment: DeploymentFactory,
) -> None:
    stack = deployment("redis", "postgres")
    task = stack.queue.submit("tests.count_runs", start_by=datetime.now(UTC) + timedelta(seconds=2))
    time.sleep(3)
    stack.start_worker(concurrency=1, beat=True)

    done = stack.wait_status(task.id, *TERMINAL, timeout=20)

    assert done.status is TaskStatus.FAILED
    assert done.error is not None
    assert done.error.type == "DeadlineExpired"
    assert done.started_at is None
    assert stack.records_of(task.id) == []


@pytest.mark.parametrize(
    ("broker", "database"),
    [
        ("filesystem", "sqlite"),
        pytest.param("redis", "postgres", marks=[pytest.mark.redis, pytest.mark.postgres]),
    ],
)
def test_a_task_submitted_in_the_callers_transaction_runs_only_if_it_commits(
    deployment: DeploymentFactory, broker: str, database: str
) -> None:
    stack = deployment(broker, database)
    stack.start_worker(concurrency=1, beat=True)
    caller = create_engine(stack.database_url)
    with caller.begin() as connection:
        connection.execute(text("CREATE TABLE it_orders (id VARCHAR(20) PRIMARY KEY)"))

    rolled_back = []

    def order_then_fail() -> None:
        with Session(caller) as session, session.begin():
            session.execute(text("INSERT INTO it_orders VALUES ('lost')"))
            rolled_back.append(stack.queue.submit("tests.count_runs", connection=session))
            raise RuntimeError("the order is refused")

    with pytest.raises(RuntimeError):
        order_then_fail()
    with Session(caller) as session, session.begin():
        session.execute(text("INSERT INTO it_orders VALUES ('kept')"))
        kept = stack.queue.submit("tests.count_runs", connection=session)
    with caller.begin() as connection:
        committed = stack.queue.submit("tests.count_runs", connection=connection)

    for task in (kept, committed):
        assert stack.wait_status(task.id, *TERMINAL).status is TaskStatus.COMPLETED
        assert stack.events_of(task.id) == ["1 run"]
    time.sleep(3)  # past the publish grace and two sweeps
    with pytest.raises(TaskNotFound):
        stack.queue.store.get(rolled_back[0].id)
    assert "published" not in stack.messages_of(rolled_back[0].id)
    with caller.connect() as connection:
        assert [row[0] for row in connection.execute(text("SELECT id FROM it_orders"))] == ["kept"]
    caller.dispose()
