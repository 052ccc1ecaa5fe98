"""The beat schedule a queue installs, and the janitor task it runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from celery import Celery

from queuestore import TaskQueue
from queuestore.beat.schedule import JANITOR_TASK, REAPER_TASK, SCHEDULES_TASK, SWEEP_TASK


def test_install_beat_schedule_adds_four_expiring_entries(app: Celery, queue: TaskQueue) -> None:
    queue.install_beat_schedule(
        janitor_ttl=timedelta(hours=2),
        janitor_interval=timedelta(seconds=30),
        reaper_interval=timedelta(seconds=5),
        sweep_interval=timedelta(seconds=7),
        schedules_interval=timedelta(seconds=2),
        schedules_grace=timedelta(seconds=9),
    )
    schedule = app.conf.beat_schedule
    assert set(schedule) == {JANITOR_TASK, REAPER_TASK, SWEEP_TASK, SCHEDULES_TASK}
    assert schedule[SCHEDULES_TASK]["kwargs"] == {"grace_seconds": 9.0}
    assert schedule[SCHEDULES_TASK]["options"] == {"expires": 2.0}
    assert schedule[JANITOR_TASK]["kwargs"] == {"ttl_seconds": 7200.0, "batch_size": 1000}
    assert schedule[JANITOR_TASK]["options"] == {"expires": 30.0}
    assert schedule[REAPER_TASK]["options"] == {"expires": 5.0}
    assert schedule[SWEEP_TASK]["options"] == {"expires": 7.0}
    assert {JANITOR_TASK, REAPER_TASK, SWEEP_TASK, SCHEDULES_TASK} <= set(app.tasks)


def test_the_janitor_task_removes_only_expired_terminal_tasks(
    app: Celery, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = queue.store
    clock = [datetime.now(UTC) - timedelta(hours=2)]
    monkeypatch.setattr(store, "_now", lambda: clock[0])
    # Two hours old and past their own ttl: only their status keeps them.
    live = [store.create("test.job", ttl=timedelta(0)) for _ in range(3)]
    store.claim(live[1].id, "w1", timedelta(days=1))
    store.claim(live[2].id, "w1", timedelta(days=1))
    store.update(live[2].id, status="input_required", worker_id="w1")
    clock[0] += timedelta(hours=2)
    old = store.create("test.job", ttl=timedelta(0))
    store.cancel(old.id)
    kept = store.create("test.job")
    store.cancel(kept.id)

    removed = app.tasks[JANITOR_TASK](ttl_seconds=3600)

    assert removed == 1
    assert {t.id for t in store.list().tasks} == {kept.id, *(t.id for t in live)}


def test_the_janitor_folds_the_rollup_and_forgets_silent_workers(
    app: Celery, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = queue.store
    folded: list[int] = []
    fold = store.fold_rollup
    monkeypatch.setattr(store, "fold_rollup", lambda: folded.append(fold()) or folded[-1])
    store.beat_worker("h:1:old", host="h", pid=1)
    clock = [datetime.now(UTC) + timedelta(hours=2)]
    monkeypatch.setattr(store, "_now", lambda: clock[0])
    store.beat_worker("h:2:new", host="h", pid=2)

    app.tasks[JANITOR_TASK](ttl_seconds=3600)

    assert len(folded) == 1
    assert [worker.id for worker in store.workers()] == ["h:2:new"]
