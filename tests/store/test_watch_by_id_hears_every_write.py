"""PostgreSQL announces every write to a task a watch follows by id, and only those.

Terminal and parked statuses are always announced (NOTIFY); a claim, a progress
report or an artifact is announced only while a row of ``queuestore_watches``
marks its task, so that a watch by id (an A2A ``SubscribeToTask``, an HTTP
stream of one task) hears of it at once rather than at the feed's next poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from sqlalchemy import text

from queuestore import Artifact, SqlTaskStore, StoreUnavailable, Task, TaskStatus
from queuestore.aio import AsyncTaskStore
from queuestore.core.watch import Listener, StatusChange, Watch

from .support import StoreFactory

pytestmark = pytest.mark.parametrize(
    "backend", [pytest.param("postgres", marks=pytest.mark.postgres)]
)

WAIT = 10.0
"""Seconds a test waits for what it expects; far longer than a poll when the poll is cut."""


def heard(listen: Listener, task_id: str) -> list[StatusChange]:
    """Every announcement until one for ``task_id`` (and what arrives just after it)."""
    notes: list[StatusChange] = []
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        notes += listen(deadline - time.monotonic())
        if any(changed == task_id for changed, _ in notes):
            return notes + listen(0.2)
    pytest.fail(f"no announcement of {task_id}; heard {notes}")


def working(store: SqlTaskStore) -> Task:
    task = store.create("tests.job")
    return store.update(task.id, status=TaskStatus.WORKING)


def marks(store: SqlTaskStore, *task_ids: str) -> dict[str, bool]:
    """The marks of ``task_ids``: whether each is still live."""
    with store.engine.connect() as connection:
        rows = connection.execute(
            text("SELECT task_id, until > now() FROM queuestore_watches WHERE task_id = ANY(:ids)"),
            {"ids": list(task_ids)},
        )
        return dict(rows.all())


def stores(make_store: StoreFactory) -> tuple[SqlTaskStore, SqlTaskStore]:
    watcher, writer = make_store(), make_store()
    assert isinstance(watcher, SqlTaskStore)
    assert isinstance(writer, SqlTaskStore)
    return watcher, writer


def test_every_write_to_a_task_watched_by_id_is_announced_and_no_other(
    make_store: StoreFactory,
) -> None:
    watcher, writer = stores(make_store)
    followed, other = working(writer), working(writer)
    with watcher.subscribe() as listen, watcher.watch(task_ids=[followed.id]):
        listen(0.1)
        writer.update(other.id, progress=0.5)
        writer.update(followed.id, progress=0.5, status_message="half way")
        notes = heard(listen, followed.id)
        writer.add_artifact(followed.id, Artifact(artifact_id="a", parts=["x"]))
        notes += heard(listen, followed.id)

    assert [note for note in notes if note[0] == followed.id] == [(followed.id, "working")] * 2
    assert all(changed != other.id for changed, _ in notes)


def test_a_watch_by_id_gets_a_progress_write_without_waiting_for_the_poll(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "queuestore.core.watch.POLL_INTERVAL", 60.0
    )  # only an announcement wakes it
    watcher, writer = stores(make_store)
    task = working(writer)
    with watcher.watch(task_ids=[task.id]) as changes:
        time.sleep(0.2)  # the reader's first read is behind it: it now waits on LISTEN
        written = writer.update(task.id, progress=0.25)
        delivered = next_version(changes, written.version)

    assert delivered.progress == 0.25


def test_the_async_twin_marks_its_tasks_on_the_loops_connections(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("queuestore.core.watch.POLL_INTERVAL", 60.0)
    watcher, writer = stores(make_store)
    task = working(writer)

    async def follow() -> Task | None:
        async with (
            watcher.open_async(),
            AsyncTaskStore(watcher).watch(task_ids=[task.id]) as changes,
        ):
            await asyncio.sleep(0.2)
            written = await asyncio.to_thread(writer.update, task.id, progress=0.75)
            deadline = time.monotonic() + WAIT
            while (left := deadline - time.monotonic()) > 0:
                change = await changes.get(timeout=left)
                if change is not None and change.version >= written.version:
                    return change
        return None

    delivered = asyncio.run(follow())
    assert delivered is not None
    assert delivered.progress == 0.75


def test_marks_are_renewed_while_the_watch_is_open_and_run_out_after(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("queuestore.core.watch.MARK_SECONDS", 1.0)
    monkeypatch.setattr("queuestore.core.watch.MARK_RENEWAL", 0.2)
    monkeypatch.setattr("queuestore.core.watch.POLL_INTERVAL", 0.1)
    watcher, writer = stores(make_store)
    task = working(writer)
    with watcher.watch(task_ids=[task.id]):
        assert marks(writer, task.id) == {task.id: True}
        time.sleep(1.6)  # past the first mark's minute (here, second)
        assert marks(writer, task.id) == {task.id: True}
    time.sleep(1.2)

    assert marks(writer, task.id) == {task.id: False}
    with watcher.subscribe() as listen:
        listen(0.1)
        writer.update(task.id, progress=0.5)
        writer.update(task.id, status=TaskStatus.COMPLETED)  # always announced
        notes = heard(listen, task.id)
    assert [note for note in notes if note[0] == task.id] == [(task.id, "completed")]


def test_a_mark_is_only_pushed_later_and_the_ones_run_out_are_dropped(
    make_store: StoreFactory,
) -> None:
    watcher, _ = stores(make_store)
    watcher._watch_tasks(["run-out"], -1.0)
    assert marks(watcher, "run-out") == {"run-out": False}
    watcher._watch_tasks(["long", "short"], 600.0)
    assert marks(watcher, "run-out", "long", "short") == {"long": True, "short": True}
    watcher._watch_tasks(["short"], -1.0)  # another process, watching more briefly

    assert marks(watcher, "run-out", "long", "short") == {"long": True, "short": True}


def test_a_watch_opens_and_delivers_when_its_tasks_cannot_be_marked(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    watcher, writer = stores(make_store)
    task = working(writer)

    def refused(*args: Any) -> None:
        raise StoreUnavailable("database unavailable: refused")

    monkeypatch.setattr(watcher._feed, "_watch_tasks", refused)
    with (
        caplog.at_level(logging.WARNING, "queuestore.core.watch"),
        watcher.watch(task_ids=[task.id]) as changes,
    ):
        written = writer.update(task.id, progress=0.5)
        delivered = next_version(changes, written.version)

    assert delivered.progress == 0.5
    assert "could not mark 1 watched tasks" in caplog.text


def next_version(changes: Watch, version: int) -> Task:
    deadline = time.monotonic() + WAIT
    while (left := deadline - time.monotonic()) > 0:
        change = changes.get(timeout=left)
        if change is not None and change.version >= version:
            return change
    pytest.fail(f"version {version} was not delivered within {WAIT} s")
