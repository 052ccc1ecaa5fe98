"""The store's verbs, as every backend must implement them."""

from __future__ import annotations

import base64
import re
import threading
from datetime import datetime, timedelta

import pytest

from queuestore import (
    UNSET,
    Artifact,
    InvalidTaskData,
    InvalidTransition,
    TaskConflict,
    TaskError,
    TaskNotFound,
    TaskStatus,
    TaskStore,
)

from .support import reach

LEASE = timedelta(minutes=5)
PARKED = {TaskStatus.INPUT_REQUIRED, TaskStatus.AUTH_REQUIRED}


def assert_utc(value: datetime | None) -> None:
    assert value is not None
    assert value.tzinfo is not None
    assert value.utcoffset() == timedelta(0)


# -- create and get ---------------------------------------------------------


def test_create_persists_a_submitted_task_with_defaults(store: TaskStore) -> None:
    task = store.create("reports.build", {"month": "2026-11"})

    assert task.name == "reports.build"
    assert task.input == {"month": "2026-11"}
    assert task.status == TaskStatus.SUBMITTED
    assert (task.owner, task.context_id, task.ttl) == (None, None, None)
    assert (task.status_message, task.progress, task.result, task.error) == (None,) * 4
    assert (task.artifacts, task.metadata, task.answers) == ([], {}, [])
    assert (task.version, task.attempt) == (1, 0)
    assert (task.started_at, task.finished_at) == (None, None)
    assert task.created_at == task.updated_at
    assert store.get(task.id) == task


def test_create_keeps_every_argument(store: TaskStore) -> None:
    task = store.create(
        "reports.build",
        {"a": [1, 2.5, None, True]},
        owner="alice",
        context_id="ctx-1",
        ttl=timedelta(minutes=3),
        metadata={"source": "test"},
        task_id="my-own-id_1",
    )

    assert task.id == "my-own-id_1"
    assert task.owner == "alice"
    assert task.context_id == "ctx-1"
    assert task.ttl == timedelta(minutes=3)
    assert store.get("my-own-id_1") == task


def test_create_returns_what_a_read_gets_back_for_values_a_database_rewrites(
    store: TaskStore,
) -> None:
    # A store returns the task it inserted without reading it back: the values
    # must already be what the database keeps (PostgreSQL's jsonb reorders keys
    # and keeps numbers as decimals; a ttl is cut to the millisecond).
    odd = {"zeta": 1, "alpha": {"é": [1.5, -0.0, 2**64, 1e300, None]}, "": "\u2603"}
    task = store.create(
        "x.y", odd, metadata={"b": True, "a": [odd]}, ttl=timedelta(microseconds=1500)
    )

    assert task.ttl == timedelta(milliseconds=1)
    assert store.get(task.id) == task
    assert store.get(task.id).model_dump() == task.model_dump()


def test_create_without_input_stores_an_empty_object(store: TaskStore) -> None:
    assert store.create("x.y").input == {}


def test_ids_are_url_safe_base64_of_16_random_bytes(store: TaskStore) -> None:
    ids = [store.create("x.y").id for _ in range(20)]

    assert len(set(ids)) == len(ids)
    for task_id in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", task_id)
        assert len(base64.urlsafe_b64decode(task_id + "==")) == 16


def test_a_taken_id_is_a_conflict_and_the_first_task_is_kept(store: TaskStore) -> None:
    first = store.create("x.first", task_id="same")

    with pytest.raises(TaskConflict):
        store.create("x.second", task_id="same")

    assert store.get("same") == first


def test_get_of_an_unknown_id_raises_task_not_found(store: TaskStore) -> None:
    with pytest.raises(TaskNotFound) as raised:
        store.get("nope")

    assert raised.value.task_id == "nope"


def test_metadata_is_kept_verbatim(store: TaskStore) -> None:
    metadata = {
        "nested": {"deeper": {"list": [1, "two", {"three": None}], "empty": {}}},
        "unicode ключ": "значение ✓",
        "emoji 🚀": ["🎉"],
        "": "empty key",
        "id": "not the task id",
        "status": "not the task status",
        "numbers": [0, -1, 2**53 + 1, 0.1, 1e-7],
        "flags": [True, False],
    }
    task = store.create("x.y", metadata=metadata)

    assert task.metadata == metadata
    assert store.get(task.id).metadata == metadata
    assert store.update(task.id, metadata=metadata).metadata == metadata


def test_every_timestamp_is_timezone_aware_utc(store: TaskStore) -> None:
    task = store.create("x.y")
    assert_utc(task.created_at)
    assert_utc(task.updated_at)

    claimed = store.claim(task.id, "w1", LEASE)
    assert claimed is not None
    assert_utc(claimed.started_at)
    assert_utc(claimed.lease_expires_at)

    done = store.update(task.id, status="completed")
    assert_utc(done.finished_at)
    assert done.created_at <= done.started_at <= done.finished_at  # type: ignore[operator]

    for value in (done.created_at, done.updated_at, done.started_at, done.finished_at):
        assert_utc(value)


