"""Named steps in a run: a later run of the task gets a finished step's result, not its body."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Celery

from queuestore import (
    Retry,
    StepStatus,
    TaskContext,
    TaskQueue,
    TaskStatus,
    step,
)
from queuestore.run.context import Suspended
from queuestore.run.jobs import execute, job


class UpstreamDown(Exception):
    pass


RETRY_AT_ONCE = Retry(on=(UpstreamDown,), max_runs=3, backoff=timedelta(0), jitter=False)


def test_a_run_after_a_failed_step_resumes_there(app: Celery, queue: TaskQueue) -> None:
    calls: Counter[str] = Counter()

    def body(name: str, fail_once: bool = False) -> str:
        calls[name] += 1
        if fail_once and calls[name] == 1:
            raise UpstreamDown("503")
        return f"{name} done"

    @job(app, name="test.three_steps", retry=RETRY_AT_ONCE)
    def three_steps(ctx: TaskContext) -> list[Any]:
        return [
            ctx.step("one", body, "one"),
            ctx.step("two", body, "two"),
            ctx.step("three", body, "three", fail_once=True),
        ]

    task = queue.submit("test.three_steps")

    first = execute(queue.publisher, three_steps, task.id)
    assert first is not None
    assert first.status is TaskStatus.WORKING  # retried
    done = execute(queue.publisher, three_steps, task.id)

    assert done is not None
    assert done.result == ["one done", "two done", "three done"]
    assert calls == {"one": 1, "two": 1, "three": 2}
    steps = queue.store.steps(task.id)
    assert [(s.name, s.status, s.attempt, s.tries) for s in steps] == [
        ("one", StepStatus.COMPLETED, 1, 1),
        ("two", StepStatus.COMPLETED, 1, 1),
        ("three", StepStatus.COMPLETED, 2, 2),
    ]


def test_a_step_that_raised_keeps_its_error_when_the_task_fails(
    app: Celery, queue: TaskQueue
) -> None:
    @job(app, name="test.broken")
    def broken(ctx: TaskContext) -> None:
        ctx.step("fetch", lambda: 1 / 0)

    task = queue.submit("test.broken")
    failed = execute(queue.publisher, broken, task.id)

    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.type == "ZeroDivisionError"
    (fetch,) = queue.store.steps(task.id)
    assert (fetch.status, fetch.error) == (StepStatus.FAILED, failed.error)


def test_a_run_after_a_sleep_replays_steps_by_name_whatever_their_order(
    app: Celery, queue: TaskQueue
) -> None:
    calls: Counter[str] = Counter()
    order = [["a", "b"], ["b", "c", "a"]]  # a deploy reordered the steps in between

    def body(name: str) -> str:
        calls[name] += 1
        return name.upper()

    @job(app, name="test.reordered")
    def reordered(ctx: TaskContext) -> list[Any]:
        results = [ctx.step(name, body, name) for name in order[ctx.attempt - 1]]
        if ctx.attempt == 1:
            raise Suspended(datetime.now(UTC), "between deploys")
        return results

    task = queue.submit("test.reordered")
    execute(queue.publisher, reordered, task.id)
    done = execute(queue.publisher, reordered, task.id)

    assert done is not None
    assert done.result == ["B", "C", "A"]
    assert calls == {"a": 1, "b": 1, "c": 1}


def test_a_name_used_twice_in_one_run_is_refused(app: Celery, queue: TaskQueue) -> None:
    @job(app, name="test.twice")
    def twice(ctx: TaskContext) -> None:
        for page in range(2):
            ctx.step("fetch", lambda page=page: page)

    task = queue.submit("test.twice")
    failed = execute(queue.publisher, twice, task.id)

    assert failed is not None
    assert failed.error is not None
    assert failed.error.type == "queuestore.core.errors.InvalidTaskData"
    assert "already ran in this run" in failed.error.message


def test_the_decorator_names_a_step_and_keys_its_calls(app: Celery, queue: TaskQueue) -> None:
    calls: list[str] = []

    @step("fetch")
    def fetch(ctx: TaskContext, url: str) -> str:
        calls.append(url)
        return f"<{url}>"

    @step()
    def summarise(ctx: TaskContext, pages: list[str]) -> str:
        return " ".join(pages)

    @job(app, name="test.decorated")
    def decorated(ctx: TaskContext, urls: list[str]) -> str:
        pages = [fetch(ctx, url, step_key=url) for url in urls]
        return summarise(ctx, pages)  # type: ignore[no-any-return]

    task = queue.submit("test.decorated", {"urls": ["a", "b"]})
    done = execute(queue.publisher, decorated, task.id)

    assert done is not None
    assert done.result == "<a> <b>"
    names = [s.name for s in queue.store.steps(task.id)]
    assert names[:2] == ["fetch:a", "fetch:b"]
    assert names[2].endswith("summarise")


def test_steps_nest_but_a_sleep_inside_one_is_refused(app: Celery, queue: TaskQueue) -> None:
    @job(app, name="test.nested")
    def nested(ctx: TaskContext) -> Any:
        def outer() -> Any:
            return [ctx.step("inner", lambda: 1), 2]

        return ctx.step("outer", outer)

    @job(app, name="test.asks_in_a_step")
    def asks_in_a_step(ctx: TaskContext) -> Any:
        return ctx.step("ask", lambda: ctx.request_input("which?"))

    done = execute(queue.publisher, nested, queue.submit("test.nested").id)
    refused = execute(queue.publisher, asks_in_a_step, queue.submit("test.asks_in_a_step").id)

    assert done is not None
    assert done.result == [1, 2]
    assert refused is not None
    assert refused.status is TaskStatus.FAILED
    assert refused.error is not None
    assert "not inside one" in refused.error.message


def test_first_run_and_replay_see_the_same_value(app: Celery, queue: TaskQueue) -> None:
    seen: list[Any] = []

    @job(app, name="test.same")
    def same(ctx: TaskContext) -> None:
        seen.append(ctx.step("value", lambda: {"n": 1e300, "t": [1, 2]}))
        if ctx.attempt == 1:
            raise Suspended(datetime.now(UTC), "again")

    task = queue.submit("test.same")
    execute(queue.publisher, same, task.id)
    execute(queue.publisher, same, task.id)

    assert seen[0] == seen[1] == {"n": 1e300, "t": [1, 2]}


def test_a_result_that_is_not_json_fails_the_run_and_records_nothing(
    app: Celery, queue: TaskQueue
) -> None:
    @job(app, name="test.not_json")
    def not_json(ctx: TaskContext) -> None:
        ctx.step("when", lambda: datetime.now(UTC))

    task = queue.submit("test.not_json")
    failed = execute(queue.publisher, not_json, task.id)

    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert queue.store.steps(task.id) == []


def test_a_step_recorded_after_a_cancel_is_refused(app: Celery, queue: TaskQueue) -> None:
    @job(app, name="test.cancelled")
    def cancelled(ctx: TaskContext) -> None:
        queue.cancel(ctx.task_id)
        ctx.step("late", lambda: "too late")

    task = queue.submit("test.cancelled")
    execute(queue.publisher, cancelled, task.id)

    assert queue.store.get(task.id).status is TaskStatus.CANCELLED
    assert queue.store.steps(task.id) == []


def test_a_run_reports_the_step_it_is_in(app: Celery, queue: TaskQueue) -> None:
    messages: list[str | None] = []

    @job(app, name="test.reports")
    def reports(ctx: TaskContext) -> None:
        def body() -> None:
            ctx.flush()
            messages.append(queue.store.get(ctx.task_id).status_message)
            time.sleep(0)

        ctx.step("crawl", body)

    execute(queue.publisher, reports, queue.submit("test.reports").id)

    assert messages == ["step crawl"]
