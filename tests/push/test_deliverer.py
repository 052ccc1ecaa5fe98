"""The deliverer in one process: backoff, settling, formats, observers, on the in-memory store.

The receiver here is a thread of the test process; tests/integration/test_push.py
runs real deliverer and receiver processes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from queuestore import (
    CallbackFormat,
    Deliverer,
    DeliveryPolicy,
    DeliveryState,
    InMemoryTaskStore,
    SigningSecret,
    TaskStatus,
    UrlPolicy,
)
from queuestore.core.callbacks import Delivery
from queuestore.push.sender import CallFailed

SECRET = SigningSecret.generate()


class Hook:
    """A receiver thread that answers each request with the next of ``answers`` (then 204)."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[dict[str, str], bytes]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(hook.answers.pop(0) if hook.answers else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    made = Hook([])
    yield made
    made.close()


@pytest.fixture
def store() -> InMemoryTaskStore:
    return InMemoryTaskStore(url_policy=UrlPolicy.allowing("127.0.0.1"))


QUICK = DeliveryPolicy(timeout=2, backoff=0.01, backoff_max=0.02, lease=timedelta(seconds=5))


class Counting:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def delivered(self, delivery: Delivery, delay: float) -> None:
        assert delay >= 0
        self.seen.append(("delivered", delivery.status.value))

    def retried(self, delivery: Delivery, error: str) -> None:
        self.seen.append(("retried", error))

    def failed(self, delivery: Delivery, error: str) -> None:
        self.seen.append(("failed", error))


def finished_task(store: InMemoryTaskStore, url: str, events: str = "terminal") -> str:
    task = store.create("x.job")
    store.add_callback(task.id, url, events=events)
    store.update(task.id, status="working")
    store.update(task.id, status="completed", result={"n": 1})
    return task.id


def test_backoff_doubles_up_to_its_ceiling_with_jitter() -> None:
    policy = DeliveryPolicy(backoff=1.0, backoff_max=8.0)
    for tries, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (10, 8.0)]:
        delays = [policy.delay(tries) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered


def test_a_policy_refuses_a_lease_no_longer_than_the_timeout() -> None:
    with pytest.raises(ValueError, match="lease"):
        DeliveryPolicy(timeout=30, lease=timedelta(seconds=30))


def test_a_failure_is_retried_until_the_maximum_age_then_dead() -> None:
    policy = DeliveryPolicy(backoff=1, backoff_max=1, max_age=timedelta(minutes=1))
    now = datetime.now(UTC)
    young = Delivery.model_validate(
        {
            "id": 1,
            "event_id": "e",
            "task_id": "t",
            "callback_id": "c",
            "url": "u",
            "status": "completed",
            "version": 2,
            "tries": 1,
            "created_at": now,
        }
    )
    old = young.model_copy(update={"created_at": now - timedelta(minutes=5)})

    assert (
        policy.settle(young, CallFailed("HTTP 503", status=503), now).state is DeliveryState.PENDING
    )
    assert policy.settle(old, CallFailed("HTTP 503", status=503), now).state is DeliveryState.DEAD
    refused = CallFailed("HTTP 410", status=410, retryable=False)
    assert policy.settle(young, refused, now).state is DeliveryState.DEAD


def test_a_delivery_is_signed_and_sent_once(store: InMemoryTaskStore, hook: Hook) -> None:
    task_id = finished_task(store, hook.url)
    observer = Counting()
    deliverer = Deliverer(store, secrets=[SECRET], policy=QUICK, observer=observer)

    assert deliverer.run_once() == 1
    assert deliverer.run_once() == 0
    ((headers, body),) = hook.requests
    event = Webhook(str(SECRET)).verify(body, headers)
    assert (event["type"], event["data"]["id"], event["data"]["result"]) == (
        "task.completed",
        task_id,
        {"n": 1},
    )
    assert observer.seen == [("delivered", "completed")]
    (delivery,) = store.deliveries(task_id)
    assert (delivery.state, delivery.response_status) == (DeliveryState.DELIVERED, 204)


def test_a_5xx_is_retried_with_the_same_id_and_a_410_is_dead(store: InMemoryTaskStore) -> None:
    flaky = Hook([503, 200])
    gone = Hook([410])
    try:
        retried = finished_task(store, flaky.url)
        dead = finished_task(store, gone.url)
        observer = Counting()
        deliverer = Deliverer(store, policy=QUICK, observer=observer)
        deadline = time.monotonic() + 5
        while len(flaky.requests) < 2 and time.monotonic() < deadline:
            deliverer.run_once()
            time.sleep(0.01)

        assert [h["webhook-id"] for h, _ in flaky.requests] == [
            flaky.requests[0][0]["webhook-id"]
        ] * 2
        assert "webhook-signature" not in flaky.requests[0][0]  # no secret: unsigned
        assert store.deliveries(retried)[0].state is DeliveryState.DELIVERED
        assert store.deliveries(retried)[0].tries == 2
        assert (store.deliveries(dead)[0].state, store.deliveries(dead)[0].last_error) == (
            DeliveryState.DEAD,
            "HTTP 410",
        )
        assert sorted(kind for kind, _ in observer.seen) == ["delivered", "failed", "retried"]
    finally:
        flaky.close()
        gone.close()


def test_a_format_the_deliverer_cannot_write_is_dead(store: InMemoryTaskStore, hook: Hook) -> None:
    task = store.create("x.job")
    store.add_callback(task.id, hook.url, format="a2a")
    store.update(task.id, status="working")
    store.update(task.id, status="completed")

    Deliverer(store, policy=QUICK).run_once()

    (delivery,) = store.deliveries(task.id)
    assert delivery.state is DeliveryState.DEAD
    assert "a2a" in (delivery.last_error or "")
    assert hook.requests == []


def test_a_format_writes_the_body_and_its_headers(store: InMemoryTaskStore, hook: Hook) -> None:
    task = store.create("x.job")
    store.add_callback(task.id, hook.url, format="a2a", token="t-1")
    store.update(task.id, status="working")
    store.update(task.id, status="completed")

    def custom(delivery: Delivery, callback: Any) -> tuple[bytes, dict[str, str]]:
        return json.dumps({"s": delivery.status.value}).encode(), {"X-Token": callback.token}

    Deliverer(store, policy=QUICK, formats={CallbackFormat.A2A: custom}).run_once()

    ((headers, body),) = hook.requests
    assert (json.loads(body), headers["x-token"]) == ({"s": "completed"}, "t-1")
    assert "webhook-id" in headers


def test_a_running_deliverer_sends_each_change_in_order(
    store: InMemoryTaskStore, hook: Hook
) -> None:
    deliverer = Deliverer(store, policy=QUICK, poll_interval=0.05)
    thread = deliverer.start()
    try:
        task_ids = [finished_task(store, hook.url, events="all") for _ in range(5)]
        deadline = time.monotonic() + 10
        while len(hook.requests) < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        deliverer.stop()
        thread.join(timeout=10)

    assert not thread.is_alive()
    by_task: dict[str, list[str]] = {}
    for _, body in hook.requests:
        data = json.loads(body)["data"]
        by_task.setdefault(data["id"], []).append(data["status"])
    assert by_task == {task_id: ["working", "completed"] for task_id in task_ids}
    assert all(d.state is DeliveryState.DELIVERED for t in task_ids for d in store.deliveries(t))
    assert {d.status for d in store.deliveries(task_ids[0])} == {
        TaskStatus.WORKING,
        TaskStatus.COMPLETED,
    }
