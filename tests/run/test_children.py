"""Child tasks in a run: spawned once, waited for without a worker, and the parent woken."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from celery import Celery

from queuestore import ChildFailed, InvalidTaskData, TaskContext, TaskQueue, TaskStatus
from queuestore.run.jobs import Job, execute, job
from tests.celery_support import Published


@pytest.fixture
def square(app: Celery) -> Job:
    @job(app, name="test.square")
    def square(ctx: TaskContext, x: int) -> int:
        if x < 0:
            raise ValueError("negative")
        return x * x

    return square


def published_ids(published: Published) -> list[str]:
    return [message["task_id"] for message in published.messages]


def test_a_parent_waits_for_its_children_without_a_worker_and_sums_them(
    app: Celery, queue: TaskQueue, published: Published, square: Job
) -> None:
    runs: Counter[int] = Counter()

    @job(app, name="test.fan_out")
    def fan_out(ctx: TaskContext, n: int) -> int:
        runs[ctx.attempt] += 1
        children = ctx.spawn_many({"job": square, "input": {"x": i}} for i in range(n))
        return sum(ctx.wait_results(children))

    parent = queue.submit("test.fan_out", {"n": 3})
    parked = execute(queue.publisher, fan_out, parent.id)

    assert parked is not None
    assert (parked.status, parked.worker_id, parked.run_at) == (TaskStatus.WORKING, None, None)
    assert parked.status_message == "waiting for 3 child tasks"
    children = queue.store.children(parent.id)
    assert parked.waits_on == [child.id for child in children]
    assert set(published_ids(published)) >= {child.id for child in children}
    for child in children:
        assert (child.parent_id, child.depth, child.name) == (parent.id, 1, "test.square")
        ended = execute(queue.publisher, square, child.id)
        assert ended is not None
        assert ended.status is TaskStatus.COMPLETED
    assert published_ids(published)[-1] == parent.id  # woken by the last child's end

    done = execute(queue.publisher, fan_out, parent.id)

    assert done is not None
    assert (done.status, done.result) == (TaskStatus.COMPLETED, 0 + 1 + 4)
    assert runs == {1: 1, 2: 1}
    assert len(queue.store.children(parent.id)) == 3  # the second run spawned none again


def test_a_wait_for_children_that_ended_meanwhile_runs_again_at_once(
    app: Celery,
    queue: TaskQueue,
    published: Published,
    square: Job,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @job(app, name="test.late_wait")
    def late_wait(ctx: TaskContext) -> Any:
        child = ctx.spawn(square, {"x": 2})
        return ctx.wait_results([child])

    park = queue.store.suspend

    def child_ends_first(*args: Any, **kwargs: Any) -> Any:
        (child,) = queue.store.children(parent.id)
        execute(queue.publisher, square, child.id)  # between the wait's read and the park
        return park(*args, **kwargs)

    parent = queue.submit("test.late_wait")
    with monkeypatch.context() as patched:
        patched.setattr(queue.store, "suspend", child_ends_first)
        first = execute(queue.publisher, late_wait, parent.id)

    assert first is not None
    assert (first.status, first.waits_on, first.worker_id) == (TaskStatus.WORKING, None, None)
    assert published_ids(published)[-1] == parent.id
    done = execute(queue.publisher, late_wait, parent.id)
    assert done is not None
    assert done.result == [4]


def test_a_failed_child_fails_wait_results_and_wait_returns_it(
    app: Celery, queue: TaskQueue, square: Job
) -> None:
    seen: list[Any] = []

    @job(app, name="test.checks")
    def checks(ctx: TaskContext) -> Any:
        kids = [ctx.spawn(square, {"x": 2}), ctx.spawn(square, {"x": -1})]
        seen.append([(t.status, t.error and t.error.message) for t in ctx.wait(kids)])
        return ctx.wait_results(kids)

    parent = queue.submit("test.checks")
    execute(queue.publisher, checks, parent.id)
    for child in queue.store.children(parent.id):
        execute(queue.publisher, square, child.id)
    failed = execute(queue.publisher, checks, parent.id)

    assert seen == [[(TaskStatus.COMPLETED, None), (TaskStatus.FAILED, "negative")]]
    assert failed is not None
    assert failed.error is not None
    assert failed.error.type == "queuestore.core.errors.ChildFailed"
    assert issubclass(ChildFailed, Exception)


def test_children_belong_to_their_parents_owner(app: Celery, queue: TaskQueue, square: Job) -> None:
    @job(app, name="test.owned")
    def owned(ctx: TaskContext) -> str:
        return ctx.spawn("test.square", {"x": 1}, key="one").owner or ""

    parent = queue.submit("test.owned", owner="alice")
    done = execute(queue.publisher, owned, parent.id)

    assert done is not None
    assert done.result == "alice"


def test_a_child_input_its_job_cannot_take_is_refused_before_anything_is_written(
    app: Celery, queue: TaskQueue, square: Job
) -> None:
    @job(app, name="test.bad_child")
    def bad_child(ctx: TaskContext) -> None:
        with pytest.raises(InvalidTaskData) as refused:
            ctx.spawn(square, {"y": 1})
        assert refused.value.field == "children[0].input"

    parent = queue.submit("test.bad_child")
    execute(queue.publisher, bad_child, parent.id)

    assert queue.store.children(parent.id) == []


def test_cancelling_a_parent_cancels_and_revokes_its_children(
    app: Celery, queue: TaskQueue, published: Published, square: Job
) -> None:
    @job(app, name="test.waits")
    def waits(ctx: TaskContext) -> None:
        ctx.spawn_many({"job": square, "input": {"x": i}} for i in range(2))
        ctx.wait()

    parent = queue.submit("test.waits")
    execute(queue.publisher, waits, parent.id)
    children = queue.store.children(parent.id)

    cancelled = queue.cancel(parent.id)

    assert cancelled.status is TaskStatus.CANCELLED
    assert [queue.store.get(c.id).status for c in children] == [TaskStatus.CANCELLED] * 2
    (revoked, _options) = published.revoked[-1]
    assert revoked == [parent.id, *(c.id for c in children)]
    assert all(execute(queue.publisher, square, c.id) is None for c in children)


def test_a_cancelled_child_wakes_its_waiting_parent(
    app: Celery, queue: TaskQueue, published: Published, square: Job
) -> None:
    @job(app, name="test.waits_one")
    def waits_one(ctx: TaskContext) -> list[str]:
        child = ctx.spawn(square, {"x": 3})
        return [t.status for t in ctx.wait([child])]

    parent = queue.submit("test.waits_one")
    execute(queue.publisher, waits_one, parent.id)
    (child,) = queue.store.children(parent.id)

    queue.cancel(child.id)

    assert published_ids(published)[-1] == parent.id
    done = execute(queue.publisher, waits_one, parent.id)
    assert done is not None
    assert done.result == ["cancelled"]


def test_a_wait_inside_a_step_or_for_a_stranger_is_refused(app: Celery, queue: TaskQueue) -> None:
    stranger = queue.submit("test.other")

    @job(app, name="test.odd_waits")
    def odd_waits(ctx: TaskContext) -> None:
        with pytest.raises(InvalidTaskData, match="not a child"):
            ctx.wait([stranger.id])
        with pytest.raises(InvalidTaskData, match="not inside one"):
            ctx.step("s", ctx.wait)

    done = execute(queue.publisher, odd_waits, queue.submit("test.odd_waits").id)

    assert done is not None
    assert done.status is TaskStatus.COMPLETED


def test_the_sweep_wakes_and_publishes_a_parent_nobody_woke(
    app: Celery, queue: TaskQueue, published: Published, square: Job
) -> None:
    @job(app, name="test.waits_all")
    def waits_all(ctx: TaskContext) -> Any:
        ctx.spawn(square, {"x": 5})
        return ctx.wait_results()

    parent = queue.submit("test.waits_all")
    execute(queue.publisher, waits_all, parent.id)
    (child,) = queue.store.children(parent.id)
    queue.store.claim(child.id, "elsewhere", queue.options.lease)
    queue.store.report(child.id, "elsewhere", status=TaskStatus.COMPLETED, result=25)

    assert queue.sweep() == 1

    assert published_ids(published)[-1] == parent.id
    done = execute(queue.publisher, waits_all, parent.id)
    assert done is not None
    assert done.result == [25]
