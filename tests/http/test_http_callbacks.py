"""Push over HTTP: a create's ``callback``, a task's deliveries, and redelivering a dead one.

Most tests run the app in-process on the in-memory store, whose URL policy
also calls 127.0.0.1; the last runs a real server, worker and PostgreSQL,
where the database's trigger commits the deliveries.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from celery import Celery
from fastapi.testclient import TestClient

from queuestore import ANY, InMemoryTaskStore, Settings, TaskQueue, TaskStore
from queuestore.core.callbacks import CallbackEvents, Delivery
from queuestore.core.urls import UrlPolicy
from queuestore.http import create_app
from queuestore.store.deliveries import Settlement
from tests.http.http_deployment import HttpDeployment
from tests.http.http_support import assert_problem, create, wait_for_status

HOOK = "http://127.0.0.1:9/hook"
"""A callback URL the in-memory store's policy accepts (nothing is sent in these tests)."""

PUBLIC_HOOK = "https://93.184.216.34/hook"
"""A URL any deployment accepts: a public address, no name to resolve (no deliverer runs)."""

ALICE = {"Authorization": "Bearer ta"}
BOB = {"Authorization": "Bearer tb"}

DELIVERY_FIELDS = {
    "id",
    "event_id",
    "task_id",
    "callback_id",
    "url",
    "status",
    "version",
    "state",
    "tries",
    "created_at",
    "next_try_at",
    "delivered_at",
    "last_error",
    "response_status",
}


@pytest.fixture
def queue() -> Iterator[TaskQueue]:
    app = Celery("http-callbacks", broker="memory://", set_as_current=False)
    made = TaskQueue(InMemoryTaskStore(url_policy=UrlPolicy.allowing("127.0.0.1")), app)
    yield made
    app.close()


@pytest.fixture
def http(queue: TaskQueue) -> Iterator[TestClient]:
    settings = Settings(http_tokens={"ta": "alice", "tb": "bob"})
    with TestClient(create_app(settings, queue=queue)) as client:
        yield client


def finish(store: TaskStore, task_id: str) -> None:
    """Run the task to ``completed`` through the store, as a worker would."""
    store.update(task_id, status="working")
    store.update(task_id, status="completed", result=1)


def kill(store: TaskStore, task_id: str) -> Delivery:
    """Take the task's due delivery and settle it dead, as a refusing receiver makes it."""
    for _ in range(100):
        taken = [o for o in store.take_deliveries(limit=100) if o.delivery.task_id == task_id]
        if taken:
            (outgoing,) = taken
            assert store.settle_delivery(outgoing.delivery, Settlement.dead("HTTP 410", 410))
            return outgoing.delivery
        time.sleep(0.05)
    raise AssertionError(f"no delivery of {task_id} became due")


# -- a create's callback ---------------------------------------------------------------


def test_a_create_with_a_callback_registers_it(http: TestClient, queue: TaskQueue) -> None:
    body = {"name": "job", "callback": {"url": HOOK, "events": "all"}}
    response = http.post("/tasks", json=body, headers=ALICE)
    assert response.status_code == 201, response.text
    task_id = response.json()["id"]
    (callback,) = queue.store.callbacks(task_id, owner="alice")
    assert (callback.id, callback.url, callback.events) == ("default", HOOK, CallbackEvents.ALL)
    assert "callback" not in response.json()  # the task's view is unchanged

    plain = http.post("/tasks", json={"name": "job", "callback": {"url": HOOK}}, headers=ALICE)
    assert plain.status_code == 201, plain.text
    (callback,) = queue.store.callbacks(plain.json()["id"], owner="alice")
    assert callback.events is CallbackEvents.TERMINAL
    without = http.post("/tasks", json={"name": "job"}, headers=ALICE)
    assert queue.store.callbacks(without.json()["id"], owner=ANY) == []


