"""A job's retry policy in a run: which errors run it again, the wait, and the last failure."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from celery import Celery

from queuestore import InMemoryTaskStore, Retry, TaskContext, TaskQueue, TaskStatus
from queuestore.metrics.prometheus import JOB_RETRIES, instrument
from queuestore.run.jobs import execute, job
from tests.celery_support import Published


class UpstreamDown(Exception):
    pass


QUICK = Retry(on=(UpstreamDown,), max_runs=3, backoff=timedelta(milliseconds=100), jitter=False)


def failing(calls: list[int], error: Exception) -> object:
    def call(ctx: TaskContext) -> None:
        calls.append(1)
        raise error

    return call


def test_a_retried_error_waits_for_its_next_run_then_the_last_one_fails_the_task(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    calls: list[int] = []
    registered = job(app, name="test.job", retry=QUICK)(failing(calls, UpstreamDown("503")))
    task = queue.submit("test.job")

    first = execute(queue.publisher, registered, task.id)

    assert first is not None
    assert first.status is TaskStatus.WORKING
    assert first.worker_id is None
    assert [(e.type.rsplit(".", 1)[-1], e.message, e.attempt) for e in first.errors] == [
        ("UpstreamDown", "503", 1)
    ]
    assert first.run_at is not None
    assert first.run_at > first.updated_at - timedelta(seconds=1)
    countdown = published.messages[-1]["countdown"]
    assert countdown is not None
    assert 0 < countdown <= 0.1

    assert execute(queue.publisher, registered, task.id) is None  # before its backoff: put back
    assert len(calls) == 1
    time.sleep(0.1)
    second = execute(queue.publisher, registered, task.id)
    assert second is not None
    assert [e.attempt for e in second.errors] == [1, 2]
    assert 0.1 < published.messages[-1]["countdown"] <= 0.2  # doubled

    time.sleep(0.2)
    last = execute(queue.publisher, registered, task.id)

    assert last is not None
    assert last.status is TaskStatus.FAILED
    assert last.error is not None
    assert last.error.type.endswith("UpstreamDown")
    assert len(last.errors) == 2  # the retried runs; the last error is last.error
    assert (last.attempt, len(calls), len(published.messages)) == (3, 3, 4)  # one put back


def test_an_error_the_policy_does_not_name_fails_at_once(app: Celery, queue: TaskQueue) -> None:
    calls: list[int] = []
    registered = job(app, name="test.job", retry=QUICK)(failing(calls, ValueError("bad")))

    failed = execute(queue.publisher, registered, queue.submit("test.job").id)

    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert failed.errors == []


def test_a_long_wait_is_left_to_the_sweep_which_publishes_it_near_its_start(
    app: Celery, published: Published
) -> None:
    queue = TaskQueue(
        InMemoryTaskStore(),
        app,
        lease=timedelta(seconds=5),
        schedule_ahead=timedelta(milliseconds=200),
    )
    slow = Retry(on=(UpstreamDown,), backoff=timedelta(milliseconds=400), jitter=False)
    registered = job(app, name="test.job", retry=slow)(failing([], UpstreamDown()))
    task = queue.submit("test.job")

    execute(queue.publisher, registered, task.id)

    assert len(published.messages) == 1  # the submit's only
    time.sleep(0.3)
    assert queue.sweep() == 1
    countdown = published.messages[-1]["countdown"]
    assert countdown is not None
    assert 0 < countdown <= 0.2


def test_a_task_cancelled_while_it_waits_never_runs_again(app: Celery, queue: TaskQueue) -> None:
    calls: list[int] = []
    registered = job(app, name="test.job", retry=QUICK)(failing(calls, UpstreamDown()))
    task = queue.submit("test.job")
    execute(queue.publisher, registered, task.id)

    queue.cancel(task.id)

    assert execute(queue.publisher, registered, task.id) is None  # its message finds it cancelled
    assert len(calls) == 1
    assert queue.store.get(task.id).status is TaskStatus.CANCELLED


def test_the_policy_checks_its_arguments() -> None:
    with pytest.raises(TypeError):
        Retry(on=("UpstreamDown",))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Retry(on=())
    with pytest.raises(ValueError, match="max_runs"):
        Retry(on=(UpstreamDown,), max_runs=0)
    with pytest.raises(ValueError, match="backoff"):
        Retry(on=(UpstreamDown,), backoff=timedelta(hours=1), max_backoff=timedelta(minutes=1))
    with pytest.raises(ValueError, match="factor"):
        Retry(on=(UpstreamDown,), factor=0.5)
    assert Retry(on=UpstreamDown).on == (UpstreamDown,)  # type: ignore[arg-type]


def test_job_refuses_a_policy_of_another_kind(app: Celery) -> None:
    with pytest.raises(TypeError, match="Retry"):
        job(app, name="test.job", retry={"max_runs": 3})(lambda ctx: None)  # type: ignore[arg-type]


def test_waits_grow_by_the_factor_up_to_the_cap_and_jitter_keeps_the_upper_half() -> None:
    policy = Retry(
        on=(UpstreamDown,),
        max_runs=100,
        backoff=timedelta(seconds=1),
        max_backoff=timedelta(seconds=10),
        jitter=False,
    )
    assert [policy.wait(n).total_seconds() for n in (1, 2, 3, 4, 5, 99)] == [1, 2, 4, 8, 10, 10]
    jittered = Retry(on=(UpstreamDown,), backoff=timedelta(seconds=8))
    waits = [jittered.wait(1).total_seconds() for _ in range(200)]
    assert all(4 <= wait <= 8 for wait in waits)
    assert len(set(waits)) > 100
    huge = Retry(on=(UpstreamDown,), factor=1e300, max_backoff=timedelta(hours=1), jitter=False)
    assert huge.wait(10) == timedelta(hours=1)  # no overflow


def test_a_retry_counts_in_the_metrics_by_job(app: Celery, queue: TaskQueue) -> None:
    instrument(queue.store)
    before = JOB_RETRIES.labels("test.job")._value.get()
    registered = job(app, name="test.job", retry=QUICK)(failing([], UpstreamDown()))

    execute(queue.publisher, registered, queue.submit("test.job").id)

    assert JOB_RETRIES.labels("test.job")._value.get() == before + 1
