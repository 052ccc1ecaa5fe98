"""Push through real processes: ``queuestore deliver``, a receiver, a Celery worker, PostgreSQL.

The receiver (``receiver.py``) logs every request it gets, with its headers
and body. Each test says what a receiver of a deployment's callbacks can
count on: signed events it verifies with the Standard Webhooks reference
package, each event once after an outage, in the order of its task's
changes, and nothing lost when a deliverer is killed mid-call (a duplicate
keeps its ``webhook-id``).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from standardwebhooks.webhooks import Webhook

from queuestore import CallbackRequest, DeliveryState, TaskStatus
from queuestore.core.callbacks import CallbackEvents
from tests.integration.harness import (
    PUSH,
    SIGNING_SECRET,
    DeploymentFactory,
    Receiver,
    free_port,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ReceiverFactory = Callable[..., Receiver]
OUTAGE = 30.0
"""How long the receiver is down in the outage test (the issue's 30 s)."""


DELIVERED = ("queuestore_deliveries_total", (("outcome", "delivered"),))


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    """A process's metrics, by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(page.read().decode())
            for sample in family.samples
        }


def statuses_by_task(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    by_task: dict[str, list[str]] = defaultdict(list)
    for event in events:
        by_task[event["data"]["id"]].append(event["data"]["status"])
    return dict(by_task)


@pytest.mark.redis
def test_a_submitted_jobs_changes_reach_its_callback_signed_and_in_order(
    deployment: DeploymentFactory, receiver: ReceiverFactory
) -> None:
    deployed = deployment("redis", "postgres", **PUSH)
    deployed.start_worker()
    metrics_port = free_port()
    deployed.start_deliverer(QUEUESTORE_METRICS_PORT=str(metrics_port))
    hook = receiver()

    task = deployed.queue.submit(
        "tests.sleep",
        {"seconds": 0.2},
        callback=CallbackRequest(url=hook.url, events=CallbackEvents.ALL),
    )
    requests = hook.wait_for(2)
    store = deployed.queue.store

    verifier = Webhook(str(SIGNING_SECRET))
    events = [verifier.verify(r["body"], r["headers"]) for r in requests]  # raises if forged
    assert [(e["type"], e["data"]["id"]) for e in events] == [
        ("task.working", task.id),
        ("task.completed", task.id),
    ]
    assert events[1]["data"]["result"] == {"attempt": 1, "slept": 0.2}
    assert len({r["headers"]["webhook-id"] for r in requests}) == 2
    wait_for(
        lambda: all(
            d.state is DeliveryState.DELIVERED for d in deployed.queue.store.deliveries(task.id)
        ),
        timeout=10,
        what="both deliveries settled",
    )
    assert [d.status for d in store.deliveries(task.id)] == [
        TaskStatus.WORKING,
        TaskStatus.COMPLETED,
    ]

    # The deliverer counts an attempt just after it settles it: scrape until both show.
    def counted() -> Samples | None:
        samples = scrape(metrics_port)
        return samples if samples.get(DELIVERED) == 2 else None

    samples = wait_for(
        counted,
        timeout=10,
        what="the deliverer's metrics counting both deliveries",
    )
    assert samples[("queuestore_delivery_delay_seconds_count", ())] == 2
    assert samples[("queuestore_deliveries_in_store", (("state", "delivered"),))] == 2


def test_a_receiver_down_for_30_s_gets_every_event_once_after_in_order(
    deployment: DeploymentFactory, receiver: ReceiverFactory
) -> None:
    deployed = deployment("filesystem", "postgres", **PUSH)
    store = deployed.queue.store
    deployed.start_deliverer()
    hook = receiver()
    port = hook.port
    hook.stop()

    tasks = [store.create("tests.manual") for _ in range(5)]
    for task in tasks:
        store.add_callback(task.id, f"http://127.0.0.1:{port}/hook", events="all")
    went_down = time.monotonic()
    for task in tasks:  # every task: working, input required, working, completed
        store.update(task.id, status="working")
        store.update(task.id, status="input_required")
    for task in tasks:
        store.update(task.id, status="working")
        store.update(task.id, status="completed", result={"n": 1})
    wait_for(
        lambda: all(d.tries >= 2 for t in tasks for d in store.deliveries(t.id)[:1]),
        timeout=10,
        what="the deliverer failing against the down receiver",
    )
    time.sleep(max(0.0, OUTAGE - (time.monotonic() - went_down)))
    assert hook.requests() == []
    hook.start()  # back, on the same port

    requests = hook.wait_for(20, timeout=30)
    time.sleep(2)  # anything more would be a duplicate

    requests = hook.requests()
    ids = [r["headers"]["webhook-id"] for r in requests]
    assert len(ids) == len(set(ids)) == 20
    expected = ["working", "input_required", "working", "completed"]
    assert statuses_by_task([json.loads(r["body"]) for r in requests]) == {
        task.id: expected for task in tasks
    }
    for task in tasks:
        assert {d.state for d in store.deliveries(task.id)} == {DeliveryState.DELIVERED}


def test_a_deliverer_killed_mid_call_loses_nothing(
    deployment: DeploymentFactory, receiver: ReceiverFactory
) -> None:
    deployed = deployment("filesystem", "postgres", **PUSH)
    store = deployed.queue.store
    slow = receiver(delay=2.0)  # answers 2 s after it logged the request
    patient = {"QUEUESTORE_DELIVERY_TIMEOUT": "5", "QUEUESTORE_DELIVERY_LEASE": "6"}
    first = deployed.start_deliverer("first", **patient)

    task = store.create("tests.manual")
    store.add_callback(task.id, slow.url, events="all")
    store.update(task.id, status="working")
    store.update(task.id, status="completed", result={"n": 1})
    slow.wait_for(1)  # the first deliverer is in the call
    first.kill()
    deployed.start_deliverer("second", **patient)  # takes it again once the lease runs out

    requests = slow.wait_for(3, timeout=30)
    wait_for(
        lambda: all(d.state is DeliveryState.DELIVERED for d in store.deliveries(task.id)),
        timeout=30,
        what="both deliveries delivered",
    )
    ids = [r["headers"]["webhook-id"] for r in requests]
    statuses = [json.loads(r["body"])["data"]["status"] for r in requests]
    assert ids[0] == ids[1]  # the duplicate of the killed call: the same id
    assert statuses == ["working", "working", "completed"]
    assert [d.tries for d in store.deliveries(task.id)] == [2, 1]