def test_add_callback_adds_under_another_id_and_replaces_the_creates_without_one(
    http: TestClient, queue: TaskQueue
) -> None:
    # What docs/howto/receive-webhooks.md promises of TaskStore.add_callback.
    body = {"name": "job", "callback": {"url": HOOK}}
    task_id = http.post("/tasks", json=body, headers=ALICE).json()["id"]
    finish(queue.store, task_id)
    other = "http://127.0.0.1:9/audit"

    queue.store.add_callback(task_id, other, callback_id="audit")
    callbacks = {c.id: c.url for c in queue.store.callbacks(task_id, owner=ANY)}
    assert callbacks == {"default": HOOK, "audit": other}
    sent = [(d.callback_id, d.status) for d in queue.store.deliveries(task_id)]
    assert sent == [("default", "completed"), ("audit", "completed")]  # its end, at once

    queue.store.add_callback(task_id, other)  # no id: the create's, replaced
    callbacks = {c.id: c.url for c in queue.store.callbacks(task_id, owner=ANY)}
    assert callbacks == {"default": other, "audit": other}
    assert len(queue.store.deliveries(task_id)) == 2  # nothing sent again


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://10.0.0.1/x", "private address 10.0.0.1"),
        ("http://169.254.169.254/", "169.254.169.254"),
        ("ftp://127.0.0.1/x", "scheme 'ftp' is not allowed"),
        ("http://user:secret@127.0.0.1/", "credentials"),
        ("/relative", "not an absolute URL"),
    ],
)
def test_a_refused_callback_url_is_a_problem_and_writes_nothing(
    http: TestClient, queue: TaskQueue, url: str, reason: str
) -> None:
    key = {"Idempotency-Key": uuid.uuid4().hex}
    before = queue.store.count(owner=ANY)
    body = {"name": "job", "callback": {"url": url}}
    response = http.post("/tasks", json=body, headers=ALICE | key)
    problem = assert_problem(response, 422, "callback-refused")
    assert url in problem["detail"], problem
    assert reason in problem["detail"], problem
    assert problem["detail"].startswith("callback.url: ")
    (error,) = problem["errors"]
    assert error["loc"] == ["body", "callback", "url"]
    assert reason in error["msg"]
    assert queue.store.count(owner=ANY) == before
    # Nothing was written: the key is still free.
    fixed = http.post(
        "/tasks", json={"name": "job", "callback": {"url": HOOK}}, headers=ALICE | key
    )
    assert fixed.status_code == 201, fixed.text


@pytest.mark.parametrize(
    "callback",
    [
        {"url": HOOK, "events": "some"},
        {"url": HOOK, "events": None},
        {"events": "all"},
        {"url": HOOK, "secret": "x"},
        {"url": ""},
        {"url": "https://127.0.0.1/" + "a" * 2048},
        "http://127.0.0.1/",
    ],
)
def test_a_malformed_callback_is_refused(
    http: TestClient, queue: TaskQueue, callback: object
) -> None:
    response = http.post("/tasks", json={"name": "job", "callback": callback}, headers=ALICE)
    problem = assert_problem(response, 422, "invalid-request")
    assert problem["errors"][0]["loc"][:2] == ["body", "callback"], problem
    assert queue.store.count(owner=ANY) == 0


def test_a_batch_item_may_have_a_callback(http: TestClient, queue: TaskQueue) -> None:
    items = [{"name": "job"}, {"name": "job", "callback": {"url": HOOK, "events": "all"}}]
    response = http.post("/tasks:batch", json={"tasks": items}, headers=ALICE)
    assert response.status_code == 201, response.text

    first, second = (task["id"] for task in response.json()["tasks"])
    assert queue.store.callbacks(first, owner=ANY) == []
    (callback,) = queue.store.callbacks(second, owner=ANY)
    assert (callback.url, callback.events, callback.owner) == (HOOK, CallbackEvents.ALL, "alice")


def test_a_batch_item_with_a_refused_callback_creates_nothing(
    http: TestClient, queue: TaskQueue
) -> None:
    items = [{"name": "job"}, {"name": "job", "callback": {"url": "http://10.0.0.1/x"}}]
    response = http.post("/tasks:batch", json={"tasks": items}, headers=ALICE)

    # The same problem as a single create's, naming the item.
    problem = assert_problem(response, 422, "callback-refused")
    assert problem["detail"].startswith("tasks[1].callback.url: "), problem
    assert "private address 10.0.0.1" in problem["detail"]
    (error,) = problem["errors"]
    assert error["loc"] == ["body", "tasks", 1, "callback", "url"]
    assert error["type"] == "callback-refused"
    assert "private address 10.0.0.1" in error["msg"]
    assert queue.store.count(owner=ANY) == 0


def test_a_retried_create_must_ask_for_the_same_callback(
    http: TestClient, queue: TaskQueue
) -> None:
    key = {"Idempotency-Key": uuid.uuid4().hex}
    body = {"name": "job", "callback": {"url": HOOK, "events": "all"}}
    first = http.post("/tasks", json=body, headers=ALICE | key)
    assert first.status_code == 201, first.text
    again = http.post("/tasks", json=body, headers=ALICE | key)
    assert again.status_code == 200, again.text
    assert again.headers["idempotent-replayed"] == "true"
    for other in (
        {"name": "job", "callback": {"url": HOOK + "2", "events": "all"}},
        {"name": "job", "callback": {"url": HOOK}},
        {"name": "job"},
    ):
        assert_problem(http.post("/tasks", json=other, headers=ALICE | key), 422)
    (callback,) = queue.store.callbacks(first.json()["id"], owner=ANY)
    assert (callback.url, callback.events) == (HOOK, CallbackEvents.ALL)
    assert queue.store.count(owner=ANY) == 1


