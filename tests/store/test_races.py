"""Racing writers: every status write is compare-and-set, so exactly one of them wins."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from queuestore import (
    Artifact,
    InvalidTransition,
    Task,
    TaskConflict,
    TaskStatus,
    TaskStore,
)

from .support import race, reach

ROUNDS = 5
THREADS = 8


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_cancel_racing_complete_has_exactly_one_winner(store: TaskStore, round_: int) -> None:
    task = reach(store, TaskStatus.WORKING)
    writes = [
        lambda: store.cancel(task.id, reason="user"),
        lambda: store.update(task.id, status="completed", result={"done": True}),
    ]

    futures = race(2, lambda index: writes[index]())

    winners = [f.result() for f in futures if f.exception() is None]
    losers = [f.exception() for f in futures if f.exception() is not None]
    assert len(winners) == 1
    assert len(losers) == 1
    assert isinstance(losers[0], InvalidTransition)
    final = store.get(task.id)
    assert final == winners[0]
    if final.status == TaskStatus.CANCELLED:
        assert (final.result, final.status_message) == (None, "user")
    else:
        assert final.status == TaskStatus.COMPLETED
        assert final.result == {"done": True}
    assert final.version == task.version + 1


def test_workers_racing_to_claim_a_task_have_exactly_one_winner(store: TaskStore) -> None:
    task = store.create("x.y")

    futures = race(THREADS, lambda index: store.claim(task.id, f"w{index}", timedelta(minutes=1)))

    claimed = [f.result() for f in futures if f.result() is not None]
    assert len(claimed) == 1
    winner = claimed[0]
    assert isinstance(winner, Task)
    assert store.get(task.id) == winner
    assert (winner.attempt, winner.version) == (1, 2)
    assert winner.worker_id in {f"w{index}" for index in range(THREADS)}


def test_writers_racing_on_the_same_version_have_exactly_one_winner(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)

    futures = race(
        THREADS,
        lambda index: store.update(
            task.id, progress=index / THREADS, expected_version=task.version
        ),
    )

    errors = [f.exception() for f in futures]
    winners = [f.result() for f, error in zip(futures, errors, strict=True) if error is None]
    assert len(winners) == 1
    conflicts = [error for error in errors if error is not None]
    assert len(conflicts) == THREADS - 1
    for conflict in conflicts:
        assert isinstance(conflict, TaskConflict)
        assert (conflict.expected_version, conflict.actual_version) == (
            task.version,
            task.version + 1,
        )
    assert store.get(task.id) == winners[0]
    assert winners[0].version == task.version + 1


def test_concurrent_artifacts_are_all_kept(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)

    futures = race(
        THREADS, lambda index: store.add_artifact(task.id, Artifact(artifact_id=f"a{index}"))
    )

    assert all(f.exception() is None for f in futures)
    final = store.get(task.id)
    assert sorted(a.artifact_id for a in final.artifacts) == sorted(
        f"a{index}" for index in range(THREADS)
    )
    assert final.version == task.version + THREADS


def test_concurrent_appends_to_one_artifact_keep_every_part(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)

    race(
        THREADS,
        lambda index: store.add_artifact(
            task.id, Artifact(artifact_id="log", parts=[index]), append=True
        ),
    )

    (log,) = store.get(task.id).artifacts
    assert sorted(log.parts) == list(range(THREADS))  # type: ignore[type-var]


def test_progress_writes_racing_cancel_never_land_after_it(store: TaskStore) -> None:
    task = reach(store, TaskStatus.WORKING)

    def write(index: int) -> list[Task]:
        if index == 0:
            return [store.cancel(task.id, reason="cancelled")]
        # Each writer keeps writing until it meets the cancel, so every one tries after it.
        written: list[Task] = []
        while not written or written[-1].status is TaskStatus.WORKING:
            try:
                written.append(
                    store.update(task.id, progress=0.5, status_message=f"{index}.{len(written)}")
                )
            except InvalidTransition:
                break
        return written

    futures = race(THREADS, write)

    (cancelled,) = futures[0].result()
    assert store.get(task.id) == cancelled
    assert cancelled.status_message == "cancelled"
    landed = [written for future in futures[1:] for written in future.result()]
    assert all(written.status is TaskStatus.WORKING for written in landed)
    assert all(written.version < cancelled.version for written in landed)
    assert cancelled.version == task.version + len(landed) + 1


def test_a_report_from_a_stale_copy_merges_onto_the_current_task(store: TaskStore) -> None:
    """A run's stale copy costs one refused write, never a lost artifact."""
    task = store.create("job.artifacts")
    claimed = store.claim(task.id, "w1", timedelta(minutes=1))
    assert claimed is not None
    stale = store.report(task.id, "w1", artifacts=[(Artifact(artifact_id="a", parts=[1]), False)])
    store.add_artifact(task.id, Artifact(artifact_id="b", parts=[2]))

    written = store.report(
        task.id, "w1", known=stale, artifacts=[(Artifact(artifact_id="a", parts=[3]), True)]
    )

    assert [(a.artifact_id, a.parts) for a in written.artifacts] == [("a", [1, 3]), ("b", [2])]
    assert written.version == claimed.version + 3


def test_a_report_from_the_current_copy_writes_once(store: TaskStore) -> None:
    task = store.create("job.artifacts")
    claimed = store.claim(task.id, "w1", timedelta(minutes=1))
    assert claimed is not None
    written = store.report(
        task.id, "w1", known=claimed, artifacts=[(Artifact(artifact_id="a", parts=[1]), False)]
    )
    assert [a.parts for a in written.artifacts] == [[1]]
    assert written.version == claimed.version + 1


def test_a_lease_renewed_after_the_reaper_looked_keeps_its_task(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reaper's write is conditioned on the very lease it found expired."""
    task = store.create("job.lease")
    store.claim(task.id, "worker-1", timedelta(milliseconds=1))
    seen_expired = []
    deadline = time.monotonic() + 5
    while not seen_expired and time.monotonic() < deadline:
        seen_expired = store._expired_leases(None, 10)
    assert [t.id for t in seen_expired] == [task.id]
    store.heartbeat(task.id, "worker-1", timedelta(minutes=5))
    monkeypatch.setattr(store, "_expired_leases", lambda now, limit: seen_expired)

    assert store.reap() == []
    kept = store.get(task.id)
    assert (kept.status, kept.worker_id) == (TaskStatus.WORKING, "worker-1")
