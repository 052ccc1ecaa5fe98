"""Unique tasks: while a live task of an owner holds a key, creating another with it
returns that task; the database keeps racing creates to one task."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from queuestore import InvalidTaskData, TaskConflict, TaskStatus, TaskStore
from queuestore.store.observer import StoreObserver

LEASE = timedelta(minutes=5)


def test_a_second_create_with_a_live_key_returns_the_first_task(store: TaskStore) -> None:
    first = store.create("reports.build", {"month": "11"}, owner="alice", unique_key="nov")

    again = store.create("reports.build", {"month": "other"}, owner="alice", unique_key="nov")

    assert again == first
    assert first.unique_key == "nov"
    assert store.get(first.id).unique_key == "nov"
    assert store.count() == 1


def test_a_key_is_per_owner_and_the_unowned_share_one(store: TaskStore) -> None:
    alice = store.create("x.y", owner="alice", unique_key="k")
    bob = store.create("x.y", owner="bob", unique_key="k")
    nobody = store.create("x.y", unique_key="k")

    assert len({alice.id, bob.id, nobody.id}) == 3
    assert store.create("x.y", unique_key="k") == nobody
    assert store.create("x.y", owner="bob", unique_key="k") == bob


@pytest.mark.parametrize(
    "end", [TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.REJECTED]
)
def test_an_ended_task_frees_its_key(store: TaskStore, end: TaskStatus) -> None:
    first = store.create("x.y", unique_key="k")
    if end is TaskStatus.COMPLETED:
        store.update(first.id, status=TaskStatus.WORKING)
    store.update(first.id, status=end) if end is not TaskStatus.CANCELLED else store.cancel(
        first.id
    )

    second = store.create("x.y", unique_key="k")

    assert second.id != first.id
    assert store.create("x.y", unique_key="k") == second


def test_a_parked_or_running_task_keeps_its_key(store: TaskStore) -> None:
    running = store.create("x.y", unique_key="run")
    store.claim(running.id, "w1", LEASE)
    parked = store.create("x.y", unique_key="park")
    store.update(parked.id, status=TaskStatus.WORKING)
    store.update(parked.id, status=TaskStatus.INPUT_REQUIRED)

    assert store.create("x.y", unique_key="run").id == running.id
    assert store.create("x.y", unique_key="park").id == parked.id


def test_a_taken_id_is_still_a_conflict_and_a_bad_key_is_refused(store: TaskStore) -> None:
    store.create("x.y", task_id="t-1")
    with pytest.raises(TaskConflict):
        store.create("x.y", task_id="t-1", unique_key="fresh")
    store.create("x.y", task_id="t-2", unique_key="held")
    with pytest.raises(TaskConflict):  # the same task again: its id is taken
        store.create("x.y", task_id="t-2", unique_key="held")
    for wrong in ("", "x" * 257, "a\x00b", 7):
        with pytest.raises(InvalidTaskData, match="unique_key"):
            store.create("x.y", unique_key=wrong)  # type: ignore[arg-type]

    assert store.count() == 2


def test_observers_hear_only_of_the_task_created(store: TaskStore) -> None:
    created: list[str] = []

    class Heard(StoreObserver):
        def created(self, task: object) -> None:
            created.append(getattr(task, "id", ""))

    store.observe(Heard())
    first = store.create("x.y", unique_key="k")
    store.create("x.y", unique_key="k")

    assert created == [first.id]


def test_racing_creates_make_one_task(store: TaskStore) -> None:
    results: list[str] = []
    start = threading.Barrier(8)

    def create() -> None:
        start.wait()
        results.append(store.create("x.y", owner="alice", unique_key="once").id)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(set(results)) == 1
    assert store.count() == 1
