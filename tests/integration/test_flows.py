"""The task lifecycle through real ``celery worker`` processes, on every broker.

One worker (with embedded beat) serves each deployment for the whole module:
Redis and RabbitMQ with PostgreSQL on the prefork pool (a cancel interrupts
the job at once), the embedded filesystem broker with SQLite on the solo pool
(the job sees a cancel at its next heartbeat).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest

from queuestore import TERMINAL, InvalidTransition, Task, TaskQueue, TaskStatus
from tests.integration.harness import (
    Deployment,
    LoggedProcess,
    build_deployment,
    wait_for,
)

pytestmark = pytest.mark.integration


@dataclass
class Stack:
    """A deployment and the one worker that serves it."""

    name: str
    deployment: Deployment
    worker: LoggedProcess
    concurrency: int

    @property
    def queue(self) -> TaskQueue:
        return self.deployment.queue


STACKS = [
    pytest.param(
        ("redis", "postgres", "prefork", 2),
        id="redis-postgres",
        marks=[pytest.mark.redis, pytest.mark.postgres],
    ),
    pytest.param(
        ("rabbitmq", "postgres", "prefork", 2),
        id="rabbitmq-postgres",
        marks=[pytest.mark.rabbitmq, pytest.mark.postgres],
    ),
    pytest.param(("filesystem", "sqlite", "solo", 1), id="filesystem-sqlite"),
]


@pytest.fixture(scope="module", params=STACKS)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    broker, database, pool, concurrency = request.param
    root = tmp_path_factory.mktemp(f"{broker}-{database}")
    overrides = {} if pool == "prefork" else {"QUEUESTORE_TERMINATE_ON_CANCEL": "false"}
    deployment = build_deployment(request, root, broker, database, **overrides)
    try:
        worker = deployment.start_worker(pool=pool, concurrency=concurrency, beat=True)
        yield Stack(f"{broker}-{database}", deployment, worker, concurrency)
    finally:
        deployment.close()


def test_submit_runs_the_job_to_completed_with_result_and_streamed_artifacts(
    stack: Stack,
) -> None:
    queue = stack.queue
    task = queue.submit("examples.research", {"topic": "otters", "sections": 3, "pause": 0.05})
    assert task.status is TaskStatus.SUBMITTED

    done = stack.deployment.wait_status(task.id, *TERMINAL)

    assert done.status is TaskStatus.COMPLETED, done.error
    assert done.result == {"topic": "otters", "sections": 3}
    assert done.progress == 1.0
    assert done.status_message is None  # the end's message, not the last section's
    assert [artifact.artifact_id for artifact in done.artifacts] == ["report"]
    assert done.artifacts[0].parts == [
        "Section 1 on otters.",
        "Section 2 on otters.",
        "Section 3 on otters.",
    ]
    assert done.attempt == 1
    assert done.started_at is not None
    assert done.finished_at is not None
    assert done.created_at <= done.started_at <= done.finished_at


def test_streamed_chunks_are_visible_while_the_job_still_runs(stack: Stack) -> None:
    # Reports are batched: the worker's heartbeat thread writes them every
    # report_interval, so a reader sees the stream grow before the outcome.
    queue = stack.queue
    task = queue.submit("examples.research", {"topic": "eels", "sections": 8, "pause": 0.4})

    def midway() -> Task | None:
        seen = queue.store.get(task.id)
        running = seen.status is TaskStatus.WORKING
        parts = len(seen.artifacts[0].parts) if seen.artifacts else 0
        return seen if running and 2 <= parts < 8 else None

    partial = wait_for(
        midway,
        timeout=30,
        what="chunks written while the job runs",
        logs=stack.deployment.processes,
    )

    assert partial.artifacts[0].parts[:2] == ["Section 1 on eels.", "Section 2 on eels."]
    assert partial.progress is not None
    assert 0 < partial.progress < 1
    done = stack.deployment.wait_status(task.id, *TERMINAL)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert len(done.artifacts[0].parts) == 8


def test_an_exception_in_the_job_fails_the_task_with_its_error(stack: Stack) -> None:
    task = stack.queue.submit("examples.flaky", {"message": "billing answered 503"})

    done = stack.deployment.wait_status(task.id, *TERMINAL)

    assert done.status is TaskStatus.FAILED
    assert done.error is not None
    assert done.error.type == "ConnectionError"
    assert done.error.message == "billing answered 503"
    assert done.progress == 0.1
    assert done.result is None


def test_a_task_whose_job_no_worker_knows_fails_with_unknown_job(stack: Stack) -> None:
    task = stack.queue.submit("examples.no_such_job")

    done = stack.deployment.wait_status(task.id, *TERMINAL)

    assert done.status is TaskStatus.FAILED
    assert done.error is not None
    assert done.error.type == "UnknownJob"
    assert "examples.no_such_job" in done.error.message


def test_cancel_while_working_stops_the_job_and_the_task_stays_cancelled(stack: Stack) -> None:
    deployment = stack.deployment
    job_seconds = 4.0
    task = stack.queue.submit("tests.sleep", {"seconds": job_seconds})
    wait_for(
        lambda: deployment.events_of(task.id) == ["1 start"],
        timeout=30,
        what="the job to start",
        logs=deployment.processes,
    )

    cancelled = stack.queue.cancel(task.id, reason="user pressed stop")

    assert cancelled.status is TaskStatus.CANCELLED
    wait_for(
        lambda: len(deployment.events_of(task.id)) == 2,
        timeout=15,
        what="the job to stop",
        logs=deployment.processes,
    )
    # Prefork: revoke(terminate) interrupts the job; solo: the heartbeat tells it.
    assert deployment.events_of(task.id)[1] in {
        "1 stopped:SoftTimeLimitExceeded",
        "1 stopped:JobCancelled",
    }
    # Once the worker is done with the message (acknowledged: no redelivery), the
    # outcome was written or dropped: nothing changes the task any more.
    deployment.wait_log(stack.worker, f"tests.sleep[{task.id}]", "succeeded", timeout=30)
    final = stack.queue.store.get(task.id)
    assert final.status is TaskStatus.CANCELLED
    assert final.status_message == "user pressed stop"
    assert final.result is None
    assert len(deployment.events_of(task.id)) == 2
    with pytest.raises(InvalidTransition):
        stack.queue.cancel(task.id)


def test_cancel_while_submitted_means_the_body_never_runs(stack: Stack) -> None:
    deployment = stack.deployment
    queue = stack.queue
    # Occupy every worker slot, so the next message waits in the broker.
    blockers = [queue.submit("tests.sleep", {"seconds": 60}) for _ in range(stack.concurrency)]
    for blocker in blockers:
        wait_for(
            lambda blocker=blocker: deployment.events_of(blocker.id) == ["1 start"],
            timeout=30,
            what="the blocking jobs to start",
            logs=deployment.processes,
        )

    task = queue.submit("tests.count_runs")
    cancelled = queue.cancel(task.id)
    for blocker in blockers:
        queue.cancel(blocker.id)

    assert cancelled.status is TaskStatus.CANCELLED
    # The worker gets to the message: dropped as revoked, or as not claimable.
    wait_for(
        lambda: _dropped(stack.worker, task.id),
        timeout=30,
        what=f"the worker to drop the message of {task.id}",
        logs=deployment.processes,
    )
    assert deployment.records_of(task.id) == []
    final = queue.store.get(task.id)
    assert final.status is TaskStatus.CANCELLED
    assert final.started_at is None
    assert final.attempt == 0
    # Celery >= 5.6 tries to record each revoke in the (disabled) result backend.
    assert "as revoked in backend" not in stack.worker.text()


def _dropped(worker: LoggedProcess, task_id: str) -> bool:
    """Whether the worker discarded the task's message: revoked, or not claimable."""
    return any(
        task_id in line and ("Discarding revoked" in line or "is not claimable" in line)
        for line in worker.text().splitlines()
    )


