"""``subscribe_stops``: what a worker's heartbeat hears, so that a cancel reaches a job at once.

On PostgreSQL it is a channel of its own: a run ended by a caller (cancel, an
update to a terminal status) is announced there, a run's own outcome is not,
so no worker wakes for another worker's completions. The general channel
still announces every terminal status, for ``wait`` and the change feed.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from queuestore import TaskStatus, TaskStore
from queuestore.core.watch import Listener, StatusChange

LEASE = timedelta(seconds=30)


def heard(listen: Listener, task_id: str, seconds: float) -> list[StatusChange]:
    """What ``listen`` reports about ``task_id`` within ``seconds``."""
    deadline = time.monotonic() + seconds
    changes: list[StatusChange] = []
    while (left := deadline - time.monotonic()) > 0:
        changes += [change for change in listen(left) if change[0] == task_id]
        if changes:
            break
    return changes


def test_a_cancel_of_a_running_task_is_heard_by_workers(store: TaskStore, backend: str) -> None:
    task = store.create("x.y")
    assert store.claim(task.id, "w1", LEASE) is not None

    with store.subscribe_stops() as listen:
        store.cancel(task.id, reason="no longer needed")
        changes = heard(listen, task.id, 0.5 if backend == "sqlite" else 5.0)

    if backend == "sqlite":
        assert changes == []  # no notifications: the heartbeat's beat finds the cancel
    else:
        assert changes == [(task.id, TaskStatus.CANCELLED)]


def test_a_caller_failing_a_running_task_is_heard_by_workers(
    store: TaskStore, backend: str
) -> None:
    task = store.create("x.y")
    assert store.claim(task.id, "w1", LEASE) is not None

    with store.subscribe_stops() as listen:
        store.update(task.id, status=TaskStatus.FAILED, error={"type": "Ops", "message": "x"})
        changes = heard(listen, task.id, 0.5 if backend == "sqlite" else 5.0)

    if backend == "sqlite":
        assert changes == []  # no notifications: the heartbeat's beat finds the change
    else:
        assert changes == [(task.id, TaskStatus.FAILED)]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_runs_own_outcome_wakes_no_worker_but_is_announced_to_callers(
    store: TaskStore,
) -> None:
    task = store.create("x.y")
    assert store.claim(task.id, "w1", LEASE) is not None

    with store.subscribe_stops() as stops, store.subscribe() as changes:
        store.report(task.id, "w1", status=TaskStatus.COMPLETED, result={"ok": True})
        assert heard(changes, task.id, 5.0) == [(task.id, TaskStatus.COMPLETED)]
        assert heard(stops, task.id, 0.3) == []


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_reaper_failing_a_lost_run_wakes_no_worker(store: TaskStore) -> None:
    # The reaper's write is fenced to the lost run's worker, like the run's own writes.
    task = store.create("x.y")
    claimed = store.claim(task.id, "w1", LEASE)
    assert claimed is not None
    assert claimed.lease_expires_at is not None

    with store.subscribe_stops() as stops, store.subscribe() as changes:
        (reaped,) = store.reap(now=claimed.lease_expires_at + LEASE, max_lost_runs=1)
        assert reaped.status is TaskStatus.FAILED
        assert heard(changes, task.id, 5.0) == [(task.id, TaskStatus.FAILED)]
        assert heard(stops, task.id, 0.3) == []
