"""Schedules in the store: kept, scoped by owner, changed, and ticked once per tick.

Every backend must keep a schedule's timing and next tick, make one task per
tick however many callers run the ticks at once, and apply the catch-up policy
to ticks seen late (queuestore.core.schedules says how).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from queuestore import (
    ANY,
    CatchUp,
    InMemoryTaskStore,
    InvalidTaskData,
    ScheduleNotFound,
    TaskConflict,
    TaskStatus,
    TaskStore,
)
from queuestore.core.schedules import SCHEDULE_KEY, TICK_KEY, tick_task_id

EVERY = timedelta(seconds=10)
GRACE = timedelta(seconds=1)


def test_a_schedule_is_kept_with_its_first_tick(store: TaskStore) -> None:
    before = datetime.now(UTC)
    made = store.create_schedule(
        "reports.build", {"month": "2026-11"}, owner="alice", cron="0 2 * * *",
        timezone="Europe/Paris", catch_up="each", catch_up_limit=3,
    )  # fmt: skip

    read = store.get_schedule(made.id, owner="alice")

    assert read == made
    assert (read.name, read.input, read.owner) == ("reports.build", {"month": "2026-11"}, "alice")
    assert (read.cron, read.every, read.catch_up, read.catch_up_limit) == (
        "0 2 * * *",
        None,
        CatchUp.EACH,
        3,
    )
    assert read.next_run_at is not None
    assert read.next_run_at > before
    assert read.next_run_at.astimezone().minute == 0
    assert read.last_run_at is None
    assert read.last_task_id is None
    assert not read.paused


def test_bad_input_is_refused_and_nothing_is_written(store: TaskStore) -> None:
    cases: list[tuple[dict[str, object], str]] = [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "not a cron"}, "cron"),
        ({}, "cron"),
        ({"cron": "* * * * *", "every": EVERY}, "cron"),
        ({"every": timedelta(milliseconds=10)}, "every"),
        ({"every": EVERY, "timezone": "Mars/Olympus"}, "timezone"),
        ({"every": EVERY, "catch_up": "sometimes"}, "catch_up"),
        ({"every": EVERY, "catch_up_limit": 0}, "catch_up_limit"),
        ({"every": EVERY, "input": {"bad": "\x00"}}, "input"),
        ({"every": EVERY, "schedule_id": "no spaces"}, "schedule_id"),
    ]
    for arguments, field in cases:
        with pytest.raises(InvalidTaskData) as refused:
            store.create_schedule("x.y", **arguments)  # type: ignore[arg-type]
        assert refused.value.field == field, arguments

    assert store.list_schedules() == []


def test_schedules_are_scoped_by_owner(store: TaskStore) -> None:
    alices = store.create_schedule("x.y", owner="alice", every=EVERY)
    store.create_schedule("x.y", owner="bob", every=EVERY)

    assert [s.id for s in store.list_schedules(owner="alice")] == [alices.id]
    assert len(store.list_schedules(owner=ANY)) == 2
    assert store.list_schedules(owner=None) == []
    for verb in (store.get_schedule, store.pause_schedule, store.trigger_schedule):
        with pytest.raises(ScheduleNotFound):
            verb(alices.id, owner="bob")  # type: ignore[operator]
    store.delete_schedule(alices.id, owner="bob")
    assert store.get_schedule(alices.id).owner == "alice"


def test_a_taken_id_is_a_conflict(store: TaskStore) -> None:
    store.create_schedule("x.y", every=EVERY, schedule_id="nightly")

    with pytest.raises(TaskConflict):
        store.create_schedule("x.y", every=EVERY, schedule_id="nightly")


def test_a_tick_makes_one_task_and_moves_the_next_tick_on(store: TaskStore) -> None:
    made = store.create_schedule("x.y", {"a": 1}, owner="alice", every=EVERY)
    assert made.next_run_at is not None
    tick = made.next_run_at

    assert store.run_schedules(now=tick - timedelta(milliseconds=1)) == []
    (task,) = store.run_schedules(now=tick, grace=GRACE)
    assert store.run_schedules(now=tick, grace=GRACE) == []

    assert (task.name, task.input, task.owner, task.status) == (
        "x.y",
        {"a": 1},
        "alice",
        TaskStatus.SUBMITTED,
    )
    assert task.id == tick_task_id(made.id, tick)
    assert task.metadata == {SCHEDULE_KEY: made.id, TICK_KEY: tick.isoformat()}
    after = store.get_schedule(made.id)
    assert (after.next_run_at, after.last_run_at, after.last_task_id) == (
        tick + EVERY,
        tick,
        task.id,
    )
    assert after.last_status is TaskStatus.SUBMITTED


def test_racing_tickers_make_one_task_per_tick(make_store: Callable[[], TaskStore]) -> None:
    first = make_store()
    shared = isinstance(first, InMemoryTaskStore)  # in-memory stores share nothing
    stores = [first] + [first if shared else make_store() for _ in range(3)]
    made = stores[0].create_schedule("x.y", every=timedelta(seconds=1), catch_up="each")
    assert made.next_run_at is not None
    made_tasks: list[str] = []
    now = made.next_run_at + timedelta(seconds=2.5)

    def tick(store: TaskStore) -> None:
        made_tasks.extend(task.id for task in store.run_schedules(now=now))

    threads = [threading.Thread(target=tick, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(made_tasks) == len(set(made_tasks)) == 3
    assert stores[0].count() == 3


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("skip", 0), ("once", 1), ("each", 3)],
)
def test_ticks_seen_late_are_caught_up_per_policy(
    store: TaskStore, policy: str, expected: int
) -> None:
    made = store.create_schedule("x.y", every=EVERY, catch_up=policy, catch_up_limit=3)
    assert made.next_run_at is not None
    late = made.next_run_at + 4 * EVERY + timedelta(seconds=5)  # five ticks, the last 5 s ago

    tasks = store.run_schedules(now=late, grace=GRACE)

    assert len(tasks) == expected
    ticks = [made.next_run_at + n * EVERY for n in range(5)]
    assert [task.metadata[TICK_KEY] for task in tasks] == [
        tick.isoformat() for tick in ticks[5 - expected :]
    ]
    assert store.get_schedule(made.id).next_run_at == made.next_run_at + 5 * EVERY


def test_a_late_tick_within_the_grace_runs_under_skip(store: TaskStore) -> None:
    made = store.create_schedule("x.y", every=EVERY)
    assert made.next_run_at is not None

    (task,) = store.run_schedules(now=made.next_run_at + EVERY + GRACE / 2, grace=GRACE)

    assert task.metadata[TICK_KEY] == (made.next_run_at + EVERY).isoformat()


def test_a_paused_schedule_does_not_tick_and_resumes_from_now(store: TaskStore) -> None:
    made = store.create_schedule("x.y", every=EVERY, catch_up="each")
    assert made.next_run_at is not None

    paused = store.pause_schedule(made.id)
    assert paused.paused
    assert paused.next_run_at is None
    assert store.run_schedules(now=made.next_run_at + 3 * EVERY) == []
    assert store.pause_schedule(made.id) == paused

    resumed = store.resume_schedule(made.id)
    assert not resumed.paused
    assert resumed.next_run_at is not None
    assert resumed.next_run_at > datetime.now(UTC)
    assert resumed.version == paused.version + 1


def test_an_update_keeps_what_it_is_not_given(store: TaskStore) -> None:
    made = store.create_schedule("x.y", {"a": 1}, every=EVERY, catch_up="once")

    changed = store.update_schedule(made.id, cron="*/5 * * * *", input={"a": 2})

    assert (changed.cron, changed.every, changed.input) == ("*/5 * * * *", None, {"a": 2})
    assert changed.catch_up is CatchUp.ONCE
    assert changed.next_run_at is not None
    assert changed.next_run_at.minute % 5 == 0
    with pytest.raises(InvalidTaskData) as refused:
        store.update_schedule(made.id, cron="bad")
    assert refused.value.field == "cron"
    assert store.get_schedule(made.id) == changed
    back = store.update_schedule(made.id, every=timedelta(minutes=1), catch_up_limit=5)
    assert (back.cron, back.every, back.catch_up_limit) == (None, timedelta(minutes=1), 5)


def test_a_trigger_makes_a_task_now_and_keeps_the_ticks(store: TaskStore) -> None:
    made = store.create_schedule("x.y", {"a": 1}, owner="alice", every=EVERY, paused=True)

    task = store.trigger_schedule(made.id, owner="alice")

    after = store.get_schedule(made.id)
    assert (task.name, task.input, task.owner) == ("x.y", {"a": 1}, "alice")
    assert task.metadata[SCHEDULE_KEY] == made.id
    assert (after.last_task_id, after.paused, after.next_run_at) == (task.id, True, None)
    store.update(task.id, status=TaskStatus.CANCELLED)
    assert store.get_schedule(made.id).last_status is TaskStatus.CANCELLED


def test_a_deleted_schedule_is_gone_and_its_tasks_stay(store: TaskStore) -> None:
    made = store.create_schedule("x.y", every=EVERY)
    task = store.trigger_schedule(made.id)

    store.delete_schedule(made.id)
    store.delete_schedule(made.id)

    with pytest.raises(ScheduleNotFound):
        store.get_schedule(made.id)
    assert store.get(task.id).id == task.id


def test_an_owner_is_required_where_the_store_requires_one(
    make_store: Callable[..., TaskStore],
) -> None:
    store = make_store(require_owner=True)

    with pytest.raises(InvalidTaskData) as refused:
        store.create_schedule("x.y", every=EVERY)

    assert refused.value.field == "owner"
