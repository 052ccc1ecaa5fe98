"""Durable sleep: the run ends holding nothing, and the job runs again at the wake time."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from celery import Celery

from queuestore import InvalidTaskData, StepKind, TaskContext, TaskQueue, TaskStatus
from queuestore.run.jobs import execute, job
from tests.celery_support import Published


def test_a_sleep_ends_the_run_and_the_next_run_passes_it(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    calls: Counter[str] = Counter()
    starts: list[datetime] = []

    @job(app, name="test.nap")
    def nap(ctx: TaskContext) -> str:
        starts.append(ctx.run_started_at)
        calls["before"] += 1
        ctx.step("before", lambda: "fetched")
        ctx.sleep("cool-down", timedelta(milliseconds=300))
        calls["after"] += 1
        return "woke"

    task = queue.submit("test.nap")
    asleep = execute(queue.publisher, nap, task.id)

    assert asleep is not None
    assert (asleep.status, asleep.worker_id, asleep.suspends) == (TaskStatus.WORKING, None, 1)
    assert asleep.run_at is not None
    assert asleep.status_message == f"sleeping until {asleep.run_at:%Y-%m-%dT%H:%M:%SZ} (cool-down)"
    assert 0 < published.messages[-1]["countdown"] <= 0.3  # within schedule_ahead: published
    steps = {step.name: step for step in queue.store.steps(task.id)}
    assert steps["cool-down"].kind is StepKind.SLEEP
    assert steps["cool-down"].result == {"until": asleep.run_at.isoformat()}
    assert execute(queue.publisher, nap, task.id) is None  # too early: the claim refuses it
    time.sleep(0.3)

    done = execute(queue.publisher, nap, task.id)

    assert done is not None
    assert (done.status, done.result) == (TaskStatus.COMPLETED, "woke")
    assert calls == {"before": 2, "after": 1}
    assert starts[-1] >= asleep.run_at  # the store's clock: never before its wake time


def test_a_long_sleep_is_left_to_the_sweep(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    @job(app, name="test.long_nap")
    def long_nap(ctx: TaskContext) -> None:
        ctx.sleep("night", 3600)

    task = queue.submit("test.long_nap")
    sent = len(published.messages)
    asleep = execute(queue.publisher, long_nap, task.id)

    assert asleep is not None
    assert len(published.messages) == sent  # no message waits an hour in the broker
    assert asleep.run_at is not None
    assert timedelta(minutes=59) < asleep.run_at - datetime.now(UTC) <= timedelta(hours=1)
    assert queue.store.unpublished(timedelta(0), ahead=queue.options.schedule_ahead) == []


def test_sleep_until_wakes_at_the_time_given(app: Celery, queue: TaskQueue) -> None:
    when = datetime.now(UTC) + timedelta(days=1)

    @job(app, name="test.until")
    def until(ctx: TaskContext) -> None:
        ctx.sleep_until("tomorrow", when)

    task = queue.submit("test.until")
    asleep = execute(queue.publisher, until, task.id)

    assert asleep is not None
    assert asleep.run_at == when


def test_a_run_that_comes_before_the_wake_time_sleeps_again(
    app: Celery, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    @job(app, name="test.lost_park")
    def lost_park(ctx: TaskContext) -> str:
        ctx.sleep("nap", 3600)
        return "woke"

    task = queue.submit("test.lost_park")
    with monkeypatch.context() as patched:  # the worker dies between the record and the park
        patched.setattr(queue.store, "suspend", _dies)
        with pytest.raises(SystemExit):
            execute(queue.publisher, lost_park, task.id)
    (reaped,) = queue.store.reap(datetime.now(UTC) + timedelta(minutes=1))
    assert (reaped.worker_id, reaped.run_at) == (None, None)

    again = execute(queue.publisher, lost_park, task.id)

    assert again is not None
    assert again.status is TaskStatus.WORKING
    assert again.run_at is not None
    assert again.run_at - datetime.now(UTC) > timedelta(minutes=59)


def test_a_sleep_of_nothing_returns_at_once_and_a_bad_one_is_refused(
    app: Celery, queue: TaskQueue
) -> None:
    @job(app, name="test.no_nap")
    def no_nap(ctx: TaskContext) -> str:
        ctx.sleep("none", 0)
        ctx.sleep("negative", timedelta(seconds=-1))
        with pytest.raises(InvalidTaskData):
            ctx.sleep("bad", "soon")  # type: ignore[arg-type]
        with pytest.raises(InvalidTaskData):
            ctx.sleep_until("naive", datetime(2030, 1, 1))
        return "awake"

    task = queue.submit("test.no_nap")
    done = execute(queue.publisher, no_nap, task.id)

    assert done is not None
    assert done.result == "awake"
    assert queue.store.steps(task.id) == []


def test_a_cancel_during_the_sleep_means_it_never_wakes(app: Celery, queue: TaskQueue) -> None:
    woke: list[int] = []

    @job(app, name="test.cancelled_nap")
    def cancelled_nap(ctx: TaskContext) -> None:
        ctx.sleep("nap", 0.05)
        woke.append(1)

    task = queue.submit("test.cancelled_nap")
    execute(queue.publisher, cancelled_nap, task.id)
    queue.cancel(task.id)
    time.sleep(0.05)

    assert execute(queue.publisher, cancelled_nap, task.id) is None
    assert woke == []
    assert queue.store.get(task.id).status is TaskStatus.CANCELLED


def _dies(*args: object, **kwargs: object) -> None:
    raise SystemExit("worker killed")


def test_unnamed_sleeps_are_named_by_their_order_and_each_is_passed_on_the_next_runs(
    app: Celery, queue: TaskQueue
) -> None:
    reached: list[str] = []

    @job(app, name="test.naps")
    def naps(ctx: TaskContext) -> str:
        ctx.sleep(timedelta(milliseconds=50))
        reached.append("first")
        ctx.sleep_until(datetime.now(UTC) + timedelta(milliseconds=50))
        reached.append("second")
        return "woke twice"

    task = queue.submit("test.naps")
    runs = []
    for _ in range(20):  # each run ends at the next sleep; too early a claim is refused
        ran = execute(queue.publisher, naps, task.id)
        if ran is not None:
            runs.append(ran)
            if ran.status is TaskStatus.COMPLETED:
                break
        time.sleep(0.06)

    assert [run.status for run in runs] == [TaskStatus.WORKING] * 2 + [TaskStatus.COMPLETED]
    assert runs[-1].result == "woke twice"
    assert reached == ["first", "first", "second"]
    steps = queue.store.steps(task.id)
    assert [(step.name, step.kind) for step in steps] == [
        ("sleep 1", StepKind.SLEEP),
        ("sleep 2", StepKind.SLEEP),
    ]


def test_a_named_sleep_without_its_duration_is_refused(app: Celery, queue: TaskQueue) -> None:
    @job(app, name="test.unsure")
    def unsure(ctx: TaskContext) -> None:
        ctx.sleep("nap")  # type: ignore[call-overload]

    task = queue.submit("test.unsure")
    failed = execute(queue.publisher, unsure, task.id)

    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert failed.error is not None
    assert "needs its duration" in failed.error.message
