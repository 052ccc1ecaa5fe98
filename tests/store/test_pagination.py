"""Listing: filters inside the query, newest first by (created_at, id), opaque cursors."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import pytest

from queuestore import ANY, InvalidCursor, InvalidTaskData, Task, TaskPage, TaskStatus, TaskStore

from .support import StoreFactory, reach


def pages(store: TaskStore, cursor: str | None = None, **filters: object) -> list[TaskPage]:
    """Every page of a listing from ``cursor`` on, following cursors to the end."""
    result = [store.list(**filters, cursor=cursor)]  # type: ignore[arg-type]
    while result[-1].next_cursor is not None:
        result.append(store.list(**filters, cursor=result[-1].next_cursor))  # type: ignore[arg-type]
    return result


def newest_first(tasks: list[Task]) -> list[str]:
    return [t.id for t in sorted(tasks, key=lambda t: (t.created_at, t.id), reverse=True)]


def test_an_empty_store_lists_one_empty_last_page(store: TaskStore) -> None:
    assert store.list() == TaskPage(tasks=[], next_cursor=None)


def test_pages_are_newest_first_by_created_at_then_id(store: TaskStore) -> None:
    created = [store.create("x.y") for _ in range(25)]

    listed = pages(store, limit=10)

    assert [len(page.tasks) for page in listed] == [10, 10, 5]
    ids = [t.id for page in listed for t in page.tasks]
    assert ids == newest_first(created)
    stamps = [t.created_at for page in listed for t in page.tasks]
    assert stamps == sorted(stamps, reverse=True)


def test_a_full_last_page_has_no_cursor(store: TaskStore) -> None:
    for _ in range(20):
        store.create("x.y")

    assert [len(page.tasks) for page in pages(store, limit=10)] == [10, 10]


def test_the_default_limit_is_50_and_the_largest_is_1000(store: TaskStore) -> None:
    for _ in range(51):
        store.create("x.y")

    assert len(store.list().tasks) == 50
    assert len(store.list(limit=1000).tasks) == 51
    assert len(store.list(limit=1).tasks) == 1


def test_list_filters_by_status_context_name_and_updated_after(store: TaskStore) -> None:
    working = reach(store, TaskStatus.WORKING, name="a.job", context_id="c1")
    done = reach(store, TaskStatus.COMPLETED, name="b.job", context_id="c1")
    fresh = store.create("a.job", context_id="c2")

    def ids(**filters: object) -> set[str]:
        return {t.id for t in store.list(**filters).tasks}  # type: ignore[arg-type]

    assert ids(status="working") == {working.id}
    assert ids(status=TaskStatus.COMPLETED) == {done.id}
    assert ids(status=["working", TaskStatus.SUBMITTED]) == {working.id, fresh.id}
    assert ids(status=[]) == set()
    assert ids(context_id="c1") == {working.id, done.id}
    assert ids(name="a.job") == {working.id, fresh.id}
    assert ids(name="a.job", context_id="c1", status="working") == {working.id}
    assert ids(updated_after=done.updated_at) == {fresh.id}
    assert ids(updated_after=fresh.updated_at) == set()

    touched = store.update(working.id, progress=0.5)
    assert ids(updated_after=fresh.updated_at) == {touched.id}


def test_list_and_count_keep_the_tasks_created_in_a_span(store: TaskStore) -> None:
    first, middle, last = (store.create("a.job", owner="alice") for _ in range(3))
    span = {"created_after": first.created_at, "created_before": last.created_at}

    assert [t.id for t in store.list(**span).tasks] == [middle.id]
    assert store.count(**span) == 1
    assert store.count(owner="alice", created_after=middle.created_at) == 1
    assert [t.id for t in store.list(created_before=middle.created_at).tasks] == [first.id]
    paged = store.list(created_before=last.created_at, limit=1)
    assert paged.next_cursor is not None
    with pytest.raises(InvalidCursor):
        store.list(created_before=middle.created_at, cursor=paged.next_cursor)
    with pytest.raises(InvalidTaskData, match="created_after"):
        store.list(created_after=datetime(2026, 1, 1))  # naive


def test_tasks_updated_while_paging_are_neither_skipped_nor_repeated(store: TaskStore) -> None:
    created = [store.create("x.y") for _ in range(30)]
    seen: list[str] = []
    cursor = None
    while True:
        page = store.list(limit=7, cursor=cursor)
        seen.extend(t.id for t in page.tasks)
        # Touch everything between pages, in an order unrelated to the listing's.
        for index, task in enumerate(reversed(created)):
            if index % 3 == 0:
                store.update(task.id, progress=0.5)
            elif index % 3 == 1 and store.get(task.id).status == TaskStatus.SUBMITTED:
                store.update(task.id, status="working")
        if page.next_cursor is None:
            break
        cursor = page.next_cursor

    assert sorted(seen) == sorted(t.id for t in created)
    assert len(seen) == len(set(seen))


def test_paging_while_another_thread_writes_skips_and_repeats_nothing(
    store: TaskStore,
) -> None:
    created = [store.create("x.y") for _ in range(40)]
    stop = threading.Event()
    writes = [0]  # only the writer thread adds to it

    def keep_writing() -> None:
        while not stop.is_set():
            for task in created:
                store.update(task.id, progress=0.5, status_message="busy")
                writes[0] += 1

    def wrote_since(count: int) -> bool:
        deadline = time.monotonic() + 5
        while writes[0] <= count and time.monotonic() < deadline:
            time.sleep(0.001)
        return writes[0] > count

    writer = threading.Thread(target=keep_writing)
    writer.start()
    seen: list[str] = []
    overlapped = []
    try:
        cursor = None
        while True:
            before = writes[0]
            page = store.list(limit=3, cursor=cursor)
            seen.extend(t.id for t in page.tasks)
            overlapped.append(wrote_since(before))  # the next page reads a changed table
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    finally:
        stop.set()
        writer.join()

    assert overlapped == [True] * len(overlapped)
    assert sorted(seen) == sorted(t.id for t in created)
    assert len(seen) == len(set(seen))


def test_deleting_and_creating_while_paging_disturbs_nothing_else(store: TaskStore) -> None:
    created = [store.create("x.y") for _ in range(12)]
    first = store.list(limit=4)
    store.delete(created[0].id)  # the oldest, not listed yet
    added = store.create("x.y")

    rest = pages(store, limit=4, cursor=first.next_cursor)

    seen = [t.id for t in first.tasks] + [t.id for page in rest for t in page.tasks]
    assert seen == newest_first(created[1:])
    assert added.id not in seen


def test_a_cursor_is_bound_to_its_filters(store: TaskStore) -> None:
    for owner in ("alice", "bob"):
        for _ in range(3):
            store.create("x.y", owner=owner, context_id="c")
    cursor = store.list(owner="alice", limit=2).next_cursor
    assert cursor is not None

    assert len(store.list(owner="alice", limit=2, cursor=cursor).tasks) == 1
    assert len(store.list(owner="alice", limit=50, cursor=cursor).tasks) == 1
    for other in (
        {"owner": "bob"},
        {"owner": ANY},
        {"owner": None},
        {"owner": "alice", "status": "submitted"},
        {"owner": "alice", "context_id": "c"},
        {"owner": "alice", "name": "x.y"},
        {"owner": "alice", "updated_after": store.list().tasks[-1].created_at},
    ):
        with pytest.raises(InvalidCursor):
            store.list(**other, cursor=cursor)  # type: ignore[arg-type]


def test_a_cursor_is_bound_to_filters_whatever_characters_they_hold(store: TaskStore) -> None:
    for name in ("b|c", "c"):
        for context_id in ("a", "a|b"):
            for _ in range(2):
                store.create(name, context_id=context_id)
    unowned = store.list(owner=None, limit=1).next_cursor
    piped = store.list(context_id="a", name="b|c", limit=1).next_cursor
    assert unowned is not None
    assert piped is not None

    with pytest.raises(InvalidCursor):
        store.list(owner="", limit=1, cursor=unowned)
    with pytest.raises(InvalidCursor):
        store.list(context_id="a|b", name="c", limit=1, cursor=piped)


def tampered_cursors(cursor: str) -> list[object]:
    flipped = cursor[:10] + ("A" if cursor[10] != "A" else "B") + cursor[11:]
    return [
        flipped,
        cursor[:-4],
        cursor + "AAAA",
        cursor[::-1],
        "",
        "not a cursor",
        "x" * 2000,
        "ünïcode",
        123,
        b"bytes",
    ]


def test_a_tampered_or_malformed_cursor_raises_invalid_cursor(store: TaskStore) -> None:
    for _ in range(3):
        store.create("x.y")
    cursor = store.list(limit=1).next_cursor
    assert cursor is not None

    for bad in tampered_cursors(cursor):
        with pytest.raises(InvalidCursor):
            store.list(limit=1, cursor=bad)  # type: ignore[arg-type]


def test_cursors_are_signed_per_store_unless_the_secret_is_shared(
    make_store: StoreFactory,
) -> None:
    first = make_store(cursor_secret="shared")
    for _ in range(3):
        first.create("x.y")
    cursor = first.list(limit=1).next_cursor
    assert cursor is not None

    with pytest.raises(InvalidCursor):
        make_store().list(limit=1, cursor=cursor)
    make_store(cursor_secret="shared").list(limit=1, cursor=cursor)


def test_expired_cleanup_between_pages_skips_nothing_live(store: TaskStore) -> None:
    live = [store.create("x.y") for _ in range(6)]
    done = [reach(store, TaskStatus.COMPLETED) for _ in range(6)]
    first = store.list(limit=4)

    store.cleanup(timedelta(0))
    rest = pages(store, limit=4, cursor=first.next_cursor)

    seen = {t.id for t in first.tasks} | {t.id for page in rest for t in page.tasks}
    assert {t.id for t in live} <= seen
    assert seen <= {t.id for t in live + done}
