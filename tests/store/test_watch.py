"""The change feed: every committed write reaches the watches that may see it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest

from queuestore import Artifact, InvalidTaskData, Task, TaskStatus, TaskStore
from queuestore.aio import AsyncTaskStore
from queuestore.core.watch import LOOKBACK, Watch, _Reader

from .support import StoreFactory, reach

WAIT = 10.0
"""Seconds a test waits for a change; the feed's poll delivers well within it."""


def collect_until(changes: Watch, task_id: str, version: int) -> list[Task]:
    """Every delivered snapshot until ``task_id`` reaches ``version``."""
    seen: list[Task] = []
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        task = changes.get(timeout=deadline - time.monotonic())
        if task is None:
            break
        seen.append(task)
        if task.id == task_id and task.version >= version:
            return seen
    pytest.fail(
        f"{task_id} never reached version {version}; seen {[(t.id, t.version) for t in seen]}"
    )


def test_every_kind_of_write_is_delivered_in_version_order(store: TaskStore) -> None:
    task = store.create("tests.job")
    with store.watch() as changes:
        store.update(task.id, status=TaskStatus.WORKING)
        store.update(task.id, progress=0.5, status_message="half way")
        store.add_artifact(task.id, Artifact(artifact_id="a", parts=["x"]))
        last = store.update(task.id, status=TaskStatus.COMPLETED, result={"ok": True})

        seen = [t for t in collect_until(changes, task.id, last.version) if t.id == task.id]

    versions = [t.version for t in seen]
    assert versions == sorted(set(versions))
    assert seen[-1].status == TaskStatus.COMPLETED
    assert seen[-1].result == {"ok": True}
    assert seen[-1].artifacts[0].artifact_id == "a"


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_write_through_another_store_on_the_same_database_is_delivered(
    make_store: StoreFactory,
) -> None:
    watcher, writer = make_store(), make_store()
    task = writer.create("tests.job", owner="alice")
    with watcher.watch(owner="alice") as changes:
        done = reach(writer, TaskStatus.WORKING, owner="alice")
        cancelled = writer.cancel(task.id)
        assert done.id != task.id

        seen = collect_until(changes, task.id, cancelled.version)

    assert seen[-1].status == TaskStatus.CANCELLED


def test_a_watch_sees_only_its_owners_tasks_and_the_ids_it_names(store: TaskStore) -> None:
    with (
        store.watch(owner="alice") as alice,
        store.watch(owner="bob") as bob,
        store.watch(owner=None) as anonymous,
    ):
        alices = store.create("tests.job", owner="alice")
        bobs = store.create("tests.job", owner="bob")
        unowned = store.create("tests.job")
        with store.watch(task_ids=[bobs.id]) as only_bobs:
            marker = store.update(bobs.id, progress=0.1)
            seen_by_id = collect_until(only_bobs, bobs.id, marker.version)
        seen_by_alice = collect_until(alice, alices.id, alices.version)
        seen_by_bob = collect_until(bob, bobs.id, marker.version)
        seen_anonymously = collect_until(anonymous, unowned.id, unowned.version)

    assert {t.owner for t in seen_by_alice} == {"alice"}
    assert {t.owner for t in seen_by_bob} == {"bob"}
    assert {t.owner for t in seen_anonymously} == {None}
    assert {t.id for t in seen_by_id} == {bobs.id}


def test_an_anonymous_watch_on_a_store_that_requires_owners_sees_nothing(
    make_store: StoreFactory,
) -> None:
    store = make_store(require_owner=True)
    with store.watch(owner=None) as anonymous, store.watch(owner="alice") as alice:
        task = store.create("tests.job", owner="alice")
        collect_until(alice, task.id, task.version)

        assert anonymous.get(timeout=0.2) is None


def test_a_malformed_id_is_refused_before_anything_is_watched(store: TaskStore) -> None:
    with pytest.raises(InvalidTaskData):
        store.watch(task_ids=["not an id!"])


def test_a_backlog_larger_than_one_read_is_delivered_whole(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("queuestore.core.watch.BATCH", 3)
    with store.watch(owner="bulk") as changes:
        created = [store.create("tests.job", owner="bulk") for _ in range(10)]
        seen: set[str] = set()
        deadline = time.monotonic() + WAIT
        while len(seen) < len(created) and time.monotonic() < deadline:
            task = changes.get(timeout=deadline - time.monotonic())
            if task is not None:
                seen.add(task.id)

    assert seen == {task.id for task in created}


def test_one_reader_serves_every_watch_and_stops_with_the_last(store: TaskStore) -> None:
    first, second = store.watch(), store.watch()
    assert first.feed is second.feed

    def readers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == first.feed.thread_name]

    with first, second:
        assert len(readers()) == 1
    deadline = time.monotonic() + WAIT
    while readers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert readers() == []


