"""Run timeouts in process: the store fails the run on time and the job's thread is stopped."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from celery import Celery

from queuestore import TaskContext, TaskQueue, TaskStatus
from queuestore.run.interrupts import interrupts
from queuestore.run.jobs import execute, job
from queuestore.run.lease import RunTimedOut
from tests.celery_support import reconfigure


def test_a_cpu_bound_job_is_stopped_at_its_timeout(app: Celery, queue: TaskQueue) -> None:
    seen: list[str] = []

    @job(app, name="test.spin", timeout=timedelta(milliseconds=300))
    def spin(ctx: TaskContext) -> None:
        n = 0
        try:
            while True:  # never reports: only an interrupt stops it
                n += 1
        except BaseException as exc:
            seen.append(type(exc).__name__)
            raise

    task = queue.submit("test.spin")
    started = time.monotonic()
    left = execute(queue.publisher, spin, task.id)
    took = time.monotonic() - started

    assert 0.25 < took < 2.0
    assert seen == ["RunTimedOut"]
    assert left is not None
    assert (left.status, left.worker_id) == (TaskStatus.FAILED, None)  # its slot freed
    assert left.error is not None
    assert left.error.type == "RunTimedOut"
    assert queue.store.running_counts() == {}


def test_a_submits_timeout_wins_over_the_jobs(app: Celery, queue: TaskQueue) -> None:
    @job(app, name="test.naps", timeout=timedelta(minutes=1))
    def naps(ctx: TaskContext) -> str:
        for _ in range(100):
            time.sleep(0.01)
            ctx.raise_if_cancelled()
        return "slept"

    task = queue.submit("test.naps", timeout=timedelta(milliseconds=200))
    left = execute(queue.publisher, naps, task.id)

    assert left is not None
    assert left.status is TaskStatus.FAILED
    assert left.run_timeout == timedelta(milliseconds=200)


def test_without_interrupts_the_job_stops_at_its_next_report(app: Celery, queue: TaskQueue) -> None:
    reconfigure(queue, timeout_interrupt=False)
    raised: list[type[BaseException]] = []

    @job(app, name="test.reports", timeout=timedelta(milliseconds=100))
    def reports(ctx: TaskContext) -> None:
        deadline = time.monotonic() + 0.4
        while time.monotonic() < deadline:
            pass
        try:
            ctx.progress(0.5)
        except BaseException as exc:
            raised.append(type(exc))
            raise

    left = execute(queue.publisher, reports, queue.submit("test.reports").id)

    assert raised == [RunTimedOut]
    assert left is not None
    assert left.status is TaskStatus.FAILED


def test_a_job_that_returns_as_its_deadline_fires_never_leaks_the_interrupt(
    app: Celery, queue: TaskQueue
) -> None:
    @job(app, name="test.close_call", timeout=timedelta(milliseconds=20))
    def close_call(ctx: TaskContext) -> str:
        deadline = time.monotonic() + 0.02
        while time.monotonic() < deadline:
            pass
        return "done"

    outcomes = set()
    for _ in range(100):
        left = execute(queue.publisher, close_call, queue.submit("test.close_call").id)
        assert left is not None
        outcomes.add(left.status)
    time.sleep(0.05)  # an interrupt posted late would land here, in the test

    assert outcomes <= {TaskStatus.COMPLETED, TaskStatus.FAILED}
    assert queue.store.running_counts() == {}


def test_an_interrupt_waits_for_the_store_call_to_return() -> None:
    inside, release, done = threading.Event(), threading.Event(), threading.Event()
    raised: list[str] = []

    def job_thread() -> None:
        try:
            with interrupts.running(lambda: False, "run"):
                with interrupts.deferred():
                    inside.set()
                    release.wait(5)  # a store call: the interrupt must not land here
                    raised.append("store call returned")
                while True:
                    time.sleep(0.001)
        except RunTimedOut:
            raised.append("interrupted")
        finally:
            done.set()

    thread = threading.Thread(target=job_thread)
    thread.start()
    assert inside.wait(5)

    assert not interrupts.interrupt(thread.ident or 0, RunTimedOut, "another run")
    assert interrupts.interrupt(thread.ident or 0, RunTimedOut, "run")
    time.sleep(0.05)
    assert raised == []
    release.set()
    assert done.wait(5)
    thread.join()

    assert raised == ["store call returned", "interrupted"]
    assert not interrupts.interrupt(thread.ident or 0, RunTimedOut, "run")  # its job is over


@pytest.fixture(autouse=True)
def _quick_grace(queue: TaskQueue) -> None:
    reconfigure(queue, timeout_grace=timedelta(seconds=1))
