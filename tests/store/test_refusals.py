"""A refused write says why: the error's type, the task, and what the write expected."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from queuestore import (
    ANY,
    UNSET,
    Artifact,
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    TaskConflict,
    TaskNotFound,
    TaskStatus,
    TaskStore,
)
from queuestore.core.models import sources_of
from queuestore.store.base import Listener

from .support import StoreFactory, reach


def test_unset_reads_as_the_public_name() -> None:
    assert repr(UNSET) == "queuestore.UNSET"


def test_a_write_to_a_finished_task_names_the_statuses_it_needed(store: TaskStore) -> None:
    task = reach(store, TaskStatus.COMPLETED)

    with pytest.raises(InvalidTransition) as refused:
        store.cancel(task.id)

    error = refused.value
    assert (error.task_id, error.current, error.requested) == (task.id, "completed", "cancelled")
    assert error.allowed_from == tuple(sorted(sources_of(TaskStatus.CANCELLED)))


def test_a_stale_version_names_both_versions(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)
    store.update(task.id, progress=0.1)

    with pytest.raises(TaskConflict) as refused:
        store.update(task.id, progress=0.2, expected_version=task.version)

    error = refused.value
    assert str(error) == f"task {task.id!r} is at version {task.version + 1}, not {task.version}"
    assert (error.task_id, error.expected_version, error.actual_version) == (
        task.id,
        task.version,
        task.version + 1,
    )


def test_a_write_fenced_to_another_worker_names_the_holder(store: TaskStore) -> None:
    task = store.create("x.y")
    store.claim(task.id, "w1", timedelta(minutes=1))

    with pytest.raises(LeaseLost) as refused:
        store.update(task.id, progress=0.2, worker_id="w2")

    assert refused.value.task_id == task.id
    assert str(refused.value) == f"task {task.id!r} is held by 'w1', not 'w2'"


@pytest.mark.parametrize("verb", ["update", "add_artifact"])
def test_a_write_that_loses_every_race_gives_up_with_a_conflict(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    """Every try is refused though the row matches when looked at: others keep winning."""
    task = reach(store, TaskStatus.WORKING)
    tries: list[Any] = []
    monkeypatch.setattr(store, "_write", lambda task_id, write: tries.append(write))
    write = {
        "update": lambda: store.update(task.id, progress=0.5),
        "add_artifact": lambda: store.add_artifact(task.id, Artifact(artifact_id="a")),
    }[verb]

    with pytest.raises(TaskConflict) as refused:
        write()

    assert refused.value.task_id == task.id
    assert str(refused.value) == f"task {task.id!r} kept changing under a write"
    assert len(tries) == 50


def test_a_current_known_copy_spares_the_read(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = store.claim(store.create("x.y").id, "w1", timedelta(minutes=1))
    assert task is not None
    fetched: list[str] = []
    fetch = store._fetch
    monkeypatch.setattr(
        store, "_fetch", lambda task_id, scope: fetched.append(task_id) or fetch(task_id, scope)
    )

    written = store.report(
        task.id, "w1", known=task, artifacts=[(Artifact(artifact_id="a"), False)]
    )

    assert fetched == []
    assert [a.artifact_id for a in written.artifacts] == ["a"]


def test_a_known_copy_of_another_task_is_not_merged_into_this_one(store: TaskStore) -> None:
    task = store.add_artifact(store.create("x.y").id, Artifact(artifact_id="mine"))
    other = store.add_artifact(store.create("x.y").id, Artifact(artifact_id="theirs"))
    assert other.version == task.version

    claimed = store.claim(task.id, "w1", timedelta(minutes=1))
    assert claimed is not None
    written = store.report(
        task.id, "w1", known=other, artifacts=[(Artifact(artifact_id="new"), False)]
    )

    assert [a.artifact_id for a in written.artifacts] == ["mine", "new"]


def test_any_owner_reads_as_the_public_name() -> None:
    assert repr(ANY) == "queuestore.ANY"


def test_cleanup_needs_a_ttl(store: TaskStore) -> None:
    with pytest.raises(InvalidTaskData) as refused:
        store.cleanup(None)  # type: ignore[arg-type]
    assert str(refused.value) == "ttl: is required: how long finished tasks are kept"


def test_waiting_on_someone_elses_finished_task_finds_nothing(store: TaskStore) -> None:
    task = reach(store, TaskStatus.COMPLETED, owner="alice")

    with pytest.raises(TaskNotFound):
        store.wait(task.id, timeout=5, owner="bob")
    assert store.wait(task.id, timeout=5, owner="alice") == task


def test_a_store_that_requires_owners_says_so(make_store: StoreFactory) -> None:
    with pytest.raises(InvalidTaskData) as refused:
        make_store(require_owner=True).create("x.y")
    assert str(refused.value) == "owner: is required by this store"


def test_wait_returns_a_change_made_while_it_waits_well_before_its_timeout(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = reach(store, TaskStatus.WORKING)
    listening = threading.Event()
    subscribe = store.subscribe

    @contextmanager
    def announced() -> Iterator[Listener]:
        with subscribe() as listen:
            listening.set()
            yield listen

    monkeypatch.setattr(store, "subscribe", announced)
    finisher = threading.Thread(
        target=lambda: listening.wait(5) and store.update(task.id, status="completed")
    )
    finisher.start()
    try:
        # Well under a second: a wait that gave up early would return the live task.
        finished = store.wait(task.id, timeout=0.9)
    finally:
        finisher.join()

    assert finished.status is TaskStatus.COMPLETED
