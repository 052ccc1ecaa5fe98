"""The worker protocol: claim a task under a lease, keep it alive, and reap it when it dies."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from queuestore import (
    TRANSITIONS,
    Artifact,
    InvalidTaskData,
    InvalidTransition,
    LeaseLost,
    Task,
    TaskError,
    TaskNotFound,
    TaskStatus,
    TaskStore,
)

from .support import reach

LEASE = timedelta(seconds=30)
SECOND = timedelta(seconds=1)


def claimed(store: TaskStore, task_id: str, worker_id: str = "w1") -> Task:
    task = store.claim(task_id, worker_id, LEASE)
    assert task is not None
    assert task.lease_expires_at is not None
    return task


def expire(store: TaskStore, task: Task, **options: int) -> list[Task]:
    """Reap as if the clock had just passed the task's lease."""
    assert task.lease_expires_at is not None
    return store.reap(now=task.lease_expires_at + SECOND, **options)


def test_claim_takes_a_submitted_task_for_one_worker(store: TaskStore) -> None:
    task = store.create("x.y")

    taken = claimed(store, task.id)

    assert taken.status == TaskStatus.WORKING
    assert taken.worker_id == "w1"
    assert taken.attempt == 1
    assert taken.version == task.version + 1
    assert taken.started_at == taken.updated_at
    assert taken.lease_expires_at == taken.updated_at + LEASE
    assert store.get(task.id) == taken


def test_a_claimed_task_cannot_be_claimed_again(store: TaskStore) -> None:
    task = claimed(store, store.create("x.y").id)

    assert store.claim(task.id, "w2", LEASE) is None
    assert store.claim(task.id, "w1", LEASE) is None
    assert store.get(task.id) == task


@pytest.mark.parametrize(
    "status", sorted(set(TaskStatus) - {TaskStatus.SUBMITTED, TaskStatus.WORKING})
)
def test_claim_of_a_parked_or_terminal_task_returns_none(
    store: TaskStore, status: TaskStatus
) -> None:
    task = reach(store, status)

    assert store.claim(task.id, "w1", LEASE) is None
    assert store.get(task.id) == task


def test_claim_of_a_missing_task_returns_none(store: TaskStore) -> None:
    assert store.claim("missing", "w1", LEASE) is None


def test_an_unclaimed_working_task_can_be_claimed(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)
    assert task.worker_id is None

    assert claimed(store, task.id).worker_id == "w1"


def test_heartbeat_extends_the_lease_of_its_holder_only(store: TaskStore) -> None:
    task = claimed(store, store.create("x.y").id)
    assert task.lease_expires_at is not None

    extended = store.heartbeat(task.id, "w1", timedelta(hours=1))
    assert extended.lease_expires_at is not None
    assert extended.lease_expires_at > task.lease_expires_at
    assert extended.version == task.version
    assert store.get(task.id) == extended

    stranger = store.heartbeat(task.id, "w2", timedelta(days=1))
    assert stranger == extended


def test_heartbeat_shows_the_worker_a_cancel(store: TaskStore) -> None:
    task = claimed(store, store.create("x.y").id)
    store.cancel(task.id)

    seen = store.heartbeat(task.id, "w1", LEASE)

    assert seen.status == TaskStatus.CANCELLED
    assert seen.lease_expires_at is None


def test_heartbeat_of_a_deleted_task_raises_task_not_found(store: TaskStore) -> None:
    task = claimed(store, store.create("x.y").id)
    store.delete(task.id)

    with pytest.raises(TaskNotFound):
        store.heartbeat(task.id, "w1", LEASE)


def test_writes_fenced_by_the_holder_succeed(store: TaskStore) -> None:
    task = claimed(store, store.create("x.y").id)

    store.update(task.id, progress=0.5, worker_id="w1")
    store.add_artifact(task.id, Artifact(artifact_id="a"), worker_id="w1")
    done = store.update(task.id, status="completed", result=1, worker_id="w1")

    assert done.status == TaskStatus.COMPLETED
    assert done.worker_id is None


def test_writes_fenced_by_another_worker_raise_lease_lost(store: TaskStore) -> None:
    task = claimed(store, store.create("x.y").id)

    with pytest.raises(LeaseLost):
        store.update(task.id, progress=0.5, worker_id="w2")
    with pytest.raises(LeaseLost):
        store.add_artifact(task.id, Artifact(artifact_id="a"), worker_id="w2")
    assert store.get(task.id) == task


def test_reap_leaves_leases_that_have_not_run_out(store: TaskStore) -> None:
    task = claimed(store, store.create("x.y").id)
    assert task.lease_expires_at is not None

    assert store.reap(now=task.lease_expires_at - SECOND) == []
    assert store.reap() == []
    assert store.get(task.id) == task


