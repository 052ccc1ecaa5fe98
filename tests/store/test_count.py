"""count and cursor_after: a listing's size and a resumed listing, with the same filters."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from queuestore import InvalidTaskData, TaskStatus, TaskStore
from queuestore.aio import AsyncTaskStore


def test_count_applies_every_filter_and_the_owner_inside_the_query(store: TaskStore) -> None:
    alice = [store.create("a.b", owner="alice", context_id="c1") for _ in range(3)]
    store.create("a.b", owner="bob", context_id="c1")
    store.create("other.job", owner="alice")
    store.cancel(alice[0].id)

    assert store.count(owner="alice") == 4
    assert store.count(owner="bob") == 1
    assert store.count(owner=None) == 0
    assert store.count() == 5
    assert store.count(owner="alice", context_id="c1") == 3
    assert store.count(owner="alice", name="other.job") == 1
    assert store.count(owner="alice", status=TaskStatus.CANCELLED) == 1
    assert store.count(owner="alice", status=[]) == 0
    assert store.count(owner="alice", updated_after=alice[0].updated_at) >= 1
    later = datetime.now(UTC) + timedelta(days=1)
    assert store.count(owner="alice", updated_after=later) == 0


def test_count_of_an_anonymous_caller_is_zero_when_owners_are_required(make_store) -> None:  # type: ignore[no-untyped-def]
    strict = make_store(require_owner=True)
    strict.create("a.b", owner="alice")
    assert strict.count(owner=None) == 0


def test_count_refuses_a_bad_filter(store: TaskStore) -> None:
    with pytest.raises(InvalidTaskData):
        store.count(status="nonsense")


def test_cursor_after_resumes_a_listing_after_the_given_task(store: TaskStore) -> None:
    for _ in range(5):
        store.create("a.b", owner="alice")
    store.create("a.b", owner="bob")
    first = store.list(owner="alice", limit=2)
    last = first.tasks[-1]

    cursor = store.cursor_after(last.created_at, last.id, owner="alice")
    rest = store.list(owner="alice", limit=10, cursor=cursor)

    assert first.next_cursor is not None
    assert [t.id for t in rest.tasks] == [
        t.id for t in store.list(owner="alice", limit=10, cursor=first.next_cursor).tasks
    ]
    assert len(rest.tasks) == 3
    assert {t.owner for t in rest.tasks} == {"alice"}


def test_cursor_after_is_bound_to_its_filters(store: TaskStore) -> None:
    task = store.create("a.b", owner="alice")
    cursor = store.cursor_after(task.created_at, task.id, owner="alice")
    with pytest.raises(Exception, match="other filters"):
        store.list(owner="bob", cursor=cursor)
    with pytest.raises(InvalidTaskData):
        store.cursor_after(datetime(2026, 1, 1), task.id)


def test_the_async_twin_counts_with_the_same_rules(store: TaskStore) -> None:
    store.create("a.b", owner="alice")
    store.create("a.b", owner="bob")
    twin = AsyncTaskStore(store)
    assert asyncio.run(twin.count(owner="alice")) == 1
    assert asyncio.run(twin.count()) == 2
