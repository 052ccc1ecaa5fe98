"""Push in the store: callbacks, the outbox committed with each change, and taking it in order."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta

import pytest

from queuestore import InvalidTaskData, TaskNotFound, TaskStatus, TaskStore
from queuestore.core.callbacks import SNAPSHOT_FIELDS, CallbackEvents, DeliveryState
from queuestore.core.errors import CallbackRefused
from queuestore.store.deliveries import Settlement

URL = "https://93.184.216.34/hook"  # a public address: no lookup, accepted by the default policy
LEASE = timedelta(seconds=30)


def run_to_completion(store: TaskStore, task_id: str) -> None:
    store.update(task_id, status="working")
    store.update(task_id, progress=0.5)  # not a status change: no delivery
    store.update(task_id, status="completed", result={"ok": True})


def test_a_terminal_callback_gets_only_the_end(store: TaskStore) -> None:
    task = store.create("x.job", owner="a")
    callback = store.add_callback(task.id, URL, owner="a")
    run_to_completion(store, task.id)

    (delivery,) = store.deliveries(task.id, owner="a")
    assert (callback.owner, callback.events) == ("a", CallbackEvents.TERMINAL)
    assert (delivery.status, delivery.state, delivery.url) == (
        TaskStatus.COMPLETED,
        DeliveryState.PENDING,
        URL,
    )
    assert delivery.task is not None
    assert (delivery.task.result, delivery.task.version) == ({"ok": True}, delivery.version)
    assert delivery.task.input == {}  # the snapshot leaves the input out


def test_an_all_callback_gets_every_status_change_in_order(store: TaskStore) -> None:
    task = store.create("x.job")
    store.add_callback(task.id, URL, events="all")
    run_to_completion(store, task.id)

    deliveries = store.deliveries(task.id)
    assert [d.status for d in deliveries] == [TaskStatus.WORKING, TaskStatus.COMPLETED]
    assert [d.task.status for d in deliveries if d.task] == [d.status for d in deliveries]
    assert len({d.event_id for d in deliveries}) == 2


def test_a_callback_on_a_finished_task_still_reports_the_end(store: TaskStore) -> None:
    task = store.create("x.job")
    run_to_completion(store, task.id)
    store.add_callback(task.id, URL)

    assert [d.status for d in store.deliveries(task.id)] == [TaskStatus.COMPLETED]


def test_the_same_callback_id_replaces_and_keeps_its_queue(store: TaskStore) -> None:
    task = store.create("x.job")
    store.add_callback(task.id, URL, events="all")
    store.update(task.id, status="working")
    replaced = store.add_callback(task.id, "https://93.184.216.35/new", events="all")

    assert [c.url for c in store.callbacks(task.id)] == [replaced.url]
    (delivery,) = store.deliveries(task.id)
    assert delivery.url == replaced.url


def test_callbacks_are_scoped_to_their_owner(store: TaskStore) -> None:
    task = store.create("x.job", owner="a")
    with pytest.raises(TaskNotFound):
        store.add_callback(task.id, URL, owner="b")
    store.add_callback(task.id, URL, owner="a")

    assert store.callbacks(task.id, owner="b") == []
    assert len(store.callbacks(task.id, owner="a")) == 1
    with pytest.raises(TaskNotFound):
        store.deliveries(task.id, owner="b")
    assert store.remove_callback(task.id, owner="b") == 0
    assert store.remove_callback(task.id, owner="a") == 1


def test_a_callback_may_come_before_its_task_when_asked(store: TaskStore) -> None:
    with pytest.raises(TaskNotFound):
        store.add_callback("later", URL)
    store.add_callback("later", URL, owner="a", task_may_follow=True)
    task = store.create("x.job", owner="a", task_id="later")
    run_to_completion(store, task.id)

    assert [d.status for d in store.deliveries(task.id)] == [TaskStatus.COMPLETED]


def test_a_callback_for_a_task_to_come_reports_only_its_owners_task(store: TaskStore) -> None:
    store.add_callback("someone-elses", URL, owner="mallory", task_may_follow=True)
    task = store.create("x.job", owner="alice", task_id="someone-elses")
    run_to_completion(store, task.id)

    assert store.deliveries(task.id) == []
    assert store.callbacks(task.id, owner="alice") == []


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1/hook", CallbackRefused),
        ("http://10.0.0.8/hook", CallbackRefused),
        ("http://169.254.169.254/latest/meta-data", CallbackRefused),
        ("ftp://93.184.216.34/hook", CallbackRefused),
        ("", InvalidTaskData),
    ],
)
def test_a_refused_url_writes_nothing(store: TaskStore, url: str, kind: type[Exception]) -> None:
    task = store.create("x.job")
    with pytest.raises(kind) as raised:
        store.add_callback(task.id, url)

    assert "callback.url" in str(raised.value)
    assert store.callbacks(task.id) == []


def test_bad_arguments_are_refused(store: TaskStore) -> None:
    task = store.create("x.job")
    with pytest.raises(InvalidTaskData, match=r"callback\.events"):
        store.add_callback(task.id, URL, events="sometimes")
    with pytest.raises(InvalidTaskData, match=r"callback\.id"):
        store.add_callback(task.id, URL, callback_id="has space")
    assert store.callbacks(task.id) == []


def test_only_the_head_of_a_callbacks_queue_is_taken(store: TaskStore) -> None:
    task = store.create("x.job")
    store.add_callback(task.id, URL, events="all")
    run_to_completion(store, task.id)

    (first,) = store.take_deliveries(lease=LEASE)
    assert first.delivery.status is TaskStatus.WORKING
    assert first.delivery.tries == 1
    assert store.take_deliveries(lease=LEASE) == []  # the next waits behind the first

    assert store.settle_delivery(first.delivery, Settlement.delivered(204))
    (second,) = store.take_deliveries(lease=LEASE)
    assert second.delivery.status is TaskStatus.COMPLETED


def test_a_retry_keeps_the_queue_waiting_until_it_is_due(store: TaskStore) -> None:
    task = store.create("x.job")
    store.add_callback(task.id, URL, events="all")
    run_to_completion(store, task.id)
    (first,) = store.take_deliveries(lease=LEASE)

    later = datetime.now(UTC) + timedelta(hours=1)
    assert store.settle_delivery(first.delivery, Settlement.retry(later, "HTTP 503", 503))
    assert store.take_deliveries(lease=LEASE) == []
    retried, behind = store.deliveries(task.id)
    assert (retried.state, retried.last_error, retried.response_status) == (
        DeliveryState.PENDING,
        "HTTP 503",
        503,
    )
    assert behind.next_try_at == retried.next_try_at  # not due before the head


def test_a_dead_delivery_lets_the_next_go_and_can_be_revived(store: TaskStore) -> None:
    task = store.create("x.job")
    store.add_callback(task.id, URL, events="all")
    run_to_completion(store, task.id)
    (first,) = store.take_deliveries(lease=LEASE)
    assert store.settle_delivery(first.delivery, Settlement.dead("HTTP 410", 410))

    (second,) = store.take_deliveries(lease=LEASE)
    assert second.delivery.status is TaskStatus.COMPLETED
    assert store.delivery_counts()[DeliveryState.DEAD] == 1

    revived = store.redeliver(task.id, first.delivery.id)
    assert revived.state is DeliveryState.PENDING
    with pytest.raises(TaskNotFound):
        store.redeliver(task.id, first.delivery.id)  # no longer dead


def test_a_lease_that_ran_out_is_taken_again_and_the_late_settlement_is_void(
    store: TaskStore,
) -> None:
    task = store.create("x.job")
    store.add_callback(task.id, URL)
    run_to_completion(store, task.id)
    (lost,) = store.take_deliveries(lease=timedelta(milliseconds=1))
    import time

    time.sleep(0.05)
    (again,) = store.take_deliveries(lease=LEASE)

    assert again.delivery.id == lost.delivery.id
    assert again.delivery.tries == 2
    assert not store.settle_delivery(lost.delivery, Settlement.delivered(200))
    assert store.settle_delivery(again.delivery, Settlement.delivered(200))
    assert store.deliveries(task.id)[0].state is DeliveryState.DELIVERED


def test_removing_a_callback_drops_its_pending_deliveries(store: TaskStore) -> None:
    task = store.create("x.job")
    store.add_callback(task.id, URL, events="all")
    store.update(task.id, status="working")

    assert store.remove_callback(task.id) == 1
    assert store.deliveries(task.id) == []
    assert store.take_deliveries(lease=LEASE) == []


def test_deleting_the_task_deletes_its_callbacks_and_deliveries(store: TaskStore) -> None:
    task = store.create("x.job")
    store.add_callback(task.id, URL)
    run_to_completion(store, task.id)
    store.delete(task.id)

    assert store.callbacks(task.id) == []
    assert store.delivery_counts() == dict.fromkeys(DeliveryState, 0)


def test_the_trigger_and_the_records_carry_the_same_snapshot_fields() -> None:
    # The migration keeps its own copy of the list, as a migration must not change
    # with the code: the two must say the same.
    migration = importlib.import_module("queuestore.store.sql.migrations.versions.0009_push")

    assert set(migration._SNAPSHOT_FIELDS) == SNAPSHOT_FIELDS
