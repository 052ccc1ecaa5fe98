"""Schedules through the queue: the job's checks before anything is written, the publish.

In process on the in-memory store, with the broker replaced by a recorder;
tests/integration/test_schedules.py runs them with real beats and a worker.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from celery import Celery
from pydantic import BaseModel

from queuestore import InvalidTaskData, ScheduleNotFound, TaskContext, TaskQueue
from queuestore.aio import AsyncTaskQueue
from queuestore.beat.schedule import SCHEDULES_TASK
from queuestore.core.schedules import TICK_KEY
from tests.celery_support import Published, register

EVERY = timedelta(seconds=1)


class Window(BaseModel):
    days: int


def build(ctx: TaskContext, month: str, window: Window | None = None) -> dict[str, str]:
    return {"month": month}


@pytest.fixture
def reports(queue: TaskQueue) -> TaskQueue:
    register(queue.app, build, "reports.build")
    return queue


@pytest.mark.parametrize(
    ("name", "input", "field"),
    [
        ("reports.nope", {"month": "2026-11"}, "name"),
        ("reports.build", {}, "input.month"),
        ("reports.build", {"month": "2026-11", "window": {"days": "many"}}, "input.window.days"),
        ("reports.build", {"month": "2026-11", "colour": "red"}, "input.colour"),
    ],
)
def test_a_job_the_schedule_cannot_run_is_refused_and_nothing_is_written(
    reports: TaskQueue, name: str, input: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidTaskData) as refused:
        reports.create_schedule(name, input, every=EVERY)

    assert refused.value.field == field
    assert reports.list_schedules() == []


def test_new_input_is_checked_against_the_schedules_job(reports: TaskQueue) -> None:
    made = reports.create_schedule("reports.build", {"month": "2026-11"}, every=EVERY)

    with pytest.raises(InvalidTaskData):
        reports.update_schedule(made.id, input={"month": 11})

    assert reports.get_schedule(made.id).input == {"month": "2026-11"}
    assert reports.update_schedule(made.id, input={"month": "2026-12"}).input == {
        "month": "2026-12"
    }


def test_a_trigger_and_a_tick_publish_their_tasks(
    reports: TaskQueue, published: Published, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = reports.create_schedule("reports.build", {"month": "2026-11"}, every=EVERY)

    triggered = reports.trigger_schedule(made.id)
    assert made.next_run_at is not None
    later = made.next_run_at + timedelta(milliseconds=10)
    monkeypatch.setattr(reports.store, "_now", lambda: later)
    assert reports.run_schedules() == 1

    (ticked,) = [task for task in reports.store.iterate() if task.id != triggered.id]
    assert ticked.metadata[TICK_KEY] == made.next_run_at.isoformat()
    ids = [message["task_id"] for message in published.messages]
    assert ids == [triggered.id, ticked.id]


def test_the_beat_task_runs_the_ticks(
    app: Celery, reports: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = reports.create_schedule("reports.build", {"month": "2026-11"}, every=EVERY)
    assert made.next_run_at is not None
    later = made.next_run_at + timedelta(milliseconds=10)
    monkeypatch.setattr(reports.store, "_now", lambda: later)

    assert app.tasks[SCHEDULES_TASK](grace_seconds=5.0) == 1
    assert app.tasks[SCHEDULES_TASK](grace_seconds=5.0) == 0


def test_the_async_twins_speak_the_same_verbs(reports: TaskQueue) -> None:
    async def scenario() -> None:
        queue = AsyncTaskQueue(reports)
        made = await queue.create_schedule(
            "reports.build", {"month": "2026-11"}, owner="alice", cron="0 2 * * *"
        )
        assert (await queue.get_schedule(made.id, owner="alice")).cron == "0 2 * * *"
        assert [s.id for s in await queue.list_schedules(owner="alice")] == [made.id]
        assert (await queue.pause_schedule(made.id, owner="alice")).paused
        assert not (await queue.resume_schedule(made.id, owner="alice")).paused
        changed = await queue.update_schedule(made.id, owner="alice", every=EVERY)
        assert changed.every == EVERY
        task = await queue.trigger_schedule(made.id, owner="alice")
        assert (await queue.store.get_schedule(made.id)).last_task_id == task.id
        assert [s.id for s in await queue.store.list_schedules()] == [made.id]
        assert await queue.store.run_schedules() == []
        await queue.delete_schedule(made.id, owner="alice")
        with pytest.raises(ScheduleNotFound):
            await queue.get_schedule(made.id)

    asyncio.run(scenario())
