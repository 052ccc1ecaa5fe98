"""Child tasks in the store: spawned under a run's lease, parked on, woken once, cancelled with.

Every backend must spawn children idempotently by key with what they take
from their parent, list a task's children, park a run on its live children
(refusing when none is live), wake the parked task exactly once when they
have all ended, and cancel the live descendants of a task cancelled or failed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from queuestore import (
    InvalidCursor,
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    Task,
    TaskNotFound,
    TaskStatus,
    TaskStore,
)
from queuestore.store.durable import spawn_key
from tests.store.support import race, snapshot

LEASE = timedelta(minutes=5)


def claimed(store: TaskStore, worker: str = "w1", **create: Any) -> Task:
    task = store.claim(store.create(create.pop("name", "x.parent"), **create).id, worker, LEASE)
    assert task is not None
    return task


def spawned(
    store: TaskStore, parent: Task, *items: dict[str, Any], worker: str = "w1"
) -> list[Task]:
    return [task for task, _ in store.spawn(parent.id, worker, items)]


def ended(store: TaskStore, task: Task, status: TaskStatus = TaskStatus.COMPLETED) -> Task:
    """``task`` run to ``status`` by a worker of its own (cancelled by a caller)."""
    if status is TaskStatus.CANCELLED:
        return store.cancel(task.id)
    held = store.claim(task.id, f"w-{task.id}", LEASE)
    assert held is not None
    return store.report(task.id, f"w-{task.id}", status=status, result="r")


def test_children_take_their_parents_owner_context_and_bounds(store: TaskStore) -> None:
    deadline = datetime.now(UTC) + timedelta(hours=1)
    parent = claimed(
        store, owner="alice", context_id="chat-1", ttl=timedelta(days=2), deadline=deadline
    )
    later = deadline + timedelta(hours=1)

    first, second = spawned(
        store,
        parent,
        {"name": "x.child", "input": {"page": 1}},
        {"name": "x.child", "input": {"page": 2}, "priority": 7, "deadline": later, "key": "p2"},
    )

    for child in (first, second):
        assert (child.status, child.parent_id, child.depth) == (TaskStatus.SUBMITTED, parent.id, 1)
        assert (child.owner, child.context_id, child.ttl) == ("alice", "chat-1", timedelta(days=2))
        assert child.deadline_at == deadline  # no later than its parent's
        assert child.start_by == deadline
    assert (first.input, first.spawn_key) == ({"page": 1}, spawn_key("x.child", {"page": 1}))
    assert (second.priority, second.spawn_key, first.priority) == (7, "p2", 0)
    assert store.get(first.id) == first
    assert [store.get(first.id, owner="alice").id] == [first.id]


def test_spawning_the_same_keys_again_returns_the_same_children(store: TaskStore) -> None:
    parent = claimed(store)
    first = store.spawn(parent.id, "w1", [{"name": "x.child", "input": {"i": 1}}])
    before = snapshot(store)

    again = store.spawn(
        parent.id, "w1", [{"name": "x.child", "input": {"i": 1}}, {"name": "x.child", "key": "b"}]
    )

    assert [(task.id, created) for task, created in again] == [
        (first[0][0].id, False),
        (again[1][0].id, True),
    ]
    assert len(snapshot(store)) == len(before) + 1


def test_a_key_of_another_job_is_refused_and_nothing_is_written(store: TaskStore) -> None:
    parent = claimed(store)
    spawned(store, parent, {"name": "x.child", "key": "k"})
    before = snapshot(store)

    with pytest.raises(InvalidTaskData) as refused:
        store.spawn(
            parent.id, "w1", [{"name": "x.new", "key": "n"}, {"name": "x.other", "key": "k"}]
        )

    assert refused.value.field == "key"
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"input": {}}, "children[0]"),
        ({"name": "x.child", "owner": "mallory"}, "children[0]"),
        ({"name": "x.child", "input": {"t": object()}}, "children[0].input"),
        ({"name": "x.child", "deadline": datetime(2030, 1, 1)}, "children[0].deadline"),
        ({"name": "x.child", "timeout": timedelta(0)}, "children[0].timeout"),
    ],
)
def test_a_bad_child_is_refused_before_anything_is_written(
    store: TaskStore, item: dict[str, Any], field: str
) -> None:
    parent = claimed(store)
    before = snapshot(store)

    with pytest.raises(InvalidTaskData) as refused:
        store.spawn(parent.id, "w1", [item])

    assert refused.value.field == field
    assert snapshot(store) == before


def test_only_the_run_holding_the_parent_spawns(store: TaskStore) -> None:
    parent = claimed(store)
    child = {"name": "x.child"}

    with pytest.raises(LeaseLost):
        store.spawn(parent.id, "w2", [child])
    store.cancel(parent.id)
    with pytest.raises(InvalidTransition):
        store.spawn(parent.id, "w1", [child])
    with pytest.raises(TaskNotFound):
        store.spawn("no-such-task", "w1", [child])
    assert store.count(parent_id=parent.id) == 0


def test_a_tree_deeper_than_max_depth_is_refused(store: TaskStore) -> None:
    parent = claimed(store)
    (child,) = spawned(store, parent, {"name": "x.child"})
    child = store.claim(child.id, "w2", LEASE) or child

    with pytest.raises(InvalidTaskData) as refused:
        store.spawn(child.id, "w2", [{"name": "x.grandchild"}], max_depth=1)

    assert refused.value.field == "job"
    assert spawned(store, parent, {"name": "x.child", "key": "b"}, worker="w1")[0].depth == 1


def test_a_listing_by_parent_pages_its_children_and_none_the_roots(store: TaskStore) -> None:
    parent = claimed(store, owner="alice")
    other = claimed(store, "w2", owner="alice")
    children = spawned(store, parent, *({"name": "x.child", "key": str(i)} for i in range(5)))
    spawned(store, other, {"name": "x.child"}, worker="w2")

    first = store.list(parent_id=parent.id, limit=3)
    second = store.list(parent_id=parent.id, limit=3, cursor=first.next_cursor)

    assert [t.id for t in first.tasks + second.tasks] == [t.id for t in reversed(children)]
    assert store.count(parent_id=parent.id) == 5
    assert store.count(parent_id=parent.id, owner="bob") == 0
    assert {t.id for t in store.iterate(parent_id=None)} == {parent.id, other.id}
    assert store.children(parent.id) == [store.get(t.id) for t in children]
    with pytest.raises(InvalidCursor):
        store.list(parent_id=other.id, cursor=first.next_cursor)


def park(store: TaskStore, parent: Task, waits_on: list[str], worker: str = "w1") -> Task | None:
    return store.suspend(parent.id, worker, message="waiting", waits_on=waits_on)


def test_a_parked_run_waits_unclaimable_until_its_children_end(store: TaskStore) -> None:
    parent = claimed(store)
    a, b = spawned(store, parent, {"name": "x.child", "key": "a"}, {"name": "x.child", "key": "b"})

    parked = park(store, parent, [a.id, b.id])

    assert parked is not None
    assert (parked.status, parked.worker_id, parked.waits_on) == (
        TaskStatus.WORKING,
        None,
        [a.id, b.id],
    )
    assert (parked.status_message, parked.suspends, parked.run_at) == ("waiting", 1, None)
    assert parent.id not in {t.id for t in store.unpublished(timedelta(0), limit=100)}
    assert store.claim(parent.id, "w2", LEASE) is None
    ended(store, a)
    assert store.wake([parent.id]) == []  # b is live
    ended(store, b, TaskStatus.FAILED)

    (woken,) = store.wake([parent.id])

    assert (woken.waits_on, woken.status_message, woken.worker_id) == (None, None, None)
    assert store.wake([parent.id]) == []
    assert parent.id in {t.id for t in store.unpublished(timedelta(0), limit=100)}
    assert store.claim(parent.id, "w2", LEASE) is not None


def test_a_park_with_nothing_live_to_wait_for_writes_nothing(store: TaskStore) -> None:
    parent = claimed(store)
    (child,) = spawned(store, parent, {"name": "x.child"})
    ended(store, child, TaskStatus.CANCELLED)
    before = store.get(parent.id)

    assert park(store, parent, [child.id]) is None
    assert park(store, parent, []) is None
    assert store.get(parent.id) == before
    with pytest.raises(LeaseLost):
        park(store, parent, [], worker="w2")


def test_an_empty_wait_waits_for_every_child(store: TaskStore) -> None:
    parent = claimed(store)
    a, b = spawned(store, parent, {"name": "x.child", "key": "a"}, {"name": "x.child", "key": "b"})
    assert park(store, parent, []) is not None
    ended(store, a)

    assert store.wake([parent.id]) == []
    ended(store, b)
    assert [t.id for t in store.wake([parent.id])] == [parent.id]


def test_the_sweep_wakes_a_parent_whose_waker_never_came(store: TaskStore) -> None:
    parent = claimed(store)
    (child,) = spawned(store, parent, {"name": "x.child"})
    park(store, parent, [child.id])
    assert store.wake_due() == []

    ended(store, child)  # and whoever ended it died before waking the parent

    assert [t.id for t in store.wake_due()] == [parent.id]
    assert store.wake_due() == []


@pytest.mark.parametrize("repetition", range(10))
def test_two_last_children_ending_at_once_wake_their_parent_exactly_once(
    store: TaskStore, repetition: int
) -> None:
    parent = claimed(store)
    children = spawned(store, parent, *({"name": "x.child", "key": str(i)} for i in range(2)))
    for child in children:
        store.claim(child.id, f"w-{child.id}", LEASE)
    park(store, parent, [])

    def end_and_wake(index: int) -> list[Task]:
        child = children[index]
        store.report(child.id, f"w-{child.id}", status=TaskStatus.COMPLETED)
        return store.wake([parent.id])

    woken = [future.result() for future in race(2, end_and_wake)]

    assert sum(len(w) for w in woken) + len(store.wake_due()) == 1
    assert store.get(parent.id).waits_on is None


def test_cancelling_a_parent_cancels_its_live_descendants(store: TaskStore) -> None:
    parent = claimed(store)
    done, running, queued = spawned(
        store, parent, *({"name": "x.child", "key": k} for k in ("done", "running", "queued"))
    )
    ended(store, done)
    running = store.claim(running.id, "w2", LEASE) or running
    (grandchild,) = spawned(store, running, {"name": "x.grandchild"}, worker="w2")

    cancelled = store.cancel_tree(parent.id, reason="no longer needed")

    assert cancelled[0].id == parent.id
    assert {t.id for t in cancelled[1:]} == {running.id, queued.id, grandchild.id}
    for task in cancelled[1:]:
        current = store.get(task.id)
        assert (current.status, current.worker_id) == (TaskStatus.CANCELLED, None)
        assert current.status_message == f"ended with task {parent.id} above it (cancelled)"
    assert store.get(done.id).status is TaskStatus.COMPLETED
    assert store.count(parent_id=parent.id, status=["submitted", "working"]) == 0


def test_a_failed_parent_cancels_its_children_and_a_completed_one_does_not(
    store: TaskStore,
) -> None:
    failed = claimed(store)
    completed = claimed(store, "w2")
    (orphaned,) = spawned(store, failed, {"name": "x.child"})
    (detached,) = spawned(store, completed, {"name": "x.child"}, worker="w2")

    store.report(failed.id, "w1", status=TaskStatus.FAILED, error={"type": "E", "message": ""})
    store.report(completed.id, "w2", status=TaskStatus.COMPLETED)

    assert store.get(orphaned.id).status is TaskStatus.CANCELLED
    assert store.get(detached.id).status is TaskStatus.SUBMITTED


def test_the_sweep_cancels_children_whose_parents_cascade_never_ran(store: TaskStore) -> None:
    parent = claimed(store)
    (child,) = spawned(store, parent, {"name": "x.child"})
    (grandchild,) = spawned(
        store, store.claim(child.id, "w2", LEASE) or child, {"name": "x.g"}, worker="w2"
    )
    store._cancel_descendants = lambda task_id, reason: []  # type: ignore[method-assign]
    store.cancel(parent.id)
    del store._cancel_descendants  # type: ignore[attr-defined]
    assert store.get(child.id).status is TaskStatus.WORKING

    cancelled = store.cancel_orphans()

    assert [t.id for t in cancelled] == [child.id, grandchild.id]
    assert store.get(grandchild.id).status is TaskStatus.CANCELLED
    assert store.cancel_orphans() == []
