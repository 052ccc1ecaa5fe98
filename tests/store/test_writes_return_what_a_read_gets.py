"""Writes to a row the writer holds: a run's reports from its copy (``report(known=...)``),
an artifact merged onto the row just read.

A SQL store then reads back only the columns the write sets and takes the rest
from the writer's copy. Whatever it returns must be what a read gets back, and
a copy of a task deleted and created again under the same id must not pass for
the new one. The callers' verbs take no copy: the store reads what it needs.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuestore import Artifact, Task, TaskError, TaskStatus, TaskStore
from queuestore.core.owner import OwnerScope
from queuestore.store.backend import Write
from queuestore.store.sql import codec
from queuestore.store.sql import queries as statements
from queuestore.store.sql.queries import WriteShape

ODD = {"zeta": 1, "alpha": {"é": [1.5, -0.0, 2**64, 1e300, None]}, "": "\u2603"}
"""Values PostgreSQL's jsonb rewrites: key order, a float written as a 301-digit integer."""


LEASE = timedelta(minutes=1)


def held(store: TaskStore, task_id: str | None = None, worker_id: str = "w1") -> Task:
    """A task claimed by ``worker_id``, as its run's copy."""
    task = store.create("x.y", task_id=task_id) if task_id else store.create("x.y")
    claimed = store.claim(task.id, worker_id, LEASE)
    assert claimed is not None
    return claimed


def test_a_report_from_the_runs_copy_returns_what_a_read_gets_back(store: TaskStore) -> None:
    task = held(store)

    written = store.report(
        task.id,
        "w1",
        known=task,
        artifacts=[(Artifact(artifact_id="a", parts=[ODD]), False)],
        status_message="reading",
        progress=0.25,
        result={"b": True, "a": [ODD]},
    )

    read = store.get(task.id)
    assert written == read
    assert written.model_dump() == read.model_dump()
    assert written.status is TaskStatus.WORKING
    assert written.version == task.version + 1
    assert written.updated_at >= task.updated_at


PLAIN = {
    "zeta": 1,
    "alpha": {"é": [1.5, -0.0, 2**64, 1e-7, 123456.789, -9999999999999998.0, None]},
    "": "\u2603",
}
"""Values every store gives back equal, though jsonb reorders the keys."""


def test_a_document_sent_from_the_runs_copy_is_what_a_read_gets_back(store: TaskStore) -> None:
    task = held(store)

    written = store.report(
        task.id,
        "w1",
        known=task,
        artifacts=[(Artifact(artifact_id="a", parts=[PLAIN]), False)],
        result=PLAIN,
    )

    read = store.get(task.id)
    assert written == read
    assert written.model_dump() == read.model_dump()
    assert written.result == PLAIN


@pytest.mark.parametrize(
    ("document", "as_sent"),
    [
        (PLAIN, True),
        ({"a": [1.5e15, -(2**70), "text", None, False]}, True),
        ({"big": 1e16}, False),  # jsonb gives back the integer 10000000000000000
        (ODD, False),
        ({"big": [-1e16]}, False),
        ({"below": [9999999999999998.0, -9999999999999998.0]}, True),
        ({"text": "1e+300"}, True),
        ([[0]] * codec.STORED_AS_SENT_VALUES, False),  # too many values to look through
    ],
)
def test_a_document_is_taken_as_sent_only_when_a_read_gives_it_back_equal(
    document: object, as_sent: bool
) -> None:
    assert codec.stored_as_sent(document) is as_sent


def test_a_failure_reported_from_the_runs_copy_carries_its_typed_error(store: TaskStore) -> None:
    task = held(store)

    failed = store.report(
        task.id,
        "w1",
        known=task,
        artifacts=[(Artifact(artifact_id="a", parts=[1]), False)],
        status=TaskStatus.FAILED,
        error={"type": "Boom", "message": "it broke"},
        result=ODD,
    )

    assert failed.error == TaskError(type="Boom", message="it broke", attempt=task.attempt)
    assert failed.finished_at is not None
    assert failed.worker_id is None
    assert failed == store.get(task.id)