# -- update -----------------------------------------------------------------


def test_version_goes_up_by_one_on_every_write(store: TaskStore) -> None:
    task = store.create("x.y")
    versions = [task.version]
    task = store.claim(task.id, "w1", LEASE) or task
    versions.append(task.version)
    versions.append(store.update(task.id, progress=0.1).version)
    versions.append(store.add_artifact(task.id, Artifact(artifact_id="a")).version)
    versions.append(store.update(task.id, status="input_required").version)
    versions.append(store.provide_input(task.id, "yes").version)
    versions.append(store.cancel(task.id).version)

    assert versions == list(range(1, 8))
    assert store.get(task.id).version == 7


def test_update_changes_only_the_fields_given(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING, metadata={"keep": 1})

    updated = store.update(task.id, progress=0.25, status_message="a quarter")
    assert (updated.progress, updated.status_message) == (0.25, "a quarter")
    assert updated.metadata == {"keep": 1}
    assert updated.status == TaskStatus.WORKING

    again = store.update(task.id, progress=UNSET, status_message=None)
    assert again.progress == 0.25
    assert again.status_message is None
    assert again.updated_at >= updated.updated_at
    assert store.get(task.id) == again


def test_update_replaces_metadata_and_records_result_and_error(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING, metadata={"old": True})

    task = store.update(task.id, metadata={"new": [1]})
    assert task.metadata == {"new": [1]}

    done = store.update(task.id, status="completed", result={"rows": 42})
    assert done.result == {"rows": 42}

    other = reach(store, TaskStatus.WORKING)
    failed = store.update(
        other.id, status=TaskStatus.FAILED, error={"type": "ValueError", "message": "bad"}
    )
    assert failed.error == TaskError(type="ValueError", message="bad")
    assert store.get(other.id).error == failed.error


def test_update_accepts_any_json_result(store: TaskStore) -> None:
    for result in (None, 0, "text", [1, "a"], {"nested": {"x": [None]}}):
        task = reach(store, TaskStatus.WORKING)
        assert store.update(task.id, status="completed", result=result).result == result
        assert store.get(task.id).result == result


def test_working_stamps_started_at_once_and_terminal_stamps_finished_at(
    store: TaskStore,
) -> None:
    task = store.create("x.y")
    working = store.update(task.id, status="working")
    assert working.started_at is not None
    assert working.finished_at is None

    parked = store.update(task.id, status="input_required")
    back = store.update(task.id, status="working")
    assert parked.started_at == back.started_at == working.started_at

    done = store.update(task.id, status="completed")
    assert done.finished_at is not None
    assert done.finished_at >= done.started_at  # type: ignore[operator]


def test_update_with_expected_version_is_compare_and_set(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)

    moved = store.update(task.id, progress=0.5, expected_version=task.version)
    assert moved.version == task.version + 1

    with pytest.raises(TaskConflict) as raised:
        store.update(task.id, progress=0.9, expected_version=task.version)
    assert raised.value.expected_version == task.version
    assert raised.value.actual_version == moved.version
    assert store.get(task.id) == moved


def test_update_of_an_unknown_task_raises_task_not_found(store: TaskStore) -> None:
    with pytest.raises(TaskNotFound):
        store.update("missing", progress=0.5)


# -- artifacts and input ----------------------------------------------------


def test_add_artifact_adds_replaces_and_appends(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)

    task = store.add_artifact(task.id, Artifact(artifact_id="log", name="log", parts=["a"]))
    task = store.add_artifact(task.id, {"artifact_id": "chart", "media_type": "image/png"})
    assert [a.artifact_id for a in task.artifacts] == ["log", "chart"]

    task = store.add_artifact(task.id, Artifact(artifact_id="log", parts=["b", "c"]), append=True)
    assert task.artifacts[0].parts == ["a", "b", "c"]
    assert task.artifacts[0].name == "log"

    task = store.add_artifact(task.id, Artifact(artifact_id="log", parts=["z"]))
    assert task.artifacts[0] == Artifact(artifact_id="log", parts=["z"])
    assert [a.artifact_id for a in task.artifacts] == ["log", "chart"]

    task = store.add_artifact(task.id, Artifact(artifact_id="new", parts=[1]), append=True)
    assert [a.artifact_id for a in task.artifacts] == ["log", "chart", "new"]
    assert store.get(task.id).artifacts == task.artifacts


