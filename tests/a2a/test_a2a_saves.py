"""Saves from the remembered row (``KnownRows``) on every backend (memory, SQLite, PostgreSQL).

A save of a task the store wrote or read last is one write conditioned on the
remembered version; when anything else moved the row on (another store, a
direct write, a delete and a recreate, another owner) the write is refused and
the save reads the row and applies under the usual rules. The counts are of the
store's primitives: one ``_fetch``, ``_write`` or ``_insert`` is one statement
on an SQL store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from a2a.server.cluster.task_store import ConcurrentTaskModificationError
from a2a.server.cluster.version import TaskVersion
from a2a.types import (
    Artifact,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)

from queuestore import TaskStatus as Status
from queuestore import TaskStore
from queuestore.a2a import QueuestoreTaskStore, VersionedQueuestoreTaskStore
from queuestore.a2a.task_store import SDK_TASK, KnownRows
from tests.a2a.a2a_support import (
    ALICE,
    BOB,
    CANCELED,
    COMPLETED,
    WORKING,
    a2a_task,
    run,
)


class Statements:
    """Counts the store's primitives (one SQL statement each on an SQL store)."""

    def __init__(self, store: TaskStore) -> None:
        self.counts: Counter[str] = Counter()
        for name in ("_insert", "_fetch", "_write"):
            setattr(store, name, self._counted(name, getattr(store, name)))

    def _counted(self, name: str, primitive: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            return primitive(*args, **kwargs)

        return counted

    def take(self) -> dict[str, int]:
        """The counts since the last take, without the zeros."""
        taken = {name: count for name, count in self.counts.items() if count}
        self.counts.clear()
        return taken


def first_save(ours: VersionedQueuestoreTaskStore, task: Task, context: Any = ALICE) -> TaskVersion:
    return run(
        ours.save(task, event=task, prev=None, prev_version=TaskVersion.MISSING, context=context)
    )


def status_save(
    ours: VersionedQueuestoreTaskStore,
    task: Task,
    version: TaskVersion,
    context: Any = ALICE,
) -> TaskVersion:
    event = TaskStatusUpdateEvent(task_id=task.id, context_id="ctx", status=task.status)
    return run(ours.save(task, event=event, prev=None, prev_version=version, context=context))


def test_a_remembered_save_is_one_write(store: TaskStore) -> None:
    statements = Statements(store)
    versioned = VersionedQueuestoreTaskStore(store)
    plain = QueuestoreTaskStore(store)

    first = first_save(versioned, a2a_task("t-v"))
    assert statements.take() == {"_insert": 1}
    second = status_save(versioned, a2a_task("t-v", WORKING, message="reading"), first)
    assert statements.take() == {"_write": 1}
    stored = run(versioned.get("t-v", ALICE))
    assert statements.take() == {"_fetch": 1}
    status_save(versioned, a2a_task("t-v", COMPLETED), stored.version)
    assert statements.take() == {"_write": 1}
    assert second.is_after(first)

    run(plain.save(a2a_task("t-p"), ALICE))  # a new task: the insert, no read
    assert statements.take() == {"_insert": 1}
    run(plain.save(a2a_task("t-p", WORKING, message="reading"), ALICE))
    assert statements.take() == {"_write": 1}
    run(plain.save(a2a_task("t-p", CANCELED), ALICE))  # cancel: one write too
    assert statements.take() == {"_write": 1}

    assert store.get("t-v").status is Status.COMPLETED
    assert store.get("t-p").status is Status.CANCELLED
    assert len(versioned.known) == 0  # terminal rows are not kept


def test_without_a_memory_a_save_reads_first(store: TaskStore) -> None:
    statements = Statements(store)
    plain = QueuestoreTaskStore(store, known_rows=0)

    run(plain.save(a2a_task("t-0"), ALICE))
    assert statements.take() == {"_fetch": 1, "_insert": 1}  # no memory: no insert first
    run(plain.save(a2a_task("t-0", WORKING, message="reading"), ALICE))
    assert statements.take() == {"_fetch": 1, "_write": 1}
    run(plain.save(a2a_task("t-0", COMPLETED), ALICE))
    assert statements.take() == {"_fetch": 1, "_write": 1}

    assert store.get("t-0").status is Status.COMPLETED
    assert len(plain.versioned.known) == 0


def test_a_row_changed_behind_the_stores_back_is_read_and_applied(store: TaskStore) -> None:
    statements = Statements(store)
    ours = QueuestoreTaskStore(store)
    run(ours.save(a2a_task("t-moved", WORKING), ALICE))
    row = store.get("t-moved")
    store.update("t-moved", metadata={**row.metadata, "set_elsewhere": 1})
    statements.take()

    run(ours.save(a2a_task("t-moved", COMPLETED, message="done"), ALICE))

    # The conditioned write is refused (and explained), then read and applied.
    assert statements.take()["_write"] == 2
    after = store.get("t-moved")
    assert after.status is Status.COMPLETED
    assert after.status_message == "done"
    assert after.metadata["set_elsewhere"] == 1  # the stale copy did not overwrite it


def test_a_versioned_save_from_a_stale_version_is_refused_with_a_warm_memory(
    store: TaskStore,
) -> None:
    ours = VersionedQueuestoreTaskStore(store)
    other = VersionedQueuestoreTaskStore(store)  # another replica on the same rows
    first = first_save(ours, a2a_task("t-race"))
    mine = status_save(ours, a2a_task("t-race", WORKING, message="mine"), first)
    stored = run(other.get("t-race", ALICE))
    assert stored.version == mine
    theirs = status_save(other, a2a_task("t-race", WORKING, message="theirs"), mine)

    with pytest.raises(ConcurrentTaskModificationError):
        status_save(ours, a2a_task("t-race", COMPLETED), mine)

    after = store.get("t-race")
    assert TaskVersion(after.version) == theirs
    assert after.status is Status.WORKING
    assert after.status_message == "theirs"
    assert ours.known.get("alice", "t-race") is not None  # the read refreshed it
    assert TaskVersion(ours.known.get("alice", "t-race").version) == theirs
    status_save(ours, a2a_task("t-race", COMPLETED), theirs)  # from the fresh version
    assert store.get("t-race").status is Status.COMPLETED


def test_a_delete_and_a_recreate_of_the_same_id(store: TaskStore) -> None:
    ours = QueuestoreTaskStore(store)
    versioned = ours.versioned
    run(ours.save(a2a_task("t-again"), ALICE))
    run(ours.save(a2a_task("t-again", WORKING, message="first life"), ALICE))

    # Behind the store's back: the row goes and comes back as a job.
    store.delete("t-again")
    store.create("agent.job", owner="alice", context_id="ctx", task_id="t-again")
    run(ours.save(a2a_task("t-again", COMPLETED, message="stale"), ALICE))
    job = store.get("t-again")
    assert job.name == "agent.job"
    assert job.status is Status.SUBMITTED  # a job's status is its worker's
    assert job.status_message is None
    assert versioned.known.get("alice", "t-again") is None  # a job row is never kept

    # Through the store: the delete forgets, the next save creates the task anew.
    store.delete("t-again")
    run(ours.save(a2a_task("t-again", WORKING), ALICE))
    run(ours.delete("t-again", ALICE))
    assert versioned.known.get("alice", "t-again") is None
    version = first_save(versioned, a2a_task("t-again"))
    assert store.get("t-again").name == SDK_TASK
    assert store.get("t-again").status is Status.SUBMITTED

    # A versioned save that remembers the old row while it was recreated elsewhere.
    working = status_save(versioned, a2a_task("t-again", WORKING), version)
    store.delete("t-again")
    store.create(SDK_TASK, owner="alice", context_id="ctx", task_id="t-again")
    with pytest.raises(ConcurrentTaskModificationError):
        status_save(versioned, a2a_task("t-again", COMPLETED), working)
    assert store.get("t-again").status is Status.SUBMITTED


def test_another_owners_id_is_refused_with_a_warm_memory(
    store: TaskStore, caplog: pytest.LogCaptureFixture
) -> None:
    plain = QueuestoreTaskStore(store)
    versioned = plain.versioned
    first = first_save(versioned, a2a_task("t-alice"))
    alices = status_save(versioned, a2a_task("t-alice", WORKING), first)

    with pytest.raises(ConcurrentTaskModificationError):
        run(plain.save(a2a_task("t-alice", COMPLETED), BOB))
    with pytest.raises(ConcurrentTaskModificationError):
        status_save(versioned, a2a_task("t-alice", COMPLETED), alices, BOB)
    with pytest.raises(ConcurrentTaskModificationError):
        first_save(versioned, a2a_task("t-alice"), BOB)

    row = store.get("t-alice")
    assert row.owner == "alice"
    assert row.status is Status.WORKING
    assert TaskVersion(row.version) == alices
    assert versioned.known.get("bob", "t-alice") is None
    assert sum("belongs to another owner" in line for line in caplog.messages) == 2
    status_save(versioned, a2a_task("t-alice", COMPLETED), alices)  # alice's memory is intact
    assert store.get("t-alice").status is Status.COMPLETED


def test_terminal_states_stay_sticky_with_a_warm_memory(
    store: TaskStore, caplog: pytest.LogCaptureFixture
) -> None:
    ours = QueuestoreTaskStore(store)
    run(ours.save(a2a_task("t-sticky", WORKING), ALICE))
    assert ours.versioned.known.get("alice", "t-sticky") is not None
    store.update("t-sticky", status=Status.COMPLETED, result={"ok": True})  # elsewhere

    for late in (WORKING, CANCELED, TaskState.TASK_STATE_FAILED):
        with pytest.raises(ConcurrentTaskModificationError):
            run(ours.save(a2a_task("t-sticky", late, message="late"), ALICE))
    run(ours.save(a2a_task("t-sticky", COMPLETED), ALICE))  # the same end: a no-op

    row = store.get("t-sticky")
    assert row.status is Status.COMPLETED
    assert row.status_message is None
    assert sum("refused a late" in line for line in caplog.messages) == 3
    assert ours.versioned.known.get("alice", "t-sticky") is None


def test_a_cancel_from_a_warm_memory_changes_the_status_only(store: TaskStore) -> None:
    statements = Statements(store)
    ours = VersionedQueuestoreTaskStore(store)
    task = a2a_task("t-keep", WORKING)
    version = first_save(ours, task)
    chunk = TaskArtifactUpdateEvent(
        task_id="t-keep",
        context_id="ctx",
        artifact=Artifact(artifact_id="a", parts=[Part(text="kept")]),
    )
    statements.take()
    version = run(ours.save(task, event=chunk, prev=None, prev_version=version, context=ALICE))
    # An artifact merges into whatever row it finds, so it is applied to a row just read;
    # add_artifact takes no copy from its caller, so it reads the row again to merge.
    assert statements.take() == {"_fetch": 2, "_write": 1}
    stale = a2a_task("t-keep", CANCELED)
    stale.history[0].parts[0].text = "stale"

    run(ours.save(stale, event=None, prev=None, prev_version=version, context=ALICE))

    assert statements.take() == {"_write": 1}
    view = run(ours.get("t-keep", ALICE))
    assert view.task.status.state == CANCELED
    assert [artifact.parts[0].text for artifact in view.task.artifacts] == ["kept"]
    assert [message.parts[0].text for message in view.task.history] == ["hi"]


def test_the_memory_is_bounded_and_forgets_the_least_recent(store: TaskStore) -> None:
    statements = Statements(store)
    ours = VersionedQueuestoreTaskStore(store, known_rows=2)
    versions = {task_id: first_save(ours, a2a_task(task_id)) for task_id in ("t-1", "t-2")}
    run(ours.get("t-1", ALICE))  # t-1 is now the more recent
    versions["t-3"] = first_save(ours, a2a_task("t-3"))

    assert len(ours.known) == 2
    assert ours.known.get("alice", "t-2") is None  # the least recent went
    statements.take()
    status_save(ours, a2a_task("t-3", WORKING), versions["t-3"])
    assert statements.take() == {"_write": 1}
    status_save(ours, a2a_task("t-2", WORKING), versions["t-2"])
    assert statements.take() == {"_fetch": 1, "_write": 1}  # forgotten: read first
    assert len(ours.known) == 2
    assert ours.known.get("alice", "t-1") is None  # t-2 took the place of t-1
    assert ours.known.get("alice", "t-3") is not None
    assert store.get("t-2").status is Status.WORKING


def test_known_rows_must_not_be_negative(store: TaskStore) -> None:
    with pytest.raises(ValueError, match="known_rows"):
        VersionedQueuestoreTaskStore(store, known_rows=-1)
    with pytest.raises(ValueError, match="known_rows"):
        QueuestoreTaskStore(store, known_rows=-1)
    with pytest.raises(ValueError, match="known_rows"):
        QueuestoreTaskStore(VersionedQueuestoreTaskStore(store), known_rows=-1)
    with pytest.raises(ValueError, match="known_rows"):
        KnownRows(-1)
    assert KnownRows(0).capacity == 0


def test_an_older_copy_of_the_same_row_does_not_replace_a_newer_one(store: TaskStore) -> None:
    known = KnownRows(4)
    older = store.create(SDK_TASK, owner="alice", task_id="t-order")
    newer = store.update("t-order", status=Status.WORKING)

    known.remember("alice", newer)
    known.remember("alice", older)  # a read that returned after the save
    assert known.get("alice", "t-order") == newer

    store.delete("t-order")
    again = store.create(SDK_TASK, owner="alice", task_id="t-order")
    known.remember("alice", again)  # a new row of the same id: version 1 again
    assert known.get("alice", "t-order") == again
    known.remember("alice", store.cancel("t-order"))
    assert known.get("alice", "t-order") is None  # terminal: forgotten
