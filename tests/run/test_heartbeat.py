"""The heartbeat of a running job: it renews the lease and brings the news of a cancel."""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime

from celery import Celery

from queuestore import TaskContext, TaskQueue, TaskStatus
from queuestore.run.heartbeat import Heartbeat
from queuestore.run.jobs import execute
from tests.celery_support import eventually, register


def test_the_heartbeat_tells_a_running_job_about_a_cancel(app: Celery, queue: TaskQueue) -> None:
    started = threading.Event()

    def call(ctx: TaskContext) -> str:
        started.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ctx.raise_if_cancelled()
            time.sleep(0.01)
        return "the cancel never arrived"

    task = queue.submit("test.job")
    runner = threading.Thread(target=execute, args=(queue, register(app, call), task.id))
    runner.start()
    assert started.wait(5)
    queue.cancel(task.id)
    runner.join(15)
    assert not runner.is_alive()
    assert queue.store.get(task.id).status is TaskStatus.CANCELLED


def test_the_heartbeat_keeps_the_lease_of_a_long_job_alive(app: Celery, queue: TaskQueue) -> None:
    seen: list[datetime | None] = []

    def call(ctx: TaskContext) -> None:
        seen.append(queue.store.get(ctx.task_id).lease_expires_at)
        seen.append(eventually(lambda: renewed(queue.store.get(ctx.task_id).lease_expires_at)))

    def renewed(lease: datetime | None) -> datetime | None:
        return lease if lease is not None and seen[0] is not None and lease > seen[0] else None

    task = queue.submit("test.job")
    done = execute(queue.publisher, register(app, call), task.id)
    assert done is not None
    assert done.status is TaskStatus.COMPLETED, done.error
    first, later = seen
    assert first is not None
    assert later is not None
    assert later > first


def test_the_heartbeat_writes_the_workers_row_with_what_it_runs(
    app: Celery, queue: TaskQueue
) -> None:
    seen: list[list[str]] = []

    def call(ctx: TaskContext) -> None:
        seen.append(eventually(lambda: [w.running for w in queue.store.workers() if w.running]))

    task = queue.submit("test.job")
    execute(queue.publisher, register(app, call), task.id)
    heartbeat = Heartbeat.of(queue.publisher)
    (worker,) = queue.store.workers()

    assert seen == [[[task.id]]]
    assert worker.id == heartbeat.worker_id
    assert (worker.pid, worker.host) == (os.getpid(), heartbeat.host)
    assert eventually(lambda: not queue.store.workers()[0].running)  # idle, still beating
    heartbeat.retire()
    assert queue.store.workers() == []
