"""Owner scoping: ANY sees everything, None sees unowned tasks, a principal sees its own.

A task outside the caller's scope behaves exactly like a missing one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from queuestore import (
    ANY,
    Artifact,
    InvalidTaskData,
    TaskNotFound,
    TaskStatus,
    TaskStore,
)
from queuestore.core.owner import Owner

from .support import StoreFactory, reach, snapshot

# (task owner, caller) -> visible
MATRIX = [
    ("alice", ANY, True),
    (None, ANY, True),
    ("alice", "alice", True),
    ("alice", "bob", False),
    ("alice", "Alice", False),
    ("alice", "alice ", False),
    ("alice", None, False),
    (None, None, True),
    (None, "alice", False),
]

SCOPED_WRITES: dict[str, Callable[[TaskStore, str, Owner], Any]] = {
    "update": lambda store, task_id, owner: store.update(task_id, progress=0.5, owner=owner),
    "cancel": lambda store, task_id, owner: store.cancel(task_id, owner=owner),
    "add_artifact": lambda store, task_id, owner: store.add_artifact(
        task_id, Artifact(artifact_id="a"), owner=owner
    ),
}


@pytest.mark.parametrize(("task_owner", "caller", "visible"), MATRIX)
def test_get_and_list_follow_the_owner_matrix(
    store: TaskStore, task_owner: str | None, caller: Owner, visible: bool
) -> None:
    task = store.create("x.y", owner=task_owner)

    assert [t.id for t in store.list(owner=caller).tasks] == ([task.id] if visible else [])
    if visible:
        assert store.get(task.id, owner=caller) == task
    else:
        with pytest.raises(TaskNotFound):
            store.get(task.id, owner=caller)


@pytest.mark.parametrize("write", sorted(SCOPED_WRITES))
@pytest.mark.parametrize(("task_owner", "caller", "visible"), MATRIX)
def test_writes_follow_the_owner_matrix(
    store: TaskStore, write: str, task_owner: str | None, caller: Owner, visible: bool
) -> None:
    task = reach(store, TaskStatus.WORKING, owner=task_owner)

    if visible:
        assert SCOPED_WRITES[write](store, task.id, caller).version == task.version + 1
    else:
        with pytest.raises(TaskNotFound) as raised:
            SCOPED_WRITES[write](store, task.id, caller)
        assert raised.value.task_id == task.id
        assert store.get(task.id) == task


@pytest.mark.parametrize(("task_owner", "caller", "visible"), MATRIX)
def test_delete_of_an_invisible_task_does_nothing(
    store: TaskStore, task_owner: str | None, caller: Owner, visible: bool
) -> None:
    task = store.create("x.y", owner=task_owner)

    store.delete(task.id, owner=caller)

    assert [t.id for t in store.list().tasks] == ([] if visible else [task.id])


def test_provide_input_and_wait_are_scoped_too(store: TaskStore) -> None:
    task = reach(store, TaskStatus.INPUT_REQUIRED, owner="alice")

    with pytest.raises(TaskNotFound):
        store.provide_input(task.id, "yes", owner="bob")
    with pytest.raises(TaskNotFound):
        store.wait(task.id, timeout=0.01, owner="bob")
    assert store.get(task.id) == task
    assert store.provide_input(task.id, "yes", owner="alice").status == TaskStatus.WORKING


def test_someone_elses_task_and_a_missing_one_raise_the_same_error(store: TaskStore) -> None:
    task = store.create("x.y", owner="alice", task_id="taken")

    with pytest.raises(TaskNotFound) as theirs:
        store.get(task.id, owner="bob")
    store.delete(task.id)
    with pytest.raises(TaskNotFound) as missing:
        store.get(task.id, owner="bob")

    assert str(theirs.value) == str(missing.value)


@pytest.mark.parametrize("alice_first", [True, False], ids=["alice-first", "bob-first"])
def test_list_filters_by_owner_before_the_limit(store: TaskStore, alice_first: bool) -> None:
    def create(owner: str, count: int) -> set[str]:
        return {store.create("x.y", owner=owner).id for _ in range(count)}

    if alice_first:
        alices = create("alice", 5)
        create("bob", 30)
    else:
        create("bob", 30)
        alices = create("alice", 5)

    page = store.list(owner="alice", limit=5)

    assert {t.id for t in page.tasks} == alices
    assert page.next_cursor is None
    assert len(store.list(owner="bob", limit=1000).tasks) == 30
    assert len(store.list(owner=ANY, limit=1000).tasks) == 35


def test_require_owner_refuses_unowned_tasks_and_shows_anonymous_callers_nothing(
    make_store: StoreFactory,
) -> None:
    store = make_store(require_owner=True)
    task = store.create("x.y", owner="alice")
    before = snapshot(store)

    with pytest.raises(InvalidTaskData) as raised:
        store.create("x.y")
    assert raised.value.field == "owner"
    assert snapshot(store) == before

    assert store.list(owner=None).tasks == []
    with pytest.raises(TaskNotFound):
        store.get(task.id, owner=None)
    with pytest.raises(TaskNotFound):
        store.cancel(task.id, owner=None)
    store.delete(task.id, owner=None)
    assert store.get(task.id, owner="alice") == task
    assert store.list(owner=ANY).tasks == [task]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_require_owner_hides_unowned_rows_written_by_another_store(
    make_store: StoreFactory,
) -> None:
    lenient = make_store()
    strict = make_store(require_owner=True)
    unowned = lenient.create("x.y")

    assert strict.list(owner=None).tasks == []
    with pytest.raises(TaskNotFound):
        strict.get(unowned.id, owner=None)
    assert lenient.get(unowned.id, owner=None) == unowned


@pytest.mark.parametrize("owner", [5, b"alice", object()])
def test_an_owner_that_is_not_a_string_is_bad_input(store: TaskStore, owner: Any) -> None:
    with pytest.raises(InvalidTaskData) as raised:
        store.list(owner=owner)

    assert raised.value.field == "owner"
    assert str(raised.value) == "owner: must be a string, None or queuestore.ANY"