def test_input_required_then_resume_completes_with_the_answer(stack: Stack) -> None:
    queue = stack.queue
    task = queue.submit("examples.deploy", {"service": "billing-api", "pause": 0.05})

    waiting = stack.deployment.wait_status(task.id, TaskStatus.INPUT_REQUIRED, *TERMINAL)

    assert waiting.status is TaskStatus.INPUT_REQUIRED
    assert waiting.status_message == "Deploy billing-api to production? (yes/no)"
    assert waiting.progress == 0.3
    assert waiting.worker_id is None  # no worker holds it while it waits

    resumed = queue.resume(task.id, "yes")

    assert resumed.status is TaskStatus.WORKING
    done = stack.deployment.wait_status(task.id, *TERMINAL)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert done.result == {"service": "billing-api", "deployed": True}
    assert done.answers == ["yes"]
    with pytest.raises(InvalidTransition):
        queue.resume(task.id, "again")


def test_duplicate_messages_for_one_task_run_its_body_once(stack: Stack) -> None:
    queue = stack.queue
    task = queue.submit("tests.count_runs")
    queue.publish(task)
    queue.publish(task)

    done = stack.deployment.wait_status(task.id, *TERMINAL)

    def handled() -> tuple[int, int]:
        """(runs, messages dropped as duplicates) the worker's log tells of."""
        text = stack.worker.text()
        return (
            text.count(f"tests.count_runs[{task.id}] succeeded"),
            text.count(f"task {task.id} is not claimable"),
        )

    wait_for(
        lambda: handled() == (1, 2),
        timeout=30,
        what="the worker to take all three messages",
        logs=[stack.worker],
    )
    # And one more, long after it completed: a late redelivery.
    queue.publish(done)
    wait_for(
        lambda: handled() == (1, 3),
        timeout=30,
        what="the worker to take the late duplicate",
        logs=[stack.worker],
    )

    assert done.status is TaskStatus.COMPLETED
    assert stack.deployment.events_of(task.id) == ["1 run"]
    assert queue.store.get(task.id).version == done.version