def test_reap_releases_a_task_whose_lease_ran_out_for_a_retry(store: TaskStore) -> None:
    task = claimed(store, store.create("x.y").id)

    (retried,) = expire(store, task)

    assert retried.status == TaskStatus.WORKING
    assert (retried.worker_id, retried.lease_expires_at) == (None, None)
    assert retried.attempt == 1
    assert retried.version == task.version + 1
    assert retried.status_message is not None
    assert store.get(task.id) == retried
    assert expire(store, task) == []


def test_after_reap_the_old_worker_is_fenced_out(store: TaskStore) -> None:
    task = claimed(store, store.create("x.y").id)
    expire(store, task)

    with pytest.raises(LeaseLost):
        store.update(task.id, progress=0.9, worker_id="w1")
    with pytest.raises(LeaseLost):
        store.update(task.id, status="completed", result=1, worker_id="w1")
    with pytest.raises(LeaseLost):
        store.add_artifact(task.id, Artifact(artifact_id="late"), worker_id="w1")
    assert store.heartbeat(task.id, "w1", LEASE).worker_id is None

    again = claimed(store, task.id, "w2")
    assert again.attempt == 2
    with pytest.raises(LeaseLost):
        store.update(task.id, progress=0.9, worker_id="w1")


RUN_OUTCOMES = sorted(TRANSITIONS[TaskStatus.WORKING])
"""Every status a run's outcome can carry: parked, finished, failed, cancelled."""


def _outcome(status: TaskStatus) -> dict[str, Any]:
    """What a run writes with ``status``, as ``worker._write_outcome`` would."""
    values: dict[str, Any] = {"status": status, "progress": 1.0, "status_message": "stale run"}
    if status is TaskStatus.COMPLETED:
        values["result"] = {"by": "stale run"}
    if status is TaskStatus.FAILED:
        values["error"] = TaskError(type="RuntimeError", message="stale run")
    return values


@pytest.mark.parametrize("with_artifacts", [False, True], ids=["values", "values+artifacts"])
@pytest.mark.parametrize("status", RUN_OUTCOMES)
def test_an_outcome_from_a_reaped_run_is_refused_once_another_run_holds_the_task(
    store: TaskStore, status: TaskStatus, with_artifacts: bool
) -> None:
    stale = claimed(store, store.create("x.y").id, "w1")
    expire(store, stale)
    current = claimed(store, stale.id, "w2")
    current = store.report(
        current.id,
        "w2",
        known=current,
        artifacts=[(Artifact(artifact_id="log", parts=["w2"]), False)],
        progress=0.4,
        status_message="second run",
    )
    late = [(Artifact(artifact_id="log", parts=["w1"]), True)] if with_artifacts else []

    with pytest.raises(LeaseLost) as refused:
        store.report(stale.id, "w1", known=stale, artifacts=late, **_outcome(status))

    assert refused.value.task_id == stale.id
    assert store.get(stale.id) == current
    done = store.report(current.id, "w2", known=current, status="completed", result="w2")
    assert (done.status, done.result, done.progress) == (TaskStatus.COMPLETED, "w2", 0.4)
    assert [(a.artifact_id, a.parts) for a in done.artifacts] == [("log", ["w2"])]


@pytest.mark.parametrize("status", RUN_OUTCOMES)
def test_an_outcome_from_a_reaped_run_is_refused_before_the_retry_is_claimed(
    store: TaskStore, status: TaskStatus
) -> None:
    stale = claimed(store, store.create("x.y").id, "w1")
    (retried,) = expire(store, stale)

    with pytest.raises(LeaseLost):
        store.report(stale.id, "w1", known=stale, **_outcome(status))

    assert store.get(stale.id) == retried
    assert claimed(store, stale.id, "w2").attempt == 2


def test_reap_retries_until_max_lost_runs_then_fails_with_worker_lost(store: TaskStore) -> None:
    task = store.create("x.y")
    for attempt in (1, 2):
        taken = claimed(store, task.id, f"w{attempt}")
        assert taken.attempt == attempt
        (retried,) = expire(store, taken, max_lost_runs=3)
        assert retried.status == TaskStatus.WORKING

    last = claimed(store, task.id, "w3")
    (failed,) = expire(store, last, max_lost_runs=3)

    assert failed.status == TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.type == "WorkerLost"
    assert failed.attempt == 3
    assert failed.finished_at is not None
    assert failed.worker_id is None
    assert store.get(task.id) == failed
    with pytest.raises(InvalidTransition):
        store.update(task.id, status="completed", worker_id="w3")


def test_reap_with_one_attempt_fails_at_once(store: TaskStore) -> None:
    task = claimed(store, store.create("x.y").id)

    (failed,) = expire(store, task, max_lost_runs=1)

    assert failed.status == TaskStatus.FAILED