def test_the_async_twin_delivers_the_same_changes(store: TaskStore) -> None:
    astore = AsyncTaskStore(store)

    async def scenario() -> tuple[Task | None, Task | None]:
        task = await astore.create("tests.job", owner="alice")
        async with astore.watch(owner="alice", task_ids=[task.id]) as changes:
            cancelled = await astore.cancel(task.id, owner="alice")
            latest: Task | None = None
            while latest is None or latest.version < cancelled.version:
                latest = await changes.get(timeout=WAIT)
                assert latest is not None
            quiet = await changes.get(timeout=0.1)
        return latest, quiet

    latest, quiet = asyncio.run(scenario())
    assert latest is not None
    assert latest.status == TaskStatus.CANCELLED
    assert quiet is None


def _task(task_id: str, version: int, updated_at: datetime) -> Task:
    return Task(
        id=task_id,
        name="tests.job",
        version=version,
        created_at=updated_at,
        updated_at=updated_at,
    )


class _Rows:
    """A fake table: rows appear when a test commits them, in any timestamp order."""

    def __init__(self) -> None:
        self.rows: list[Task] = []
        self.seen: list[dict[str, int]] = []

    def read(
        self,
        since: datetime,
        after: tuple[datetime, str] | None,
        limit: int,
        seen: Mapping[str, int],
    ) -> list[Task]:
        self.seen.append(dict(seen))
        rows = sorted(
            (t for t in self.rows if t.updated_at > since and seen.get(t.id, 0) < t.version),
            key=lambda t: (t.updated_at, t.id),
        )
        if after is not None:
            rows = [t for t in rows if (t.updated_at, t.id) > after]
        return rows[:limit]


def test_a_write_that_commits_after_a_newer_one_is_still_read() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = _Rows()
    reader = _Reader(rows.read, lambda: start)
    assert reader.read() == []

    rows.rows.append(_task("quick", 1, start + timedelta(milliseconds=20)))
    assert [t.id for t in reader.read()] == ["quick"]

    # "late" started before "quick" but commits only now, within the lookback.
    rows.rows.append(_task("late", 1, start + timedelta(milliseconds=10)))
    assert [t.id for t in reader.read()] == ["late"]
    assert reader.read() == []


def test_each_read_tells_the_store_the_versions_it_has() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = _Rows()
    reader = _Reader(rows.read, lambda: start)
    rows.rows = [_task("a", 1, start + timedelta(milliseconds=5))]
    assert [t.id for t in reader.read()] == ["a"]
    rows.rows.append(_task("b", 4, start + timedelta(milliseconds=6)))
    assert [t.id for t in reader.read()] == ["b"]

    assert rows.seen == [{}, {"a": 1}]


def test_a_read_of_changes_leaves_out_the_versions_the_reader_has(store: TaskStore) -> None:
    # The feed reads its last seconds again every time: what it has is not sent back.
    kept = store.create("x.y")
    moved = store.create("x.y")
    moved_on = store.update(moved.id, progress=0.5)
    ahead = store.create("x.y")
    new = store.create("x.y")
    seen = {kept.id: kept.version, moved.id: moved.version, ahead.id: 9, "gone": 3}

    read = store._changed_since(kept.created_at - timedelta(seconds=1), None, 500, seen)

    assert [(t.id, t.version) for t in read] == [(moved.id, moved_on.version), (new.id, 1)]
    assert len(store._changed_since(kept.created_at - timedelta(seconds=1), None, 500, {})) == 4


def test_a_version_is_read_once_and_never_after_a_newer_one() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = _Rows()
    reader = _Reader(rows.read, lambda: start)
    rows.rows = [_task("t", 2, start + timedelta(milliseconds=5))]
    assert [(t.id, t.version) for t in reader.read()] == [("t", 2)]

    rows.rows = [_task("t", 2, start + timedelta(milliseconds=5))]
    assert reader.read() == []
    rows.rows = [_task("t", 3, start + LOOKBACK * 3)]
    assert [(t.id, t.version) for t in reader.read()] == [("t", 3)]
