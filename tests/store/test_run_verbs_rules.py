"""The worker protocol's finer rules: defaults, owned tasks, and the reaper's guards."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from queuestore import Artifact, InvalidTaskData, TaskNotFound, TaskStatus, TaskStore
from queuestore.core.owner import OwnerScope
from queuestore.store.backend import Write
from queuestore.store.runs import stops_a_run

from .support import StoreFactory

LEASE = timedelta(seconds=30)
SECOND = timedelta(seconds=1)


def _claimed(store: TaskStore, task_id: str, worker_id: str = "w1") -> None:
    assert store.claim(task_id, worker_id, LEASE) is not None


def test_the_heartbeat_of_a_run_that_lost_an_owned_task_returns_it(
    make_store: StoreFactory,
) -> None:
    store = make_store(require_owner=True)
    task = store.create("x.y", owner="alice")
    _claimed(store, task.id)

    seen = store.heartbeat(task.id, "w2", LEASE)

    assert (seen.id, seen.worker_id) == (task.id, "w1")
    store.delete(task.id)
    with pytest.raises(TaskNotFound) as gone:
        store.heartbeat(task.id, "w1", LEASE)
    assert gone.value.task_id == task.id


def test_the_reaper_recovers_owned_tasks_by_default_three_runs_then_fails(
    make_store: StoreFactory,
) -> None:
    store = make_store(require_owner=True)
    task = store.create("x.y", owner="alice")
    for run in (1, 2, 3):
        _claimed(store, task.id, f"w{run}")
        lease = store.get(task.id).lease_expires_at
        assert lease is not None
        (reaped,) = store.reap(now=lease + SECOND)

    assert reaped.status is TaskStatus.FAILED
    assert reaped.owner == "alice"
    assert reaped.error is not None
    assert reaped.error.message == "worker w3 stopped renewing its lease; 3 of 3 runs lost"


def test_the_reaper_takes_100_tasks_by_default(store: TaskStore) -> None:
    for _ in range(101):
        _claimed(store, store.create("x.y").id)
    later = store.get(store.list(limit=1).tasks[0].id).lease_expires_at
    assert later is not None

    assert len(store.reap(now=later + SECOND)) == 100
    assert len(store.reap(now=later + SECOND)) == 1


@pytest.mark.parametrize("max_lost_runs", [1, 3], ids=["would-fail", "would-retry"])
@pytest.mark.parametrize("meanwhile", ["reported", "renewed"])
def test_a_run_heard_from_after_the_reaper_looked_keeps_its_task(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch, max_lost_runs: int, meanwhile: str
) -> None:
    """The reaper's write is conditioned on the version and the lease it found expired."""
    task = store.create("x.y")
    _claimed(store, task.id)
    claimed = store.get(task.id)
    assert claimed.lease_expires_at is not None
    # The reaper found this lease expired; then the run was heard from.
    monkeypatch.setattr(store, "_expired_leases", lambda now, limit: [claimed])
    if meanwhile == "reported":
        store.report(task.id, "w1", progress=0.5)  # a new version, the same lease
    else:
        store.heartbeat(task.id, "w1", LEASE * 2)  # a new lease, the same version

    assert store.reap(now=claimed.lease_expires_at + SECOND, max_lost_runs=max_lost_runs) == []
    kept = store.get(task.id)
    assert (kept.status, kept.worker_id) == (TaskStatus.WORKING, "w1")


def test_report_with_a_current_copy_spares_the_read(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = store.create("x.y")
    _claimed(store, task.id)
    current = store.get(task.id)
    fetched: list[str] = []
    fetch = store._fetch
    monkeypatch.setattr(
        store, "_fetch", lambda task_id, scope: fetched.append(task_id) or fetch(task_id, scope)
    )

    store.report(task.id, "w1", known=current, artifacts=[(Artifact(artifact_id="a"), False)])

    assert fetched == []


@pytest.mark.parametrize(
    "call",
    [
        lambda store: store.mark_published("t", version=0),
        lambda store: store.mark_published_many([("t", 0)]),
    ],
    ids=["mark_published", "mark_published_many"],
)
def test_a_bad_version_to_mark_is_named(store: TaskStore, call: object) -> None:
    with pytest.raises(InvalidTaskData) as refused:
        call(store)  # type: ignore[operator]
    assert refused.value.field == "version"


@pytest.mark.parametrize("lease", [timedelta(0), -SECOND, 30])
def test_a_lease_must_be_a_positive_timedelta(store: TaskStore, lease: object) -> None:
    task = store.create("x.y")
    with pytest.raises(InvalidTaskData) as refused:
        store.claim(task.id, "w1", lease)  # type: ignore[arg-type]
    assert str(refused.value) == "lease: must be a positive timedelta"


def test_a_published_task_is_due_again_only_after_republish_after(store: TaskStore) -> None:
    task = store.create("x.y")
    store.mark_published(task.id, version=task.version)
    time.sleep(0.002)  # the store's clock moves past the mark

    assert store.unpublished(timedelta(0)) == []
    assert store.unpublished(timedelta(0), republish_after=timedelta(hours=1)) == []
    assert [t.id for t in store.unpublished(timedelta(0), republish_after=timedelta(0))] == [
        task.id
    ]


def test_unpublished_returns_100_tasks_by_default(store: TaskStore) -> None:
    for _ in range(101):
        store.create("x.y")
    time.sleep(0.002)

    assert len(store.unpublished(timedelta(0))) == 100


def test_only_a_release_from_outside_the_run_stops_it() -> None:
    """A cancel stops a run; the run's own outcome and the reaper's are fenced to it."""
    scope = OwnerScope(unscoped=True)
    everything = frozenset(TaskStatus)
    assert stops_a_run(Write(scope=scope, from_statuses=everything, release=True))
    assert not stops_a_run(Write(scope=scope, from_statuses=everything, release=True, fence="w"))
    assert not stops_a_run(Write(scope=scope, from_statuses=everything, fence=None, release=True))
    assert not stops_a_run(Write(scope=scope, from_statuses=everything))
