"""Schedules through real ``celery beat`` processes and a real worker, on PostgreSQL and SQLite.

Two beats send the ``queuestore.schedules`` task every half second; the
worker runs both, and the store makes each tick's task once: over three ticks,
three tasks, each run once. A beat stopped over two ticks catches up, when it
comes back, as each schedule's policy says: ``skip`` drops the ticks seen more
than the grace late, ``once`` makes one task for all of them, ``each`` one per
tick. The deployments' schedules' grace is 1 s.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from queuestore import TaskStatus, TaskStore
from queuestore.core.schedules import SCHEDULE_KEY, TICK_KEY, Schedule
from tests.integration.harness import TASK_TIMEOUT, Deployment, DeploymentFactory, wait_for

pytestmark = pytest.mark.integration

FAST_TICKS = {"QUEUESTORE_SCHEDULES_INTERVAL": "0.5", "QUEUESTORE_SCHEDULES_GRACE": "1"}
GRACE = timedelta(seconds=1)

STACKS = [
    pytest.param(
        "redis", "postgres", id="postgres", marks=[pytest.mark.redis, pytest.mark.postgres]
    ),
    pytest.param("filesystem", "sqlite", id="sqlite"),
]


def ticks_made(store: TaskStore, schedule_id: str) -> dict[datetime, list[str]]:
    """The task ids of each tick of a schedule (a trigger has none of its own)."""
    made: dict[datetime, list[str]] = {}
    for task in store.iterate():
        if task.metadata.get(SCHEDULE_KEY) == schedule_id:
            tick = datetime.fromisoformat(str(task.metadata[TICK_KEY]))
            made.setdefault(tick, []).append(task.id)
    return made


def run_once_each(deployment: Deployment, task_ids: list[str]) -> None:
    """Every task completed, its body run exactly once."""
    for task_id in task_ids:
        deployment.wait_status(task_id, TaskStatus.COMPLETED)
        runs = (deployment.records / task_id).read_text().splitlines()
        assert len(runs) == 1, (task_id, runs)


def wait_past(
    deployment: Deployment, schedule: Schedule, tick: datetime, timeout: float = TASK_TIMEOUT
) -> Schedule:
    """The schedule once its tick at ``tick`` was made."""

    def moved() -> Schedule | None:
        now = deployment.queue.get_schedule(schedule.id)
        return now if now.next_run_at is not None and now.next_run_at > tick else None

    found: Schedule = wait_for(
        moved, timeout=timeout, what=f"the tick at {tick}", logs=deployment.processes
    )
    return found


@pytest.mark.parametrize(("broker", "database"), STACKS)
def test_two_beats_over_three_ticks_make_three_tasks(
    deployment: DeploymentFactory, broker: str, database: str
) -> None:
    made = deployment(broker, database, **FAST_TICKS)
    made.start_worker(concurrency=2)
    beats = [made.start_beat() for _ in range(2)]
    queue = made.queue
    schedule = queue.create_schedule("tests.count_runs", every=timedelta(seconds=3), paused=True)
    wait_for(
        lambda: all("beat: Starting..." in beat.text() for beat in beats),
        timeout=TASK_TIMEOUT,
        what="both beats to start",
        logs=beats,
    )

    resumed = queue.resume_schedule(schedule.id)
    assert resumed.next_run_at is not None
    third = resumed.next_run_at + 2 * timedelta(seconds=3)
    wait_past(made, resumed, third)
    queue.pause_schedule(schedule.id)

    ticks = ticks_made(queue.store, schedule.id)
    assert sorted(ticks) == [resumed.next_run_at + n * timedelta(seconds=3) for n in range(3)]
    assert all(len(ids) == 1 for ids in ticks.values()), ticks
    run_once_each(made, [ids[0] for ids in ticks.values()])
    last = queue.get_schedule(schedule.id)
    assert (last.last_run_at, last.last_status) == (third, TaskStatus.COMPLETED)


@pytest.mark.parametrize(("broker", "database"), STACKS)
def test_a_beat_stopped_over_two_ticks_catches_up_per_policy(
    deployment: DeploymentFactory, broker: str, database: str
) -> None:
    made = deployment(broker, database, **FAST_TICKS)
    made.start_worker(concurrency=2)
    beat = made.start_beat()
    queue = made.queue
    every = timedelta(seconds=4)
    schedules = {
        policy: queue.create_schedule(
            "tests.count_runs", every=every, catch_up=policy, catch_up_limit=5
        )
        for policy in ("skip", "once", "each")
    }
    before = {
        policy: wait_past(made, schedule, schedule.next_run_at)  # type: ignore[arg-type]
        for policy, schedule in schedules.items()
    }
    beat.stop()
    time.sleep(2 * every.total_seconds() + 1)  # two ticks of each go by unseen
    made.start_beat()
    after = {
        policy: wait_past(made, schedule, before[policy].next_run_at)  # type: ignore[arg-type]
        for policy, schedule in schedules.items()
    }
    for schedule in schedules.values():
        queue.pause_schedule(schedule.id)

    caught_up: dict[str, list[datetime]] = {}
    for policy, schedule in schedules.items():
        next_before = before[policy].next_run_at
        assert next_before is not None
        last_before = next_before - every  # the last tick seen before the stop, made or not
        seen_at = after[policy].updated_at  # the restarted beat's write of the schedule
        missed = []
        tick = last_before + every
        while tick <= seen_at:
            missed.append(tick)
            tick += every
        assert len(missed) >= 2, (policy, missed, seen_at)
        ticks = ticks_made(queue.store, schedule.id)
        assert all(len(ids) == 1 for ids in ticks.values()), ticks
        caught_up[policy] = sorted(tick for tick in ticks if last_before < tick <= seen_at)
        run_once_each(made, [ids[0] for ids in ticks.values()])
        if policy == "skip":
            on_time = [tick for tick in missed[-1:] if seen_at - tick <= GRACE]
            assert caught_up[policy] == on_time
        elif policy == "once":
            assert caught_up[policy] == missed[-1:]
        else:
            assert caught_up[policy] == missed