def test_beat_janitor_removes_only_expired_terminal_tasks(stack: Stack) -> None:
    store = stack.queue.store
    short, long = timedelta(seconds=1), timedelta(hours=1)
    lease = timedelta(hours=1)  # held by a worker that is alive as far as the reaper knows

    def finished(status: TaskStatus, ttl: timedelta | None) -> str:
        task = store.create("tests.count_runs", ttl=ttl)
        store.claim(task.id, "janitor-test", lease)
        error = {"type": "Boom", "message": "boom"} if status is TaskStatus.FAILED else None
        store.update(task.id, status=status, error=error, worker_id="janitor-test")
        return task.id

    expired = [
        finished(TaskStatus.COMPLETED, short),
        finished(TaskStatus.FAILED, short),
        store.cancel(store.create("tests.count_runs", ttl=short).id).id,
    ]
    kept_terminal = [finished(TaskStatus.COMPLETED, long), finished(TaskStatus.COMPLETED, None)]
    working = store.create("tests.count_runs", ttl=short)
    store.claim(working.id, "janitor-test", lease)
    asking = store.create("tests.count_runs", ttl=short)
    store.claim(asking.id, "janitor-test", lease)
    store.update(asking.id, status=TaskStatus.INPUT_REQUIRED, worker_id="janitor-test")
    live = [working.id, asking.id]

    def gone() -> bool:
        remaining = {task.id for task in store.iterate(name="tests.count_runs", limit=1000)}
        return not remaining & set(expired)

    wait_for(gone, timeout=30, what="the janitor to remove expired tasks", logs=[stack.worker])

    # The janitor logs after its delete commits (and after it folds the rollup).
    wait_for(
        lambda: "janitor removed" in stack.worker.text(),
        timeout=10,
        what="the janitor's line",
        logs=[stack.worker],
    )
    for task_id in kept_terminal:
        assert store.get(task_id).status is TaskStatus.COMPLETED
    assert store.get(working.id).status is TaskStatus.WORKING
    assert store.get(asking.id).status is TaskStatus.INPUT_REQUIRED
    # The janitor keeps running: two more rounds later, the live ones are still there.
    for status in (TaskStatus.COMPLETED, TaskStatus.FAILED):
        expired.append(finished(status, short))
        wait_for(gone, timeout=30, what="another janitor round", logs=[stack.worker])
    assert {store.get(task_id).status for task_id in live} == {
        TaskStatus.WORKING,
        TaskStatus.INPUT_REQUIRED,
    }
    for task_id in live:
        store.cancel(task_id)


def test_500_submits_all_complete_and_each_body_runs_exactly_once(stack: Stack) -> None:
    queue = stack.queue
    ids = [queue.submit("tests.count_runs").id for _ in range(500)]
    pending = set(ids)

    def all_done() -> bool:
        pending.difference_update(
            [task_id for task_id in list(pending) if queue.store.get(task_id).is_terminal]
        )
        return not pending

    wait_for(all_done, timeout=180, what="500 tasks to finish", logs=[stack.worker], interval=0.5)

    assert {queue.store.get(task_id).status for task_id in ids} == {TaskStatus.COMPLETED}
    runs = {task_id: stack.deployment.events_of(task_id) for task_id in ids}
    assert {task_id: events for task_id, events in runs.items() if events != ["1 run"]} == {}


def test_jobs_cancelled_in_the_middle_of_their_writes_leave_the_worker_healthy(
    stack: Stack,
) -> None:
    """A prefork cancel interrupts the job wherever it is, even inside a database write."""
    deployment, queue = stack.deployment, stack.queue
    for _ in range(3):
        writers = [queue.submit("tests.chatty") for _ in range(stack.concurrency)]
        for writer in writers:
            wait_for(
                lambda writer=writer: (queue.store.get(writer.id).progress or 0) > 0,
                timeout=30,
                what="the writer to write",
                logs=[stack.worker],
            )
        for writer in writers:
            queue.cancel(writer.id)
        for writer in writers:
            wait_for(
                lambda writer=writer: len(deployment.events_of(writer.id)) == 2,
                timeout=30,
                what="the writer to stop",
                logs=[stack.worker],
            )
            assert queue.store.get(writer.id).status is TaskStatus.CANCELLED

    after = [queue.submit("tests.count_runs") for _ in range(10)]
    for task in after:
        assert deployment.wait_status(task.id, *TERMINAL).status is TaskStatus.COMPLETED