def test_reap_leaves_parked_and_finished_tasks_alone(store: TaskStore) -> None:
    parked = claimed(store, store.create("x.y").id)
    store.update(parked.id, status="input_required", worker_id="w1")
    done = claimed(store, store.create("x.y").id)
    store.update(done.id, status="completed", worker_id="w1")
    before = [store.get(parked.id), store.get(done.id)]

    assert expire(store, done) == []
    assert [store.get(parked.id), store.get(done.id)] == before


def test_reap_takes_at_most_limit_tasks(store: TaskStore) -> None:
    tasks = [claimed(store, store.create("x.y").id) for _ in range(3)]
    latest = max(tasks, key=lambda t: t.lease_expires_at)  # type: ignore[arg-type,return-value]

    assert len(expire(store, latest, limit=2)) == 2
    assert len(expire(store, latest, limit=2)) == 1


# -- report: a run's batched write ------------------------------------------


def test_report_applies_values_and_artifact_changes_in_order_as_one_write(
    store: TaskStore,
) -> None:
    task = claimed(store, store.create("x.y").id)
    store.add_artifact(task.id, Artifact(artifact_id="log", parts=["0"]), worker_id="w1")
    known = store.get(task.id)

    written = store.report(
        task.id,
        "w1",
        known=known,
        artifacts=[
            (Artifact(artifact_id="log", parts=["1"]), True),
            (Artifact(artifact_id="new", parts=["draft"]), False),
            ({"artifact_id": "log", "parts": ["2"]}, True),
            (Artifact(artifact_id="new", parts=["final"]), False),
        ],
        progress=0.5,
        status_message="half",
    )

    assert [(a.artifact_id, a.parts) for a in written.artifacts] == [
        ("log", ["0", "1", "2"]),
        ("new", ["final"]),
    ]
    assert (written.progress, written.status_message) == (0.5, "half")
    assert written.version == known.version + 1
    assert written.status is TaskStatus.WORKING
    assert written.worker_id == "w1"


def test_report_with_an_outcome_finishes_the_task_and_releases_the_lease(
    store: TaskStore,
) -> None:
    task = claimed(store, store.create("x.y").id)

    done = store.report(
        task.id,
        "w1",
        known=task,
        artifacts=[(Artifact(artifact_id="out", parts=[1]), False)],
        status="completed",
        result={"ok": True},
        progress=1.0,
    )

    assert done.status is TaskStatus.COMPLETED
    assert done.result == {"ok": True}
    assert done.finished_at is not None
    assert (done.worker_id, done.lease_expires_at) == (None, None)
    assert [a.artifact_id for a in done.artifacts] == ["out"]


def test_report_with_a_stale_copy_merges_into_the_current_artifacts(store: TaskStore) -> None:
    task = claimed(store, store.create("x.y").id)
    store.add_artifact(task.id, Artifact(artifact_id="a", parts=[1]), worker_id="w1")

    written = store.report(
        task.id, "w1", known=task, artifacts=[(Artifact(artifact_id="a", parts=[2]), True)]
    )

    assert written.artifacts[0].parts == [1, 2]


@pytest.mark.parametrize("artifacts", [[], [(Artifact(artifact_id="a"), False)]])
def test_report_is_fenced_by_the_lease_and_refused_once_cancelled(
    store: TaskStore, artifacts: list[tuple[Artifact, bool]]
) -> None:
    task = claimed(store, store.create("x.y").id)

    with pytest.raises(LeaseLost):
        store.report(task.id, "w2", known=task, artifacts=artifacts, progress=0.1)
    store.cancel(task.id)
    with pytest.raises(InvalidTransition):
        store.report(task.id, "w1", known=task, artifacts=artifacts, progress=0.1)
    with pytest.raises(TaskNotFound):
        store.report("no-such-task", "w1", artifacts=artifacts, progress=0.1)
    assert store.get(task.id).progress is None


@pytest.mark.parametrize(
    "bad",
    [
        {"progress": 2.0},
        {"status_message": "a\x00b"},
        {"artifacts": [({"parts": "not a list"}, False)]},
        {"status": "finished"},
        {"result": {1, 2}},
    ],
)
def test_report_refuses_bad_input_and_writes_nothing(
    store: TaskStore, bad: dict[str, object]
) -> None:
    task = claimed(store, store.create("x.y").id)
    good = {"artifacts": [(Artifact(artifact_id="ok"), False)], "progress": 0.5}

    with pytest.raises(InvalidTaskData):
        store.report(task.id, "w1", known=task, **(good | bad))  # type: ignore[arg-type]
    assert store.get(task.id) == task
