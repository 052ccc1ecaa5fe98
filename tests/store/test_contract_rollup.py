"""The rollup: every store counts its tasks as they change, so the overview never scans them.

The current counts (by status, job and owner) always equal a count of the
tasks themselves, whatever wrote them: creates, status writes, claims, the
reaper, deletes and the janitor. The series count, per minute, the tasks
submitted, started (by their wait) and ended (by their run time), the runs
retried and lost, and the deliveries that died, as ``core.rollup``'s rule says
(the SQL stores' triggers keep the same rule). Folding moves counts without
changing what a read gives.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from queuestore import InvalidTaskData, TaskError, TaskStatus, TaskStore
from queuestore.core.rollup import (
    BACKLOG,
    DEAD,
    LOST,
    NO_DURATION,
    RETRIED,
    RUN,
    STARTED,
    SUBMITTED,
    WAIT,
    Rollup,
    bucket_between,
    percentile,
)
from queuestore.store.deliveries import Settlement
from tests.store.support import race, reach

LEASE = timedelta(seconds=30)
URL = "https://93.184.216.34/hook"


def counted_from_tasks(store: TaskStore) -> Counter[tuple[TaskStatus, str, str | None]]:
    return Counter((task.status, task.name, task.owner) for task in store.iterate(limit=1000))


def counted_by_rollup(rollup: Rollup) -> Counter[tuple[TaskStatus, str, str | None]]:
    return Counter({(c.status, c.name, c.owner): c.value for c in rollup.counts if c.value})


def test_current_counts_equal_the_tasks_through_every_kind_of_write(store: TaskStore) -> None:
    for owner in ("alice", "bob", None):
        for status in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.INPUT_REQUIRED):
            reach(store, status, name="reports.build", owner=owner)
        store.create("mail.send", owner=owner)
    many = store.create_many([{"name": "mail.send", "owner": "bob"} for _ in range(5)])
    store.cancel(many[0].id)
    claimed = store.claim(many[1].id, "w:1:a", LEASE)
    assert claimed is not None
    store.reap(now=datetime.now(UTC) + 2 * LEASE)  # the lost run goes back, unclaimed
    store.delete(many[2].id)
    store.cleanup(timedelta(0), now=datetime.now(UTC) + timedelta(seconds=1))

    rollup = store.rollup()

    assert counted_by_rollup(rollup) == counted_from_tasks(store)
    assert rollup.status_counts() == store.status_counts()
    assert rollup.current(TaskStatus.SUBMITTED, by="owner") == {"bob": 3, "alice": 1, None: 1}
    assert rollup.current(TaskStatus.SUBMITTED, by="name") == {"mail.send": 5}


def test_the_series_count_submits_starts_and_ends_by_their_durations(store: TaskStore) -> None:
    done = store.create("reports.build", owner="alice")
    never_started = store.create("reports.build", owner="bob")
    failing = store.create("mail.send", owner="bob")
    started = store.claim(done.id, "w:1:a", LEASE)
    assert started is not None
    assert started.started_at is not None
    store.claim(failing.id, "w:1:b", LEASE)
    time.sleep(0.01)
    finished = store.report(done.id, "w:1:a", status="completed", result=1)
    store.report(failing.id, "w:1:b", status="failed", error={"type": "E", "message": "m"})
    store.cancel(never_started.id)

    rollup = store.rollup()

    assert rollup.total(SUBMITTED) == 3
    assert rollup.total(STARTED) == 2
    assert (rollup.total("completed"), rollup.total("failed"), rollup.total("cancelled")) == (
        1,
        1,
        1,
    )
    assert rollup.job_total("mail.send", "completed") == 0
    assert rollup.job_total("mail.send", "failed") == 1
    assert rollup.job_histogram("reports.build", WAIT) == {
        bucket_between(done.created_at, started.started_at): 1
    }
    assert finished.started_at is not None
    assert finished.finished_at is not None
    run = bucket_between(finished.started_at, finished.finished_at)
    assert rollup.job_histogram("reports.build", RUN) == {run: 1}
    # Cancelled before it started: counted, with no run time.
    assert sum(rollup.histogram(RUN).values()) == 2
    assert [c.bucket for c in rollup.series if c.metric == "cancelled"] == [NO_DURATION]
    assert rollup.names() == ["mail.send", "reports.build"]
    assert rollup.percentiles(RUN, 0.5)[-1] is not None  # this minute's, every job's
    assert rollup.percentiles(RUN, 0.5)[:-2] == [None] * 10  # five minutes each
    assert sum(rollup.per_step(SUBMITTED)) == 3
    assert rollup.per_step(SUBMITTED)[-1] >= 1  # the current minute is the last step


def test_a_scheduled_task_waits_from_its_start_not_from_its_submit(store: TaskStore) -> None:
    start = datetime.now(UTC) + timedelta(milliseconds=50)
    task = store.create("reports.build", run_at=start)
    time.sleep(0.1)
    claimed = store.claim(task.id, "w:1:a", LEASE)
    assert claimed is not None
    assert claimed.started_at is not None

    histogram = store.rollup().histogram(WAIT)

    assert histogram == {bucket_between(start, claimed.started_at): 1}


def test_job_retries_and_lost_runs_are_counted_apart(store: TaskStore) -> None:
    retried, lost, suspended = (store.create("mail.send") for _ in range(3))
    for task, worker in ((retried, "w:1:a"), (lost, "w:1:b"), (suspended, "w:1:c")):
        assert store.claim(task.id, worker, LEASE) is not None
    error = TaskError(type="Timeout", message="upstream")
    store.retry(retried.id, "w:1:a", error=error, run_at=datetime.now(UTC))
    store.suspend(suspended.id, "w:1:c", until=datetime.now(UTC), message="sleeping")
    store.reap(now=datetime.now(UTC) + 2 * LEASE)

    rollup = store.rollup()

    assert (rollup.total(RETRIED), rollup.total(LOST)) == (1, 1)
    assert rollup.total(STARTED) == 3  # a run after a retry is no new start
    assert store.claim(retried.id, "w:2:a", LEASE) is not None
    assert store.rollup().total(STARTED) == 3


def test_a_delivery_that_dies_is_counted_under_its_job(store: TaskStore) -> None:
    task = store.create("mail.send", owner="a")
    store.add_callback(task.id, URL, owner="a")
    store.update(task.id, status="working")
    store.update(task.id, status="completed")
    (taken,) = store.take_deliveries(lease=LEASE)
    assert store.settle_delivery(taken.delivery, Settlement.dead("HTTP 410", 410))

    rollup = store.rollup()

    assert rollup.total(DEAD) == 1
    assert rollup.job_total("mail.send", DEAD) == 1


def test_folding_changes_nothing_a_read_gives(store: TaskStore) -> None:
    for status in (TaskStatus.COMPLETED, TaskStatus.WORKING, TaskStatus.SUBMITTED):
        reach(store, status, name="reports.build", owner="alice")
    before = store.rollup()
    store.fold_rollup()
    reach(store, TaskStatus.FAILED, name="mail.send")  # fresh entries beside folded ones
    store.fold_rollup()
    after = store.rollup()

    assert counted_by_rollup(after) == counted_from_tasks(store)
    assert after.total(SUBMITTED) == before.total(SUBMITTED) + 1
    assert after.total("completed") == before.total("completed") == 1
    assert after.total("failed") == 1


def test_folds_at_once_count_each_entry_once(store: TaskStore) -> None:
    for _ in range(20):
        reach(store, TaskStatus.COMPLETED, name="reports.build")

    race(4, lambda _: store.fold_rollup())
    rollup = store.rollup()

    assert rollup.total("completed") == 20
    assert rollup.status_counts()[TaskStatus.COMPLETED] == 20


def test_the_day_is_read_in_quarters_and_the_hour_in_minutes(store: TaskStore) -> None:
    reach(store, TaskStatus.COMPLETED, name="reports.build")

    hour, day = store.rollup(timedelta(hours=1)), store.rollup(timedelta(days=1))

    assert (len(hour.steps()), len(day.steps())) == (60, 96)
    assert (len(hour.steps(hour.timed_step)), len(day.steps(day.timed_step))) == (12, 24)
    assert sum(hour.per_step("completed")) == sum(day.per_step("completed")) == 1
    assert sum(hour.histogram(RUN).values()) == sum(day.histogram(RUN).values()) == 1
    for rollup in (hour, day):
        for step in (rollup.step, rollup.timed_step):
            last = rollup.steps(step)[-1]
            assert last <= rollup.now < last + step


@pytest.mark.parametrize("window", [timedelta(seconds=59), timedelta(days=2), 60])
def test_a_window_out_of_bounds_is_refused(store: TaskStore, window: object) -> None:
    with pytest.raises(InvalidTaskData, match="window"):
        store.rollup(window)  # type: ignore[arg-type]


def test_the_backlog_is_sampled_in_the_step_it_was_read(store: TaskStore) -> None:
    waiting = [store.create("x.job") for _ in range(3)]

    assert store.rollup().samples(BACKLOG)[-1] == 3
    store.claim(waiting[0].id, "w:1:a", LEASE)
    later = store.rollup()
    assert later.samples(BACKLOG)[-1] == 2
    assert later.samples(BACKLOG)[:-2] == [None] * 58  # no sample before: a gap, not a zero
    assert store.rollup(timedelta(days=1)).samples(BACKLOG)[-1] == 2
    for task in waiting:
        store.cancel(task.id)
    assert store.rollup().samples(BACKLOG)[-1] == 0  # sampled: a zero, not a gap


def test_the_oldest_waiting_task_is_the_one_due_written_longest_ago(store: TaskStore) -> None:
    assert store.rollup().oldest_waiting is None
    store.create("x.job", run_at=datetime.now(UTC) + timedelta(hours=1))  # not due yet
    oldest = store.create("x.job", owner="alice")
    store.create("x.job", owner="bob")
    reach(store, TaskStatus.WORKING, name="x.job")

    found = store.rollup().oldest_waiting

    assert found is not None
    assert found.id == oldest.id


def test_percentiles_come_from_the_buckets_within_a_fifth() -> None:
    durations_ms = [10.0] * 50 + [100.0] * 45 + [1000.0] * 5
    histogram = Counter(bucket_between(_at(0), _at(ms)) for ms in durations_ms)

    p50, p95 = percentile(histogram, 0.5), percentile(histogram, 0.95)

    assert p50 is not None
    assert p95 is not None
    assert 0.008 <= p50 <= 0.0125
    assert 0.08 <= p95 <= 0.125
    assert percentile({NO_DURATION: 3}, 0.5) is None


def _at(milliseconds: float) -> datetime:
    return datetime(2026, 12, 8, tzinfo=UTC) + timedelta(milliseconds=milliseconds)