# -- deliveries ------------------------------------------------------------------------


def test_deliveries_are_listed_oldest_first_without_the_task(
    http: TestClient, queue: TaskQueue
) -> None:
    body = {"name": "job", "callback": {"url": HOOK, "events": "all"}}
    task_id = http.post("/tasks", json=body, headers=ALICE).json()["id"]
    url = f"/tasks/{task_id}/deliveries"
    assert http.get(url, headers=ALICE).json() == {"deliveries": []}

    finish(queue.store, task_id)
    response = http.get(url, headers=ALICE)
    assert response.status_code == 200, response.text
    deliveries = response.json()["deliveries"]
    assert [d["status"] for d in deliveries] == ["working", "completed"]
    assert all(set(d) == DELIVERY_FIELDS for d in deliveries), deliveries
    first, last = deliveries
    assert first["id"] < last["id"]
    assert first["version"] < last["version"]
    assert (last["task_id"], last["callback_id"], last["url"]) == (task_id, "default", HOOK)
    assert (last["state"], last["tries"], last["last_error"]) == ("pending", 0, None)
    assert last["event_id"] != first["event_id"]


def test_only_terminal_changes_are_delivered_by_default(http: TestClient, queue: TaskQueue) -> None:
    body = {"name": "job", "callback": {"url": HOOK}}
    task_id = http.post("/tasks", json=body, headers=ALICE).json()["id"]
    finish(queue.store, task_id)
    deliveries = http.get(f"/tasks/{task_id}/deliveries", headers=ALICE).json()["deliveries"]
    assert [d["status"] for d in deliveries] == ["completed"]


def test_deliveries_are_the_owner_s_only(http: TestClient, queue: TaskQueue) -> None:
    body = {"name": "job", "callback": {"url": HOOK}}
    task_id = http.post("/tasks", json=body, headers=ALICE).json()["id"]
    finish(queue.store, task_id)
    dead = kill(queue.store, task_id)
    deliveries = f"/tasks/{task_id}/deliveries"
    redeliver = f"{deliveries}/{dead.id}/redeliver"
    for headers in (BOB, {}):
        assert_problem(http.get(deliveries, headers=headers), 404, "task-not-found")
        assert_problem(http.post(redeliver, headers=headers), 404, "delivery-not-found")
    assert queue.store.deliveries(task_id)[0].state == "dead"  # untouched
    unknown = "AAAAAAAAAAAAAAAAAAAAAA"
    assert_problem(http.get(f"/tasks/{unknown}/deliveries", headers=ALICE), 404)
    assert_problem(http.get("/tasks/not%20an%20id/deliveries", headers=ALICE), 422)

    # An anonymous caller's task is read by its id, as GET /tasks/{id} reads it.
    anonymous = http.post("/tasks", json=body).json()["id"]
    finish(queue.store, anonymous)
    assert len(http.get(f"/tasks/{anonymous}/deliveries").json()["deliveries"]) == 1
    assert_problem(http.get(f"/tasks/{anonymous}/deliveries", headers=ALICE), 404)


def test_anonymous_callers_get_401_where_owners_are_required() -> None:
    app = Celery("http-callbacks-owners", broker="memory://", set_as_current=False)
    store = InMemoryTaskStore(require_owner=True, url_policy=UrlPolicy.allowing("127.0.0.1"))
    queue = TaskQueue(store, app)
    try:
        with TestClient(create_app(Settings(http_tokens={"ta": "alice"}), queue=queue)) as http:
            body = {"name": "job", "callback": {"url": HOOK}}
            task_id = http.post("/tasks", json=body, headers=ALICE).json()["id"]
            deliveries = f"/tasks/{task_id}/deliveries"
            assert http.get(deliveries, headers=ALICE).status_code == 200
            assert_problem(http.get(deliveries), 401, "unauthorized")
            assert_problem(http.post(f"{deliveries}/1/redeliver"), 401, "unauthorized")
            assert_problem(http.post("/tasks", json=body), 401, "unauthorized")
    finally:
        app.close()