def test_artifact_metadata_is_kept_verbatim(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)
    artifact = Artifact(artifact_id="a", parts=[{"k": [1, None]}], metadata={"ключ": {"x": 1}})

    assert store.add_artifact(task.id, artifact).artifacts == [artifact]
    assert store.get(task.id).artifacts == [artifact]


@pytest.mark.parametrize("status", sorted(TaskStatus))
def test_add_artifact_is_refused_on_terminal_tasks_only(
    store: TaskStore, status: TaskStatus
) -> None:
    task = reach(store, status)
    if status.is_terminal:
        with pytest.raises(InvalidTransition):
            store.add_artifact(task.id, Artifact(artifact_id="late"))
        assert store.get(task.id) == task
    else:
        assert store.add_artifact(task.id, Artifact(artifact_id="a")).status == status


def test_add_artifact_to_an_unknown_task_raises_task_not_found(store: TaskStore) -> None:
    with pytest.raises(TaskNotFound):
        store.add_artifact("missing", Artifact(artifact_id="a"))


@pytest.mark.parametrize("parked", sorted(PARKED))
def test_provide_input_resumes_a_parked_task(store: TaskStore, parked: TaskStatus) -> None:
    task = store.create("x.y")
    store.claim(task.id, "w1", LEASE)
    store.update(task.id, status=parked, status_message="Proceed?")

    first = store.provide_input(task.id, {"answer": "yes"})
    assert first.status == TaskStatus.WORKING
    assert first.answers == [{"answer": "yes"}]
    assert first.status_message is None
    assert first.worker_id is None

    store.update(task.id, status=parked)
    second = store.provide_input(task.id, "again")
    assert second.answers == [{"answer": "yes"}, "again"]


@pytest.mark.parametrize("status", sorted(set(TaskStatus) - PARKED))
def test_provide_input_is_refused_unless_the_task_waits_for_it(
    store: TaskStore, status: TaskStatus
) -> None:
    task = reach(store, status)

    with pytest.raises(InvalidTransition):
        store.provide_input(task.id, "yes")
    assert store.get(task.id) == task


# -- cancel and delete ------------------------------------------------------


def test_cancel_marks_a_live_task_cancelled_with_the_reason(store: TaskStore) -> None:
    task = store.create("x.y")
    store.claim(task.id, "w1", LEASE)

    cancelled = store.cancel(task.id, reason="user asked")
    assert cancelled.status == TaskStatus.CANCELLED
    assert cancelled.status_message == "user asked"
    assert cancelled.finished_at is not None
    assert cancelled.worker_id is None
    assert store.get(task.id) == cancelled


def test_cancel_of_a_terminal_task_raises_invalid_transition(store: TaskStore) -> None:
    task = store.cancel(store.create("x.y").id)

    with pytest.raises(InvalidTransition) as raised:
        store.cancel(task.id)
    assert raised.value.current == "cancelled"
    assert store.get(task.id) == task


def test_cancel_of_an_unknown_task_raises_task_not_found(store: TaskStore) -> None:
    with pytest.raises(TaskNotFound):
        store.cancel("missing")


def test_delete_removes_the_task_and_ignores_absent_ones(store: TaskStore) -> None:
    task = store.create("x.y")
    kept = store.create("x.y")

    store.delete(task.id)
    with pytest.raises(TaskNotFound):
        store.get(task.id)
    store.delete(task.id)
    store.delete("never-existed")

    assert [t.id for t in store.list().tasks] == [kept.id]


# -- wait -------------------------------------------------------------------


def test_wait_returns_a_terminal_task_at_once(store: TaskStore) -> None:
    task = store.cancel(store.create("x.y").id)

    assert store.wait(task.id, timeout=60) == task


def test_wait_returns_when_another_thread_finishes_the_task(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)
    finisher = threading.Timer(0.05, store.update, [task.id], {"status": "completed", "result": 1})
    finisher.start()
    try:
        finished = store.wait(task.id, timeout=60)
    finally:
        finisher.join()

    assert finished.status == TaskStatus.COMPLETED
    assert finished.result == 1


def test_wait_times_out_returning_the_live_task(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)

    assert store.wait(task.id, timeout=0.05) == task


def test_wait_on_an_unknown_task_raises_task_not_found(store: TaskStore) -> None:
    with pytest.raises(TaskNotFound):
        store.wait("missing", timeout=0.01)


# -- listing helpers and the sweep ---------------------------------


def test_iterate_yields_every_matching_task_across_pages(store: TaskStore) -> None:
    ids = {store.create("x.y").id for _ in range(7)}
    store.create("x.other")

    assert {task.id for task in store.iterate(name="x.y", limit=3)} == ids


