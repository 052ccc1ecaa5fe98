"""TaskQueue's own rules: its settings, the callers' verbs it scopes, and its beat tasks.

In process on the in-memory store, with the broker replaced by a recorder (see
tests/worker for the run side).
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from celery.signals import worker_process_init
from kombu.exceptions import OperationalError

from queuestore import (
    BrokerUnavailable,
    InMemoryTaskStore,
    StoreUnavailable,
    TaskNotFound,
    TaskQueue,
    TaskStatus,
)
from queuestore.beat.schedule import JANITOR_TASK, REAPER_TASK, SCHEDULES_TASK, SWEEP_TASK
from tests.celery_support import Published, eventually, reconfigure


@pytest.fixture
def queue(app: Celery, published: Published) -> Iterator[TaskQueue]:
    return TaskQueue(InMemoryTaskStore(), app, lease=timedelta(seconds=5))


def test_the_defaults_are_the_documented_ones(app: Celery) -> None:
    queue = TaskQueue(InMemoryTaskStore(), app)

    assert (
        queue.options.lease,
        queue.options.heartbeat_interval,
        queue.options.report_interval,
    ) == (
        timedelta(seconds=30),
        timedelta(seconds=1),
        timedelta(milliseconds=200),
    )
    assert (queue.options.max_lost_runs, queue.options.terminate_on_cancel) == (3, True)
    assert (queue.options.publish_grace, queue.options.republish_after) == (
        timedelta(seconds=10),
        timedelta(hours=1),
    )
    assert queue.options.ack_after == timedelta(seconds=15)


HEARTBEAT_TOO_LONG = "heartbeat_interval must be shorter than the lease"
REPORT_OUT_OF_RANGE = "report_interval must be zero or more, and shorter than the lease"
ACK_OUT_OF_RANGE = "ack_after must be more than zero, and shorter than the lease"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"heartbeat_interval": timedelta(seconds=5)}, HEARTBEAT_TOO_LONG),
        ({"report_interval": timedelta(seconds=5)}, REPORT_OUT_OF_RANGE),
        ({"report_interval": -timedelta(seconds=1)}, REPORT_OUT_OF_RANGE),
        ({"ack_after": timedelta(seconds=5)}, ACK_OUT_OF_RANGE),
        ({"ack_after": timedelta(0)}, ACK_OUT_OF_RANGE),
    ],
)
def test_intervals_must_fit_in_the_lease(
    app: Celery, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        TaskQueue(InMemoryTaskStore(), app, lease=timedelta(seconds=5), **options)


def test_on_redis_the_visibility_timeout_follows_the_lease_unless_the_app_set_one() -> None:
    plain = Celery("plain", broker="redis://127.0.0.1:1/0", set_as_current=False)
    TaskQueue(InMemoryTaskStore(), plain, lease=timedelta(seconds=12))
    assert plain.conf.broker_transport_options == {
        "visibility_timeout": 12.0,
        "unacked_restore_interval": 4.0,
        "unacked_restore_throttle": 1,
    }

    own = Celery("own", broker="rediss://127.0.0.1:1/0", set_as_current=False)
    own.conf.broker_transport_options = {"visibility_timeout": 7200, "max_connections": 5}
    TaskQueue(InMemoryTaskStore(), own, lease=timedelta(seconds=12))
    assert own.conf.broker_transport_options["visibility_timeout"] == 7200
    assert own.conf.broker_transport_options["max_connections"] == 5

    amqp = Celery("amqp", broker="amqp://127.0.0.1:1//", set_as_current=False)
    TaskQueue(InMemoryTaskStore(), amqp)
    assert not amqp.conf.broker_transport_options


def test_a_zero_report_interval_is_allowed(app: Celery) -> None:
    queue = TaskQueue(InMemoryTaskStore(), app, report_interval=timedelta(0))
    assert queue.options.report_interval == timedelta(0)


def test_submit_stores_every_field_it_is_given(queue: TaskQueue) -> None:
    task = queue.submit(
        "test.job",
        {"n": 1},
        owner="alice",
        context_id="chat-1",
        ttl=timedelta(hours=2),
        metadata={"source": "test"},
        task_id="chosen-id",
    )

    stored = queue.store.get("chosen-id", owner="alice")
    assert stored == task
    assert (stored.input, stored.context_id, stored.ttl, stored.metadata) == (
        {"n": 1},
        "chat-1",
        timedelta(hours=2),
        {"source": "test"},
    )


def test_the_callers_verbs_are_scoped_to_the_owner(queue: TaskQueue) -> None:
    task = queue.submit("test.job", owner="alice")

    with pytest.raises(TaskNotFound):
        queue.cancel(task.id, owner="bob")
    with pytest.raises(TaskNotFound):
        queue.result(task.id, timeout=0.01, owner="bob")
    queue.store.update(task.id, status="working")
    queue.store.update(task.id, status="input_required")
    with pytest.raises(TaskNotFound):
        queue.resume(task.id, "yes", owner="bob")
    assert queue.resume(task.id, "yes", owner="alice").status is TaskStatus.WORKING
    assert queue.cancel(task.id, owner="alice", reason="done").status_message == "done"


def test_result_says_which_task_timed_out(queue: TaskQueue) -> None:
    task = queue.submit("test.job")
    with pytest.raises(TimeoutError, match=f"task {task.id!r} is still submitted"):
        queue.result(task.id, timeout=0.01)


def test_the_sweep_waits_out_the_grace_and_republishes_after_republish_after(
    queue: TaskQueue, published: Published
) -> None:
    published.broker_down = True
    task = queue.submit("test.job")
    published.broker_down = False
    reconfigure(queue, republish_after=None)

    assert queue.sweep() == 0  # still within publish_grace: submit may be publishing
    reconfigure(queue, publish_grace=timedelta(0))
    assert eventually(queue.sweep) == 1
    assert queue.sweep() == 0  # published, and republish is off

    reconfigure(queue, republish_after=timedelta(0))
    assert eventually(queue.sweep) == 1
    assert [m["task_id"] for m in published.messages] == [task.id, task.id]


def test_the_sweep_publishes_at_most_limit_tasks(queue: TaskQueue, published: Published) -> None:
    published.broker_down = True
    for _ in range(3):
        queue.submit("test.job")
    published.broker_down = False
    reconfigure(queue, publish_grace=timedelta(0))

    assert eventually(lambda: queue.sweep(limit=2)) == 2
    assert queue.sweep() == 1


def test_a_first_lost_run_is_retried_at_once_then_retries_back_off_up_to_a_minute(
    queue: TaskQueue, published: Published
) -> None:
    reconfigure(queue, max_lost_runs=10)
    task = queue.submit("test.job")
    countdowns = []
    for run in range(1, 8):
        queue.store.claim(task.id, f"w{run}", timedelta(milliseconds=1))
        assert [t.id for t in eventually(queue.reap)] == [task.id]
        countdowns.append(published.messages[-1]["countdown"])

    assert countdowns == [None, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0]


def test_install_beat_schedule_keeps_the_apps_own_entries(app: Celery, queue: TaskQueue) -> None:
    mine = {"task": "my.task", "schedule": 60.0}
    app.conf.beat_schedule = {"mine": mine}

    queue.install_beat_schedule()

    assert app.conf.beat_schedule["mine"] == mine
    assert {JANITOR_TASK, REAPER_TASK, SWEEP_TASK} < set(app.conf.beat_schedule)


def test_the_beat_tasks_report_what_they_did(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    published.broker_down = True
    queue.submit("test.job")
    published.broker_down = False
    reconfigure(queue, publish_grace=timedelta(0))
    lost = queue.submit("test.job")
    queue.store.claim(lost.id, "dead", timedelta(milliseconds=1))

    assert eventually(app.tasks[SWEEP_TASK]) == 1
    assert eventually(app.tasks[REAPER_TASK]) == 1


@pytest.mark.parametrize(
    "beat",
    [
        (JANITOR_TASK, "cleanup", {"ttl_seconds": 60}),
        (REAPER_TASK, "reap", {}),
        (SWEEP_TASK, "unpublished", {}),
    ],
    ids=["janitor", "reaper", "sweep"],
)
def test_a_beat_task_skips_its_beat_while_the_store_is_down(
    app: Celery,
    queue: TaskQueue,
    monkeypatch: pytest.MonkeyPatch,
    beat: tuple[str, str, dict[str, Any]],
) -> None:
    task, verb, kwargs = beat

    def down(*args: Any, **options: Any) -> None:
        raise StoreUnavailable("database restarting")

    monkeypatch.setattr(queue.store, verb, down)
    assert app.tasks[task](**kwargs) == 0


@pytest.mark.parametrize("batch_size", [None, 1])
def test_the_janitor_task_deletes_in_its_batch_size(
    app: Celery, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch, batch_size: int | None
) -> None:
    for _ in range(2):
        queue.store.cancel(queue.store.create("test.job", ttl=timedelta(0)).id)
    batches: list[int] = []
    delete = queue.store._delete_expired
    monkeypatch.setattr(
        queue.store,
        "_delete_expired",
        lambda ttl, now, size: batches.append(size) or delete(ttl, now, size),
    )
    options = {} if batch_size is None else {"batch_size": batch_size}

    assert app.tasks[JANITOR_TASK](ttl_seconds=3600, **options) == 2
    assert batches == ([1000] if batch_size is None else [1, 1, 1])


def test_a_queue_is_found_only_for_its_app_and_the_error_says_where_to_make_it() -> None:
    with pytest.raises(RuntimeError) as missing:
        TaskQueue.of(Celery("nowhere", set_as_current=False))
    assert str(missing.value) == (
        "no TaskQueue for this Celery app: create TaskQueue(store, app) "
        "in the module the worker loads"
    )


def test_cancel_revokes_the_job_and_survives_a_broker_outage(
    app: Celery, published: Published, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = TaskQueue(InMemoryTaskStore(), app, terminate_on_cancel=False)
    first, second = queue.submit("test.job"), queue.submit("test.job")

    queue.cancel(first.id)
    assert published.revoked == [(first.id, {})]

    def down(*args: Any, **options: Any) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(app.control, "revoke", down)
    assert queue.cancel(second.id).status is TaskStatus.CANCELLED


def test_install_beat_schedule_names_each_task_and_its_interval(
    app: Celery, queue: TaskQueue
) -> None:
    queue.install_beat_schedule(
        janitor_interval=timedelta(seconds=30),
        reaper_interval=timedelta(seconds=5),
        sweep_interval=timedelta(seconds=7),
        schedules_interval=timedelta(seconds=3),
    )

    entries = app.conf.beat_schedule
    assert [(entries[name]["task"], entries[name]["schedule"]) for name in entries] == [
        (JANITOR_TASK, timedelta(seconds=30)),
        (REAPER_TASK, timedelta(seconds=5)),
        (SWEEP_TASK, timedelta(seconds=7)),
        (SCHEDULES_TASK, timedelta(seconds=3)),
    ]


def test_the_sweep_publishes_500_tasks_by_default(queue: TaskQueue, published: Published) -> None:
    published.broker_down = True
    for _ in range(501):
        queue.submit("test.job")
    published.broker_down = False
    reconfigure(queue, publish_grace=timedelta(0))

    assert eventually(queue.sweep) == 500
    assert queue.sweep() == 1


def test_the_beat_tasks_ignore_results_and_belong_to_this_app(
    app: Celery, queue: TaskQueue
) -> None:
    other = Celery("other", broker="memory://", set_as_current=False)
    for name in (JANITOR_TASK, REAPER_TASK, SWEEP_TASK):
        assert app.tasks[name].ignore_result is True
        assert name not in other.tasks


def test_a_forked_pool_process_drops_the_stores_inherited_connections(
    app: Celery, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    forks: list[str] = []
    monkeypatch.setattr(queue.store, "after_fork", lambda: forks.append("after_fork"))
    gc.collect()  # the handler must outlive the call that connected it

    worker_process_init.send(sender=None)

    assert forks == ["after_fork"]


def test_a_publish_the_broker_refuses_names_the_task(
    queue: TaskQueue, published: Published
) -> None:
    published.broker_down = True
    task = queue.store.create("test.job")

    with pytest.raises(BrokerUnavailable) as refused:
        queue.publish(task)
    assert str(refused.value) == f"could not publish task {task.id}: connection refused"
