"""Named steps in the store: recorded once under the run's lease, kept by name, read back.

Every backend must record a step only for the run holding a working task,
never replace a completed step (a second record returns the first), replace
a failed one (``tries`` + 1), refuse bad names and results before writing,
scope ``steps`` by owner like ``get``, and delete steps with their task.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from queuestore import (
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    Task,
    TaskError,
    TaskNotFound,
    TaskStatus,
    TaskStore,
)
from queuestore.core.models import StepKind, StepStatus
from queuestore.store.backend import StepOutcome

LEASE = timedelta(minutes=5)


def claimed(store: TaskStore, worker: str = "w1", **create: object) -> Task:
    task = store.claim(store.create("x.y", **create).id, worker, LEASE)  # type: ignore[arg-type]
    assert task is not None
    return task


def done(name: str, result: object = None, *, kind: StepKind = StepKind.STEP) -> StepOutcome:
    return StepOutcome(
        name=name,
        kind=kind,
        status=StepStatus.COMPLETED,
        result=result,  # type: ignore[arg-type]
        elapsed=timedelta(milliseconds=20),
    )


def failed(name: str) -> StepOutcome:
    return StepOutcome(
        name=name,
        kind=StepKind.STEP,
        status=StepStatus.FAILED,
        error=TaskError(type="ValueError", message="bad page"),
    )


def test_a_step_recorded_by_the_run_is_listed_with_its_result_and_run(store: TaskStore) -> None:
    task = claimed(store)
    before = datetime.now(UTC)

    step = store.record_step(task.id, "w1", done("fetch", {"page": "<html>", "n": 1.5}))

    assert (step.name, step.kind, step.status) == ("fetch", StepKind.STEP, StepStatus.COMPLETED)
    assert (step.result, step.error, step.attempt, step.tries) == (
        {"page": "<html>", "n": 1.5},
        None,
        1,
        1,
    )
    assert step.finished_at - step.started_at == timedelta(milliseconds=20)
    assert step.finished_at >= before - timedelta(seconds=1)
    assert store.steps(task.id) == [step]
    assert store.run_steps(task.id) == [step]


def test_steps_are_listed_oldest_first(store: TaskStore) -> None:
    task = claimed(store)
    for name in ("b-first", "a-second", "c-third"):
        store.record_step(task.id, "w1", done(name))

    assert [step.name for step in store.steps(task.id)] == ["b-first", "a-second", "c-third"]


def test_a_completed_step_is_never_replaced(store: TaskStore) -> None:
    task = claimed(store)
    first = store.record_step(task.id, "w1", done("fetch", "first"))

    again = store.record_step(task.id, "w1", done("fetch", "second"))

    assert again == first
    assert store.steps(task.id) == [first]


def test_a_failed_step_keeps_its_error_and_a_later_run_replaces_it(store: TaskStore) -> None:
    task = claimed(store)
    broken = store.record_step(task.id, "w1", failed("fetch"))
    assert (broken.status, broken.error, broken.result) == (
        StepStatus.FAILED,
        TaskError(type="ValueError", message="bad page"),
        None,
    )
    store.suspend(task.id, "w1", until=datetime.now(UTC), message=None)
    claimed_again = store.claim(task.id, "w2", LEASE)
    assert claimed_again is not None

    fixed = store.record_step(task.id, "w2", done("fetch", "page"))

    assert (fixed.status, fixed.result, fixed.error) == (StepStatus.COMPLETED, "page", None)
    assert (fixed.attempt, fixed.tries) == (2, 2)
    assert store.steps(task.id) == [fixed]


def test_a_record_writes_nothing_to_the_task(store: TaskStore) -> None:
    task = claimed(store)

    store.record_step(task.id, "w1", done("fetch", [1, 2, 3]))

    assert store.get(task.id) == task


def test_only_the_run_holding_a_working_task_records_a_step(store: TaskStore) -> None:
    task = claimed(store)
    unclaimed = store.create("x.y")

    with pytest.raises(LeaseLost):
        store.record_step(task.id, "someone-else", done("fetch"))
    with pytest.raises(InvalidTransition):
        store.record_step(unclaimed.id, "w1", done("fetch"))
    store.cancel(task.id)
    with pytest.raises(InvalidTransition):
        store.record_step(task.id, "w1", done("fetch"))
    store.delete(task.id)
    with pytest.raises(TaskNotFound):
        store.record_step(task.id, "w1", done("fetch"))
    assert store.steps(unclaimed.id) == []


@pytest.mark.parametrize("name", ["", "x" * 201, "nul\x00", "tab\there", 7])
def test_a_bad_name_is_refused_before_anything_is_written(store: TaskStore, name: object) -> None:
    task = claimed(store)

    with pytest.raises(InvalidTaskData) as refused:
        store.record_step(task.id, "w1", done(name))  # type: ignore[arg-type]

    assert refused.value.field == "step"
    assert store.steps(task.id) == []


def test_a_result_that_is_not_json_or_too_large_is_refused(make_store: object) -> None:
    store: TaskStore = make_store(max_payload_bytes=100)  # type: ignore[operator]
    task = claimed(store)

    for result in ({"when": datetime.now(UTC)}, "x" * 200):
        with pytest.raises(InvalidTaskData) as refused:
            store.record_step(task.id, "w1", done("fetch", result))
        assert refused.value.field == "result"
    assert store.steps(task.id) == []


def test_a_name_stays_the_kind_it_was_first_recorded_as(store: TaskStore) -> None:
    task = claimed(store)
    store.record_step(task.id, "w1", failed("nap"))

    with pytest.raises(InvalidTaskData) as refused:
        store.record_step(task.id, "w1", done("nap", {"until": "x"}, kind=StepKind.SLEEP))

    assert refused.value.field == "step"
    assert [step.kind for step in store.steps(task.id)] == [StepKind.STEP]


def test_steps_are_scoped_by_owner_like_the_task(store: TaskStore) -> None:
    task = claimed(store, owner="alice")
    store.record_step(task.id, "w1", done("fetch"))

    assert [step.name for step in store.steps(task.id, owner="alice")] == ["fetch"]
    with pytest.raises(TaskNotFound):
        store.steps(task.id, owner="bob")
    with pytest.raises(TaskNotFound):
        store.steps(task.id, owner=None)
    with pytest.raises(TaskNotFound):
        store.steps("no-such-task")


def test_steps_are_deleted_with_their_task(store: TaskStore) -> None:
    task = claimed(store)
    store.record_step(task.id, "w1", done("fetch"))
    store.report(task.id, "w1", status=TaskStatus.COMPLETED)

    assert store.cleanup(timedelta(days=1), now=datetime.now(UTC) + timedelta(days=2)) == 1

    with pytest.raises(TaskNotFound):
        store.steps(task.id)
    reused = store.create("x.y", task_id=task.id)
    assert store.steps(reused.id) == []


def test_a_float_comes_back_as_stored_on_first_record_and_every_read(store: TaskStore) -> None:
    task = claimed(store)

    step = store.record_step(task.id, "w1", done("big", {"n": 1e300, "m": 0.1}))

    assert store.steps(task.id)[0].result == step.result
