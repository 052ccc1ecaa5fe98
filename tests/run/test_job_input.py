"""A job's input is checked against its function's annotations, at submit and before a run.

Where the job is registered, ``submit`` refuses input that does not fit
(``InvalidTaskData`` whose field names the argument) and writes nothing; a
worker checks it again before the run, fails the task at once without running
the job when it does not fit, and otherwise calls the function with the
validated values.
"""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from celery import Celery
from pydantic import BaseModel

from queuestore import InvalidTaskData, TaskContext, TaskQueue, TaskStatus
from queuestore.run.jobs import execute
from tests.celery_support import Published, register


class Window(BaseModel):
    start: date
    days: int = 7


def build(ctx: TaskContext, month: str, rows: int = 10) -> dict[str, Any]:
    return {"month": month, "rows": rows}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"month": 5}, "input.month"),
        ({"month": "2026-11", "rows": "many"}, "input.rows"),
        ({}, "input.month"),
        ({"month": "2026-11", "mnth": "x"}, "input.mnth"),
    ],
)
def test_submit_refuses_input_that_does_not_fit_and_writes_nothing(
    app: Celery, queue: TaskQueue, published: Published, payload: dict[str, Any], field: str
) -> None:
    register(app, build, name="reports.build")

    with pytest.raises(InvalidTaskData) as refused:
        queue.submit("reports.build", payload)

    assert refused.value.field == field
    assert "reports.build" in str(refused.value)
    assert queue.store.list().tasks == []
    assert published.messages == []


def test_submit_many_names_the_item_and_the_argument(app: Celery, queue: TaskQueue) -> None:
    register(app, build, name="reports.build")

    with pytest.raises(InvalidTaskData) as refused:
        queue.submit_many(
            [
                {"name": "reports.build", "input": {"month": "2026-10"}},
                {"name": "reports.build", "input": {"month": 11}},
            ]
        )

    assert refused.value.field == "tasks[1].input.month"
    assert queue.store.list().tasks == []


def test_a_nested_value_is_named_by_its_path(app: Celery, queue: TaskQueue) -> None:
    def report(ctx: TaskContext, window: Window) -> None:
        return None

    register(app, report)

    with pytest.raises(InvalidTaskData) as refused:
        queue.submit("test.job", {"window": {"start": "2026-11-01", "days": "a week"}})

    assert refused.value.field == "input.window.days"


def test_the_run_gets_the_validated_values_and_the_functions_own_defaults(
    app: Celery, queue: TaskQueue
) -> None:
    seen: dict[str, Any] = {}

    def report(ctx: TaskContext, window: Window, day: date, count: int, note: str = "none") -> None:
        seen.update(window=window, day=day, count=count, note=note)

    registered = register(app, report)
    payload = {"window": {"start": "2026-11-01"}, "day": "2026-11-02", "count": "3"}
    task = queue.submit("test.job", payload)

    done = execute(queue.publisher, registered, task.id)

    assert done is not None
    assert done.status is TaskStatus.COMPLETED, done.error
    assert seen == {
        "window": Window(start=date(2026, 11, 1)),
        "day": date(2026, 11, 2),
        "count": 3,
        "note": "none",
    }
    assert done.input == payload  # the task keeps the input as it was sent


def test_a_worker_fails_input_that_does_not_fit_without_running_the_job(
    app: Celery, queue: TaskQueue
) -> None:
    runs: list[str] = []

    def call(ctx: TaskContext, month: str) -> None:
        runs.append(month)

    # Created where the job is not known (a caller without the job's module).
    task = queue.store.create("test.job", {"month": 5})
    registered = register(app, call)

    failed = execute(queue.publisher, registered, task.id)

    assert runs == []
    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.type == "InvalidTaskData"
    assert failed.error.message.startswith("input.month: ")
    assert failed.error.attempt == 1


def test_keyword_arguments_take_any_other_key_and_unknown_annotations_any_value(
    app: Celery, queue: TaskQueue
) -> None:
    def call(ctx: TaskContext, month: str, **rest: Any) -> None:
        return None

    def loose(ctx: TaskContext, thing: NotDefinedAnywhere) -> None:  # type: ignore[name-defined] # noqa: F821
        return None

    register(app, call, name="test.rest")
    register(app, loose, name="test.loose")

    queue.submit("test.rest", {"month": "2026-11", "anything": [1, 2]})
    queue.submit("test.loose", {"thing": {"any": "value"}})
    assert len(queue.store.list().tasks) == 2
