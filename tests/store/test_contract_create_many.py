"""create_many: many tasks in one transaction, all or none, in the order given."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from queuestore import InvalidTaskData, TaskConflict, TaskStatus, TaskStore
from queuestore.store.observer import StoreObserver


def test_the_tasks_are_created_in_the_order_given(store: TaskStore) -> None:
    start = datetime.now(UTC) + timedelta(hours=1)
    items = [{"name": "x.y", "input": {"i": i}, "owner": "alice"} for i in range(2500)]
    items[7] |= {"run_at": start, "unique_key": "k", "ttl": timedelta(seconds=5)}

    tasks = store.create_many(items)

    assert [task.input for task in tasks] == [{"i": i} for i in range(2500)]
    assert all(task.status is TaskStatus.SUBMITTED for task in tasks)
    assert (tasks[7].run_at, tasks[7].unique_key, tasks[7].ttl) == (
        start,
        "k",
        timedelta(seconds=5),
    )
    assert store.get(tasks[7].id) == tasks[7]
    assert store.count() == 2500
    newest_first = [task.id for task in store.list(owner="alice", limit=1000).tasks]
    assert newest_first == [task.id for task in reversed(tasks)][:1000]
    assert [t.id for t in store.unpublished(timedelta(0), limit=3)] == [t.id for t in tasks[:3]]


def test_a_bad_item_is_named_and_nothing_is_written(store: TaskStore) -> None:
    good = {"name": "x.y"}
    cases = [
        ([good, {"name": "x.y", "input": {"bad": "\x00"}}], "tasks[1].input"),
        ([good, {"name": "x.y", "colour": "red"}], "tasks[1]"),
        ([good, {"input": {}}], "tasks[1]"),
        ([good, "x.y"], "tasks[1]"),
        ([{"name": "x.y", "task_id": "t-1"}, {"name": "x.y", "task_id": "t-1"}], "tasks"),
    ]
    for items, field in cases:
        with pytest.raises(InvalidTaskData) as refused:
            store.create_many(items)  # type: ignore[arg-type]
        assert refused.value.field == field

    assert store.count() == 0
    assert store.create_many([]) == []


def test_a_taken_id_rolls_the_whole_batch_back(store: TaskStore) -> None:
    store.create("x.y", task_id="t-taken")

    with pytest.raises(TaskConflict):
        store.create_many(
            [{"name": "x.y", "task_id": "t-new"}, {"name": "x.y", "task_id": "t-taken"}]
        )

    assert [task.id for task in store.iterate()] == ["t-taken"]


def test_an_item_whose_key_is_held_gives_the_holder(store: TaskStore) -> None:
    held = store.create("x.y", owner="alice", unique_key="k")

    tasks = store.create_many(
        [
            {"name": "x.y", "owner": "alice", "unique_key": "k"},
            {"name": "x.y", "owner": "alice", "unique_key": "fresh"},
            {"name": "x.y", "owner": "alice", "unique_key": "fresh"},
            {"name": "x.y", "owner": "bob", "unique_key": "k"},
        ]
    )

    assert tasks[0] == held
    assert tasks[1] == tasks[2]
    assert tasks[3].id not in {held.id, tasks[1].id}
    assert store.count() == 3


def test_observers_hear_of_each_task_created(store: TaskStore) -> None:
    created: list[str] = []

    class Heard(StoreObserver):
        def created(self, task: object) -> None:
            created.append(getattr(task, "id", ""))

    store.observe(Heard())
    tasks = store.create_many(
        [{"name": "x.y", "unique_key": "k"}, {"name": "x.y", "unique_key": "k"}]
    )

    assert created == [tasks[0].id]


@pytest.mark.parametrize(
    "documents",
    [
        [{"input": {"b": 1, "a": [1.5, None]}, "metadata": {"k": "v"}}] * 2,
        [{"input": {"b": 1}}, {"input": {"n": 1e300, "zeta": 1, "": "\u2603"}}],
    ],
    ids=["as-sent", "rewritten"],
)
def test_the_tasks_returned_are_what_a_read_gets(
    store: TaskStore, documents: list[dict[str, Any]]
) -> None:
    created = store.create_many([{"name": "x.y", **document} for document in documents])

    assert created == [store.get(task.id) for task in created]