def test_a_dead_delivery_is_redelivered_and_only_a_dead_one(
    http: TestClient, queue: TaskQueue
) -> None:
    body = {"name": "job", "callback": {"url": HOOK}}
    task_id = http.post("/tasks", json=body, headers=ALICE).json()["id"]
    finish(queue.store, task_id)
    dead = kill(queue.store, task_id)
    url = f"/tasks/{task_id}/deliveries"
    (shown,) = http.get(url, headers=ALICE).json()["deliveries"]
    assert (shown["state"], shown["tries"]) == ("dead", 1)
    assert (shown["last_error"], shown["response_status"]) == ("HTTP 410", 410)
    assert shown["next_try_at"] is None

    response = http.post(f"{url}/{dead.id}/redeliver", headers=ALICE)
    assert response.status_code == 200, response.text
    revived = response.json()
    assert set(revived) == DELIVERY_FIELDS
    assert (revived["id"], revived["state"]) == (dead.id, "pending")
    assert revived["event_id"] == dead.event_id  # the receiver de-duplicates by it
    assert revived["next_try_at"] is not None
    assert http.get(url, headers=ALICE).json()["deliveries"] == [revived]

    # Pending now: not dead, so not found; nor is one that never was.
    for delivery_id in (dead.id, dead.id + 1000):
        problem = assert_problem(
            http.post(f"{url}/{delivery_id}/redeliver", headers=ALICE), 404, "delivery-not-found"
        )
        assert str(delivery_id) in problem["detail"]
        assert problem["task_id"] == task_id
    # A dead delivery is redelivered through its own task only.
    other = http.post("/tasks", json=body, headers=ALICE).json()["id"]
    finish(queue.store, other)
    others = kill(queue.store, other)
    assert_problem(http.post(f"{url}/{others.id}/redeliver", headers=ALICE), 404)
    for bad in ("0", "-1", "x", str(2**63)):
        assert_problem(http.post(f"{url}/{bad}/redeliver", headers=ALICE), 422, "invalid-request")


def test_the_openapi_document_states_the_callback_and_the_deliveries(http: TestClient) -> None:
    document = http.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    callback = schemas["CreateTask"]["properties"]["callback"]["anyOf"][0]
    assert callback == {"$ref": "#/components/schemas/CreateCallback"}
    assert schemas["CreateCallback"]["required"] == ["url"]
    assert schemas["CreateCallback"]["additionalProperties"] is False
    assert set(schemas["CallbackEvents"]["enum"]) == {"terminal", "all"}
    assert "callback" in schemas["CreateTaskItem"]["properties"]
    assert set(schemas["DeliveryView"]["properties"]) == DELIVERY_FIELDS
    paths = document["paths"]
    listed = paths["/tasks/{task_id}/deliveries"]["get"]
    assert listed["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/DeliveryList"
    }
    redeliver = paths["/tasks/{task_id}/deliveries/{delivery_id}/redeliver"]["post"]
    assert {"200", "401", "404", "422", "503"} <= set(redeliver["responses"])
    (delivery_id,) = [p for p in redeliver["parameters"] if p["name"] == "delivery_id"]
    assert delivery_id["schema"]["minimum"] == 1


# -- on PostgreSQL, through a real server and worker ------------------------------------


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.integration
def test_a_jobs_end_is_a_delivery_on_postgresql(
    alice: httpx.Client, bob: httpx.Client, pg: HttpDeployment
) -> None:
    store = pg.deployment.queue.store
    task = create(alice, "http.add", input={"a": 1, "b": 2}, callback={"url": PUBLIC_HOOK})
    assert [c.url for c in store.callbacks(task["id"], owner="alice")] == [PUBLIC_HOOK]
    done = wait_for_status(alice, task["id"], "completed")
    url = f"/tasks/{task['id']}/deliveries"
    (delivery,) = alice.get(url).json()["deliveries"]
    assert (delivery["status"], delivery["version"]) == ("completed", done["version"])
    assert (delivery["state"], delivery["url"]) == ("pending", PUBLIC_HOOK)
    assert_problem(bob.get(url), 404, "task-not-found")

    dead = kill(store, task["id"])
    assert dead.id == delivery["id"]
    assert_problem(bob.post(f"{url}/{dead.id}/redeliver"), 404, "delivery-not-found")
    revived = alice.post(f"{url}/{dead.id}/redeliver")
    assert revived.status_code == 200, revived.text
    assert revived.json()["state"] == "pending"
    assert_problem(alice.post(f"{url}/{dead.id}/redeliver"), 404, "delivery-not-found")

    before = store.count(owner=ANY)
    refused = alice.post(
        "/tasks",
        json={
            "name": "http.add",
            "input": {"a": 1, "b": 2},
            "callback": {"url": "http://169.254.169.254/"},
        },
    )
    assert_problem(refused, 422, "callback-refused")
    assert store.count(owner=ANY) == before
    store.remove_callback(task["id"])  # nothing is left for a deliverer of the session