def test_an_artifact_merged_into_the_runs_copy_returns_what_a_read_gets_back(
    store: TaskStore,
) -> None:
    task = held(store)
    first = store.report(
        task.id,
        "w1",
        known=task,
        artifacts=[({"artifact_id": "a", "parts": [{"text": "1"}]}, False)],
    )

    second = store.report(
        task.id,
        "w1",
        known=first,
        artifacts=[(Artifact(artifact_id="a", parts=[{"data": ODD}]), True)],
    )

    assert second == store.get(task.id)
    assert [len(artifact.parts) for artifact in second.artifacts] == [2]


def test_the_runs_copy_sees_a_lease_moved_without_a_new_version(store: TaskStore) -> None:
    claimed = held(store, "leased")
    moved = store.heartbeat("leased", "w1", timedelta(minutes=10))
    assert moved.version == claimed.version  # a heartbeat makes no new version

    written = store.report(
        "leased", "w1", known=claimed, artifacts=[(Artifact(artifact_id="a"), False)], progress=0.5
    )

    assert written.lease_expires_at == moved.lease_expires_at
    assert written == store.get("leased")


def test_a_copy_of_a_deleted_task_does_not_pass_for_the_task_created_again(
    store: TaskStore,
) -> None:
    old = held(store, "reused")
    store.delete("reused")
    again = held(store, "reused")
    assert again.version == old.version  # the copy's version names the new task too
    store.add_artifact("reused", Artifact(artifact_id="new", parts=["the new task's"]))
    again = store.get("reused")
    old = old.model_copy(update={"version": again.version})  # and so does its version now

    written = store.report(
        "reused", "w1", known=old, artifacts=[(Artifact(artifact_id="a"), False)]
    )

    assert written == store.get("reused")
    assert written.created_at == again.created_at
    assert [a.artifact_id for a in written.artifacts] == ["new", "a"]  # merged onto the new task


def test_the_runs_copy_at_another_version_is_not_used(store: TaskStore) -> None:
    task = held(store)
    store.update(task.id, worker_id="w1", status_message="moved on")

    written = store.report(
        task.id, "w1", known=task, artifacts=[(Artifact(artifact_id="a"), False)], progress=0.5
    )

    assert written.status_message == "moved on"
    assert written == store.get(task.id)


def test_a_write_from_a_known_copy_returns_only_the_columns_it_sets() -> None:
    # What makes the write cheap: no whole row built by the server and parsed here.
    base = Task.model_validate(
        {
            "id": "t",
            "name": "x.y",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )
    write = Write(
        scope=OwnerScope(unscoped=True),
        from_statuses=frozenset({TaskStatus.WORKING}),
        status=TaskStatus.COMPLETED,
        values={"result": 1},
        expected_version=1,
        release=True,
        mark_finished=True,
        base=base,
    )
    shape = WriteShape.of(write, announce=True)

    returned = [str(column.key) for column in statements.written_columns(shape)]

    assert shape.based
    assert returned == [
        "status",
        "result",
        "updated_at",
        "finished_at",
        "version",
        "worker_id",
        "lease_expires_at",
    ]
    assert [
        str(column.key) for column in statements.written_columns(shape, ("status", "result"))
    ] == [
        "updated_at",
        "finished_at",
        "version",
        "worker_id",
        "lease_expires_at",
    ]


TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))
"""Any text PostgreSQL can store (no NUL) and UTF-8 can encode (no lone surrogate)."""

json_documents = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1e15, 9999999999999998.0, 1e16, -1e16, 1e300, 5e-324, -0.0, 1e-7])
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
"""JSON values of every type, floats of every magnitude, integers past 64 bits."""


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=json_documents)
def test_what_is_taken_as_sent_is_what_postgresql_gives_back(
    store: TaskStore, document: object
) -> None:
    task = store.update(store.create("x.y").id, status=TaskStatus.WORKING)
    store.update(task.id, result=document)

    read = store.get(task.id).result

    if codec.stored_as_sent(document):
        assert read == document
        assert type(read) is type(document)