def test_outbox_backlog_counts_what_the_sweep_would_publish(store: TaskStore) -> None:
    store.create("x.y")
    store.mark_published(store.create("x.y").id)
    store.claim(store.create("x.y").id, "w1", LEASE)
    reach(store, TaskStatus.INPUT_REQUIRED)
    store.cancel(store.create("x.y").id)

    assert store.unpublished_count() == 1
    assert store.unpublished_count(timedelta(hours=1)) == 0  # written just now: within the grace
    with pytest.raises(InvalidTaskData):
        store.unpublished_count(timedelta(seconds=-1))


def test_a_record_is_never_published_nor_counted_in_the_backlog(store: TaskStore) -> None:
    job = store.create("x.y")
    record = store.create("x.y", job=False)
    working = store.update(store.create("x.y", job=False).id, status=TaskStatus.WORKING)
    store.mark_published(record.id)  # even a mark (a sweep racing a create) changes nothing

    due = store.unpublished(timedelta(0), republish_after=timedelta(0))

    assert [task.id for task in due] == [job.id]
    assert store.unpublished_count() == 1
    assert store.get(working.id).status is TaskStatus.WORKING


def test_job_must_be_a_bool_and_a_refused_create_writes_nothing(store: TaskStore) -> None:
    for wrong in ("no", 0, None):
        with pytest.raises(InvalidTaskData, match="job"):
            store.create("x.y", job=wrong, task_id="t-refused")  # type: ignore[arg-type]

    assert store.count() == 0


def test_unpublished_lists_unclaimed_tasks_until_marked(store: TaskStore) -> None:
    fresh = store.create("x.y")
    marked = store.create("x.y")
    claimed = store.create("x.y")
    parked = reach(store, TaskStatus.INPUT_REQUIRED)
    store.mark_published(marked.id)
    store.claim(claimed.id, "w1", LEASE)

    assert [t.id for t in store.unpublished(timedelta(0))] == [fresh.id]
    assert store.unpublished(timedelta(hours=1)) == []
    assert parked.id not in [t.id for t in store.unpublished(timedelta(0))]


def test_a_retried_task_needs_publishing_again(store: TaskStore) -> None:
    task = store.create("x.y")
    store.mark_published(task.id)
    claimed = store.claim(task.id, "w1", LEASE)
    assert claimed is not None
    assert claimed.lease_expires_at is not None

    store.reap(now=claimed.lease_expires_at + timedelta(seconds=1))

    assert [t.id for t in store.unpublished(timedelta(0))] == [task.id]


def test_mark_published_of_an_unknown_task_does_nothing(store: TaskStore) -> None:
    task = store.create("x.y")

    store.mark_published("missing")
    store.mark_published_many([("missing", 1)])

    assert store.get(task.id) == task
    assert [t.id for t in store.unpublished(timedelta(0))] == [task.id]


def test_unpublished_is_oldest_first(store: TaskStore) -> None:
    ids = [store.create("x.y").id for _ in range(3)]

    assert [t.id for t in store.unpublished(timedelta(0), limit=2)] == ids[:2]


def test_created_at_follows_creation_order(store: TaskStore) -> None:
    tasks = [store.create("x.y") for _ in range(5)]

    stamps = [task.created_at for task in tasks]
    assert stamps == sorted(stamps)


def test_mark_published_many_marks_only_tasks_still_at_the_published_version(
    store: TaskStore,
) -> None:
    waiting = store.create("x.y")
    moved_on = store.create("x.y")
    unknown = ("missing", 1)
    store.update(moved_on.id, metadata={"changed": True})

    store.mark_published_many(
        [(waiting.id, waiting.version), (moved_on.id, moved_on.version), unknown]
    )

    assert [t.id for t in store.unpublished(timedelta(0))] == [moved_on.id]


def test_mark_published_with_a_version_is_a_no_op_once_the_task_moved_on(
    store: TaskStore,
) -> None:
    task = store.create("x.y")
    store.update(task.id, metadata={"changed": True})

    store.mark_published(task.id, version=task.version)
    assert [t.id for t in store.unpublished(timedelta(0))] == [task.id]
    store.mark_published(task.id, version=task.version + 1)
    assert store.unpublished(timedelta(0)) == []


def test_mark_published_many_takes_large_batches(store: TaskStore) -> None:
    tasks = [store.create("x.y") for _ in range(1200)]

    store.mark_published_many((t.id, t.version) for t in tasks)

    assert store.unpublished(timedelta(0), limit=10) == []


def test_mark_published_many_refuses_bad_pairs_and_marks_nothing(store: TaskStore) -> None:
    task = store.create("x.y")

    with pytest.raises(InvalidTaskData):
        store.mark_published_many([(task.id, task.version), (task.id, 0)])
    assert [t.id for t in store.unpublished(timedelta(0))] == [task.id]


def test_cancel_without_a_reason_clears_the_runs_status_message(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)
    store.update(task.id, status_message="half way")

    assert store.cancel(task.id).status_message is None
