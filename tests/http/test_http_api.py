"""The HTTP API over a real uvicorn process, a real worker and PostgreSQL.

Every endpoint, idempotent creates under concurrent retries, owner isolation,
the event stream receiving a worker's changes, and bad input on every
endpoint: a clear 4xx, a problem document, and nothing written.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from types import ModuleType
from typing import Any

import httpx
import pytest
from sqlalchemy import make_url

from queuestore import ANY
from tests.http.http_deployment import TRUSTED_HEADER, Api, HttpDeployment
from tests.http.http_support import (
    assert_problem,
    create,
    events,
    raw_events,
    snapshot,
    wait_for_status,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.integration]


# -- health -------------------------------------------------------------------


def test_health_probes(api: Api) -> None:
    with api.client() as client:
        assert client.get("/livez").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"status": "ok"}


# -- the verbs ----------------------------------------------------------------


def test_create_runs_the_job_and_get_shows_result_and_artifacts(alice: httpx.Client) -> None:
    response = alice.post(
        "/tasks",
        json={
            "name": "http.add",
            "input": {"a": 2, "b": 3},
            "context_id": "ctx-1",
            "ttl": 60,
            "metadata": {"origin": "test"},
        },
    )
    assert response.status_code == 201, response.text
    created = response.json()
    assert response.headers["location"].endswith(f"/tasks/{created['id']}")
    assert created["status"] == "submitted"
    assert created["owner"] == "alice"
    assert created["ttl"] == 60
    done = wait_for_status(alice, created["id"], "completed")
    assert done["result"] == 5
    assert done["metadata"] == {"origin": "test"}
    assert done["artifacts"] == [
        {
            "artifact_id": "sum",
            "name": "sum.txt",
            "media_type": "text/plain",
            "parts": ["2+3"],
            "metadata": {},
        }
    ]
    assert set(done) >= {"created_at", "updated_at", "started_at", "finished_at", "version"}
    assert "worker_id" not in done
    assert "answers" not in done


def test_input_checked_against_the_registered_job(alice: httpx.Client, pg: HttpDeployment) -> None:
    before = snapshot(pg.deployment.queue.store)
    response = alice.post("/tasks", json={"name": "http.add", "input": {"a": 1, "c": 2}})
    assert_problem(response, 422, "invalid-task-data")
    typed = alice.post("/tasks", json={"name": "http.add", "input": {"a": "one", "b": 2}})
    assert_problem(typed, 422, "invalid-task-data")
    assert typed.json()["detail"].startswith("input.a: does not fit job 'http.add'")
    assert snapshot(pg.deployment.queue.store) == before


def test_a_parents_steps_and_children_are_listed(alice: httpx.Client) -> None:
    deadline = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    parent = create(alice, "http.fan", input={"numbers": [1, 2, 3]}, deadline=deadline, timeout=60)
    assert (parent["deadline_at"], parent["run_timeout"], parent["depth"]) == (
        deadline.replace("+00:00", "Z"),
        60,
        0,
    )

    done = wait_for_status(alice, parent["id"], "completed")

    assert done["result"] == 12
    steps = alice.get(f"/tasks/{parent['id']}/steps").json()["steps"]
    assert [(s["name"], s["kind"], s["status"], s["result"]) for s in steps] == [
        ("double", "step", "completed", [2, 4, 6])
    ]
    children = alice.get("/tasks", params={"parent_id": parent["id"]}).json()["tasks"]
    assert sorted(child["result"] for child in children) == [2, 4, 6]
    assert {(c["parent_id"], c["depth"], c["owner"]) for c in children} == {
        (parent["id"], 1, "alice")
    }
    assert {c["deadline_at"] for c in children} == {done["deadline_at"]}
    roots = alice.get("/tasks", params={"root": "true", "limit": 1000}).json()["tasks"]
    assert parent["id"] in {t["id"] for t in roots}
    assert not {c["id"] for c in children} & {t["id"] for t in roots}
    both = alice.get("/tasks", params={"root": "true", "parent_id": parent["id"]})
    assert both.json() == {"tasks": [], "next_cursor": None, "total": None}
    assert_problem(alice.get("/tasks/no-such-task/steps"), 404)


def test_list_filters_and_keyset_pages(alice: httpx.Client) -> None:
    context = f"ctx-{uuid.uuid4().hex[:8]}"
    made = [create(alice, "http.add", input={"a": n, "b": 0}, context_id=context) for n in range(5)]
    other = create(alice, "http.ask", context_id=context)
    for task in made:
        wait_for_status(alice, task["id"], "completed")
    wait_for_status(alice, other["id"], "input_required")

    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"context_id": context, "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = alice.get("/tasks", params=params).json()
        seen += [task["id"] for task in page["tasks"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    # Newest first, each once.
    assert seen == [other["id"], *reversed([task["id"] for task in made])]

    by_status = alice.get(
        "/tasks", params={"context_id": context, "status": ["input_required", "cancelled"]}
    ).json()
    assert [task["id"] for task in by_status["tasks"]] == [other["id"]]
    by_name = alice.get("/tasks", params={"context_id": context, "name": "http.add"}).json()
    assert len(by_name["tasks"]) == 5
    later = alice.get(
        "/tasks", params={"context_id": context, "updated_after": made[-1]["created_at"]}
    ).json()
    assert other["id"] in [task["id"] for task in later["tasks"]]
    far = alice.get(
        "/tasks", params={"context_id": context, "updated_after": "2999-01-01T00:00:00Z"}
    ).json()
    assert far == {"tasks": [], "next_cursor": None, "total": None}

    first = alice.get("/tasks", params={"context_id": context, "limit": 2}).json()
    # A cursor belongs to its filters.
    other_filters = alice.get("/tasks", params={"name": "http.add", "cursor": first["next_cursor"]})
    assert_problem(other_filters, 400, "invalid-cursor")


def test_cancel_stops_a_running_job(alice: httpx.Client) -> None:
    task = create(alice, "http.steps", input={"count": 200, "pause": 0.05})
    wait_for_status(alice, task["id"], "working")
    response = alice.post(f"/tasks/{task['id']}/cancel", json={"reason": "changed my mind"})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "cancelled"
    assert response.json()["status_message"] == "changed my mind"
    time.sleep(0.5)
    after = alice.get(f"/tasks/{task['id']}").json()
    assert after["status"] == "cancelled"
    assert after["progress"] is None or after["progress"] < 1

    again = alice.post(f"/tasks/{task['id']}/cancel")
    assert_problem(again, 409, "invalid-transition")
    assert alice.get(f"/tasks/{task['id']}").json()["version"] == after["version"]


def test_resume_answers_a_waiting_task(alice: httpx.Client) -> None:
    task = create(alice, "http.ask", input={"question": "Deploy?"})
    waiting = wait_for_status(alice, task["id"], "input_required")
    assert waiting["status_message"] == "Deploy?"
    response = alice.post(f"/tasks/{task['id']}/resume", json={"answer": {"go": True}})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "working"
    done = wait_for_status(alice, task["id"], "completed")
    assert done["result"] == {"answer": {"go": True}}

    again = alice.post(f"/tasks/{task['id']}/resume", json={"answer": "again"})
    assert_problem(again, 409, "invalid-transition")


def test_delete_finished_tasks_only(alice: httpx.Client, pg: HttpDeployment) -> None:
    live = create(alice, "http.ask")
    wait_for_status(alice, live["id"], "input_required")
    assert_problem(alice.delete(f"/tasks/{live['id']}"), 409, "task-live")
    assert alice.get(f"/tasks/{live['id']}").status_code == 200

    alice.post(f"/tasks/{live['id']}/cancel")
    response = alice.delete(f"/tasks/{live['id']}")
    assert response.status_code == 204
    assert response.content == b""
    assert_problem(alice.get(f"/tasks/{live['id']}"), 404, "task-not-found")
    assert_problem(alice.delete(f"/tasks/{live['id']}"), 404, "task-not-found")


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_create_with_a_delay_starts_the_job_no_earlier(alice: httpx.Client) -> None:
    # The servers' schedule_ahead is 1.35 s (90% of lease - ack_after): a 1 s delay is
    # published at once, with a countdown, and the worker holds it until the start.
    created = create(alice, "http.add", input={"a": 2, "b": 2}, delay=1)
    assert created["status"] == "submitted"
    start = instant(created["run_at"])
    assert timedelta(seconds=0.9) < start - instant(created["created_at"]) < timedelta(seconds=1.5)

    done = wait_for_status(alice, created["id"], "completed")
    assert done["result"] == 4
    assert instant(done["started_at"]) >= start
    assert done["run_at"] == created["run_at"]


def test_create_with_run_at_waits_in_the_store_until_its_start(
    alice: httpx.Client, pg: HttpDeployment
) -> None:
    start = datetime.now(UTC) + timedelta(hours=1)
    given = start.astimezone(timezone(timedelta(hours=-7, minutes=-30))).isoformat()
    created = create(alice, "http.add", input={"a": 1, "b": 1}, run_at=given)
    try:
        assert created["status"] == "submitted"
        assert instant(created["run_at"]) == start
        assert created["run_at"].endswith("Z")  # kept in UTC
        assert alice.get(f"/tasks/{created['id']}").json()["run_at"] == created["run_at"]

        # Long enough for the server's publish mark to be written, had it published one.
        time.sleep(1.5)
        store = pg.deployment.queue.store
        never_published = store.unpublished(timedelta(0), ahead=timedelta(hours=2), limit=1000)
        assert created["id"] in [task.id for task in never_published]
        assert alice.get(f"/tasks/{created['id']}").json()["status"] == "submitted"
    finally:
        alice.post(f"/tasks/{created['id']}/cancel")
    assert alice.get(f"/tasks/{created['id']}").json()["started_at"] is None


@pytest.mark.parametrize(
    ("start", "where"),
    [
        ({"run_at": "2031-01-01T00:00:00Z", "delay": 5}, ["body", "delay"]),
        ({"run_at": "2031-01-01T00:00:00"}, ["body", "run_at"]),
        ({"run_at": "1924992000"}, ["body", "run_at"]),
        ({"run_at": 1924992000}, ["body", "run_at"]),
        ({"run_at": "tomorrow"}, ["body", "run_at"]),
        ({"run_at": "9999-12-31T23:00:00-05:00"}, ["body", "run_at"]),
        ({"delay": -1}, ["body", "delay"]),
        ({"delay": "5m"}, ["body", "delay"]),
        ({"delay": 10 * 365 * 86400 + 1}, ["body", "delay"]),
    ],
    ids=[
        "both",
        "no-offset",
        "digits",
        "number",
        "words",
        "past-the-calendar",
        "negative-delay",
        "text-delay",
        "delay-over-ten-years",
    ],
)
def test_a_bad_start_is_refused_and_writes_nothing(
    alice: httpx.Client, pg: HttpDeployment, start: dict[str, Any], where: list[str]
) -> None:
    store = pg.deployment.queue.store
    before = snapshot(store)
    response = alice.post("/tasks", json={"name": "http.add", "input": {"a": 1, "b": 1}, **start})
    problem = assert_problem(response, 422, "invalid-request")
    assert [error["loc"] for error in problem["errors"]] == [where]
    assert problem["detail"].startswith(".".join(where) + ": ")
    assert snapshot(store) == before


def test_a_live_unique_key_returns_its_holder_and_an_ended_one_is_free(
    alice: httpx.Client, bob: httpx.Client, pg: HttpDeployment
) -> None:
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    body = {"name": "http.add", "input": {"a": 1, "b": 1}, "run_at": later}
    first = create(alice, **body, unique_key="refresh:acme")
    try:
        store = pg.deployment.queue.store
        before = {task.id: task.version for task in store.iterate(owner=ANY)}
        again = alice.post("/tasks", json=body | {"unique_key": "refresh:acme"})
        assert again.status_code == 200, again.text
        assert again.headers["unique-key-holder"] == "true"
        assert again.json() == first
        assert first["unique_key"] == "refresh:acme"
        assert {task.id: task.version for task in store.iterate(owner=ANY)} == before
        # Bob's key space is his own.
        theirs = create(bob, **body, unique_key="refresh:acme")
        assert theirs["id"] != first["id"]
        bob.post(f"/tasks/{theirs['id']}/cancel")
    finally:
        alice.post(f"/tasks/{first['id']}/cancel")

    fresh = create(alice, "http.add", input={"a": 2, "b": 2}, unique_key="refresh:acme")
    assert fresh["id"] != first["id"]
    assert wait_for_status(alice, fresh["id"], "completed")["result"] == 4
    assert_problem(alice.post("/tasks", json=body | {"unique_key": ""}), 422, "invalid-request")


def test_a_priority_is_kept_and_a_bad_one_refused(alice: httpx.Client, pg: HttpDeployment) -> None:
    urgent = create(alice, "http.add", input={"a": 1, "b": 1}, priority=9)
    assert urgent["priority"] == 9
    assert create(alice, "http.add", input={"a": 1, "b": 1})["priority"] == 0
    before = snapshot(pg.deployment.queue.store)
    for wrong in (10, -1, 2.5, "9", True):
        body = {"name": "http.add", "input": {"a": 1, "b": 1}, "priority": wrong}
        response = alice.post("/tasks", json=body)
        assert_problem(response, 422, "invalid-request")
    assert snapshot(pg.deployment.queue.store) == before


def test_a_retried_job_shows_each_retried_error_and_fails_with_the_last(
    alice: httpx.Client,
) -> None:
    created = create(alice, "http.flaky")
    assert created["errors"] == []

    failed = wait_for_status(alice, created["id"], "failed")

    assert failed["attempt"] == 2
    assert failed["errors"] == [
        {"type": "ConnectionError", "message": "upstream down (run 1)", "attempt": 1}
    ]
    assert failed["error"]["message"] == "upstream down (run 2)"


# -- idempotency ----------------------------------------------------------------


def test_concurrent_retries_with_one_key_make_one_task(api: Api, pg: HttpDeployment) -> None:
    key = uuid.uuid4().hex
    body = {"name": "http.add", "input": {"a": 20, "b": 22}}

    def attempt(_: int) -> httpx.Response:
        with api.client("token-alice", **{"Idempotency-Key": key}) as client:
            return client.post("/tasks", json=body)

    with ThreadPoolExecutor(max_workers=12) as pool:
        responses = list(pool.map(attempt, range(24)))
    assert {response.status_code for response in responses} <= {200, 201}
    assert [response.status_code for response in responses].count(201) == 1
    replays = [response for response in responses if response.status_code == 200]
    assert all(response.headers["idempotent-replayed"] == "true" for response in replays)
    ids = {response.json()["id"] for response in responses}
    assert len(ids) == 1
    (task_id,) = ids
    store = pg.deployment.queue.store
    mine = [task for task in store.iterate(owner="alice") if task.input == body["input"]]
    assert [task.id for task in mine] == [task_id]
    with api.client("token-alice") as client:
        assert wait_for_status(client, task_id, "completed")["result"] == 42
        assert client.get(f"/tasks/{task_id}").json()["attempt"] == 1  # ran once

    # The same key from another principal is another task; reused for other input, refused.
    with api.client("token-bob", **{"Idempotency-Key": key}) as client:
        response = client.post("/tasks", json=body)
        assert response.status_code == 201
        assert response.json()["id"] != task_id
        wait_for_status(client, response.json()["id"], "completed")
    before = snapshot(store)
    with api.client("token-alice", **{"Idempotency-Key": key}) as client:
        response = client.post("/tasks", json={"name": "http.add", "input": {"a": 1, "b": 1}})
        assert_problem(response, 422, "idempotency-key-reused")
        bad_key = client.post("/tasks", json=body, headers={"Idempotency-Key": "x" * 300})
        assert_problem(bad_key, 400, "invalid-idempotency-key")
    assert snapshot(store) == before


def test_a_retried_scheduled_create_must_ask_for_the_same_start(api: Api) -> None:
    start = datetime.now(UTC) + timedelta(hours=1)
    body = {"name": "http.add", "input": {"a": 1, "b": 2}}
    made: list[str] = []
    with api.client("token-alice", **{"Idempotency-Key": uuid.uuid4().hex}) as client:
        first = client.post("/tasks", json=body | {"run_at": start.isoformat()})
        assert first.status_code == 201, first.text
        made.append(first.json()["id"])
        # The same instant, written with another offset, is the same request.
        elsewhere = start.astimezone(timezone(timedelta(hours=9))).isoformat()
        again = client.post("/tasks", json=body | {"run_at": elsewhere})
        assert again.status_code == 200, again.text
        assert again.json() == first.json()
        for other in (body | {"run_at": (start + timedelta(seconds=1)).isoformat()}, body):
            assert_problem(client.post("/tasks", json=other), 422, "idempotency-key-reused")
    with api.client("token-alice", **{"Idempotency-Key": uuid.uuid4().hex}) as client:
        first = client.post("/tasks", json=body | {"delay": 3600})
        assert first.status_code == 201, first.text
        made.append(first.json()["id"])
        # A delay runs from the first attempt, which a retry cannot know: any delay
        # replays the scheduled task, and its start stays the first one.
        for delay in (3600, 60):
            again = client.post("/tasks", json=body | {"delay": delay})
            assert again.status_code == 200, again.text
            assert again.json()["run_at"] == first.json()["run_at"]
        assert_problem(client.post("/tasks", json=body), 422, "idempotency-key-reused")
    with api.client("token-alice", **{"Idempotency-Key": uuid.uuid4().hex}) as client:
        # Once the job has run, run_at may be a retry's backoff: the start is not compared.
        first = client.post("/tasks", json=body)
        assert first.status_code == 201, first.text
        wait_for_status(client, first.json()["id"], "completed")
        again = client.post("/tasks", json=body | {"delay": 0})
        assert again.status_code == 200, again.text
        assert again.json()["id"] == first.json()["id"]
    with api.client("token-alice") as client:
        versions = [client.get(f"/tasks/{task_id}").json()["version"] for task_id in made]
        assert versions == [1, 1]  # the replays and refusals wrote nothing
        for task_id in made:
            client.post(f"/tasks/{task_id}/cancel")


# -- owners -------------------------------------------------------------------


def test_owners_never_see_each_other(api: Api, alice: httpx.Client, bob: httpx.Client) -> None:
    task = create(alice, "http.ask")
    waiting = wait_for_status(alice, task["id"], "input_required")
    url = f"/tasks/{task['id']}"
    with api.client() as anonymous:
        for client in (bob, anonymous):
            assert_problem(client.get(url), 404, "task-not-found")
            assert_problem(client.post(f"{url}/cancel"), 404, "task-not-found")
            assert_problem(client.post(f"{url}/resume", json={"answer": 1}), 404)
            assert_problem(client.delete(url), 404, "task-not-found")
            assert_problem(client.get(f"{url}/events"), 404, "task-not-found")
        listed = bob.get("/tasks", params={"limit": 1000}).json()["tasks"]
        assert task["id"] not in [shown["id"] for shown in listed]
        assert alice.get(url).json()["version"] == waiting["version"]

        # Anonymous tasks belong to anonymous callers only.
        unowned = create(anonymous, "http.add", input={"a": 1, "b": 1})
        assert unowned["owner"] is None
        assert anonymous.get(f"/tasks/{unowned['id']}").status_code == 200
        assert_problem(alice.get(f"/tasks/{unowned['id']}"), 404)
        # ... and are protected by their ids: no anonymous caller lists or watches them.
        assert_problem(anonymous.get("/tasks"), 401, "unauthorized")
        assert_problem(anonymous.get("/events"), 401, "unauthorized")
    alice.post(f"{url}/cancel")


def test_trusted_header_names_the_principal(api: Api, alice: httpx.Client) -> None:
    with api.client(**{TRUSTED_HEADER: "alice"}) as proxied:
        task = create(proxied, "http.add", input={"a": 1, "b": 2})
        assert task["owner"] == "alice"
        assert alice.get(f"/tasks/{task['id']}").status_code == 200
    # A bearer token wins over the header.
    with api.client("token-bob", **{TRUSTED_HEADER: "alice"}) as both:
        assert_problem(both.get(f"/tasks/{task['id']}"), 404)


def test_wrong_principals_are_refused(api: Api, pg: HttpDeployment) -> None:
    before = snapshot(pg.deployment.queue.store)
    body = {"name": "http.add", "input": {"a": 1, "b": 1}}
    for headers in (
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": "Basic YWxpY2U6eA=="},
        {"Authorization": "Bearer"},
    ):
        with api.client(**headers) as client:
            for response in (
                client.post("/tasks", json=body),
                client.get("/tasks"),
                client.get("/tasks/AAAAAAAAAAAAAAAAAAAAAA"),
                client.get("/events"),
            ):
                assert_problem(response, 401, "unauthorized")
                assert response.headers["www-authenticate"].startswith("Bearer")
    assert snapshot(pg.deployment.queue.store) == before


# -- event streams ----------------------------------------------------------------


def test_task_stream_follows_the_worker_until_the_end(alice: httpx.Client) -> None:
    task = create(alice, "http.steps", input={"count": 4, "pause": 0.2})
    seen: list[dict[str, Any]] = []
    with alice.stream("GET", f"/tasks/{task['id']}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        seen = list(events(response))  # the stream ends after the terminal status
    assert seen[0]["id"] == task["id"]
    assert seen[-1]["status"] == "completed"
    assert seen[-1]["result"] == {"steps": 4}
    versions = [event["version"] for event in seen]
    assert versions == sorted(set(versions))
    progress = [event["progress"] for event in seen if event["status"] == "working"]
    assert any(0 < value < 1 for value in progress if value is not None)


def test_stream_of_all_tasks_is_scoped_to_the_caller(api: Api, alice: httpx.Client) -> None:
    with (
        api.client("token-alice") as watcher,
        api.client("token-bob") as other,
        watcher.stream("GET", "/events") as mine,
        other.stream("GET", "/events") as theirs,
    ):
        assert mine.status_code == theirs.status_code == 200
        bobs = create(other, "http.add", input={"a": 0, "b": 0})
        task = create(alice, "http.add", input={"a": 4, "b": 4})
        for event in events(mine):
            assert event["owner"] == "alice"
            if event["id"] == task["id"] and event["status"] == "completed":
                break
        for event in events(theirs):
            assert event["owner"] == "bob"
            if event["id"] == bobs["id"] and event["status"] == "completed":
                break


def test_reconnecting_with_last_event_id_replays_what_was_missed(alice: httpx.Client) -> None:
    first = create(alice, "http.add", input={"a": 1, "b": 1})
    last_id = None
    with alice.stream("GET", "/events") as stream:
        create(alice, "http.add", input={"a": 2, "b": 2})  # something to see on this stream
        for kind, event_id, data in raw_events(stream):
            assert kind == "task"
            last_id = event_id
            if json.loads(data)["status"] == "completed":
                break
    assert last_id is not None
    wait_for_status(alice, first["id"], "completed")
    missed = create(alice, "http.add", input={"a": 3, "b": 3})  # while disconnected
    wait_for_status(alice, missed["id"], "completed")

    with alice.stream("GET", "/events", headers={"Last-Event-ID": last_id}) as stream:
        for event in events(stream):
            if event["id"] == missed["id"] and event["status"] == "completed":
                break

    bad = alice.get("/events", headers={"Last-Event-ID": "yesterday"})
    assert_problem(bad, 400, "invalid-last-event-id")


# -- bad input --------------------------------------------------------------------


UNPARSABLE_BODIES = [
    b'{"name": "http.add", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"name": "http.add\xff"}',  # not UTF-8
    '{"name": "http.add"}'.encode("utf-16"),
    b'{"name": "http.add", "input": {"a": NaN}, "answer": Infinity, "reason": -Infinity}',
    b'{"name": "http.add", "input": {"a": ' + b"9" * 5000 + b"}}",
]


def test_bad_input_on_every_endpoint_writes_nothing(
    alice: httpx.Client, pg: HttpDeployment
) -> None:
    parked = create(alice, "http.ask")
    wait_for_status(alice, parked["id"], "input_required")
    store = pg.deployment.queue.store
    before = snapshot(store)
    url = f"/tasks/{parked['id']}"
    json_headers = {"Content-Type": "application/json"}
    unknown = "AAAAAAAAAAAAAAAAAAAAAA"
    cases: list[tuple[httpx.Response, int, str | None]] = [
        # malformed JSON
        (alice.post("/tasks", content=b'{"name": ', headers=json_headers), 400, "malformed-json"),
        (alice.post(f"{url}/cancel", content=b"{", headers=json_headers), 400, "malformed-json"),
        (alice.post(f"{url}/resume", content=b"[1,", headers=json_headers), 400, "malformed-json"),
        # not JSON, or more than the parser can hold: the same documented problem
        *(
            (alice.post(path, content=body, headers=json_headers), 400, "malformed-json")
            for path in ("/tasks", f"{url}/cancel", f"{url}/resume")
            for body in UNPARSABLE_BODIES
        ),
        (alice.post("/tasks", content=b'{"name": "x"}'), 415, "unsupported-media-type"),
        (
            alice.post("/tasks", content=b'{"name": "x"}', headers={"Content-Type": "text/plain"}),
            415,
            "unsupported-media-type",
        ),
        (alice.post(f"{url}/resume", data={"answer": "x"}), 415, "unsupported-media-type"),
        # wrong types and shapes
        (alice.post("/tasks", json={"name": 7}), 422, "invalid-request"),
        (alice.post("/tasks", json={"name": "http.add", "input": [1, 2]}), 422, None),
        (alice.post("/tasks", json={"name": "http.add", "ttl": "soon"}), 422, None),
        (alice.post("/tasks", json={"name": "http.add", "ttl": -1}), 422, None),
        (alice.post("/tasks", json={"name": ""}), 422, None),
        (alice.post("/tasks", json={"name": "x", "colour": "red"}), 422, None),
        (alice.post("/tasks", json={"name": "x\u0000y"}), 422, "invalid-request"),
        (alice.post("/tasks", json=["http.add"]), 422, None),
        (alice.post(f"{url}/cancel", json={"reason": 5}), 422, None),
        (alice.post(f"{url}/resume", json={}), 422, None),
        (alice.post(f"{url}/resume", json={"answer": 1, "extra": 2}), 422, None),
        (alice.get("/tasks", params={"limit": 0}), 422, None),
        (alice.get("/tasks", params={"limit": "many"}), 422, None),
        (alice.get("/tasks", params={"status": "sleeping"}), 422, None),
        (alice.get("/tasks", params={"updated_after": "yesterday"}), 422, None),
        (alice.get("/tasks", params={"updated_after": "2026-01-01T00:00:00"}), 422, None),
        # bad cursors
        (alice.get("/tasks", params={"cursor": "garbage"}), 400, "invalid-cursor"),
        (alice.get("/tasks", params={"cursor": "eyJrIjoxfQ"}), 400, "invalid-cursor"),
        # unknown and malformed ids
        (alice.get(f"/tasks/{unknown}"), 404, "task-not-found"),
        (alice.post(f"/tasks/{unknown}/cancel"), 404, "task-not-found"),
        (alice.post(f"/tasks/{unknown}/resume", json={"answer": 1}), 404, "task-not-found"),
        (alice.delete(f"/tasks/{unknown}"), 404, "task-not-found"),
        (alice.get(f"/tasks/{unknown}/events"), 404, "task-not-found"),
        (alice.get("/tasks/not%20an%20id"), 422, "invalid-task-data"),
        (alice.post("/tasks/not%20an%20id/cancel"), 422, "invalid-task-data"),
        (alice.get("/tasks/not%20an%20id/events"), 422, "invalid-task-data"),
        # unknown routes and methods
        (alice.get("/nowhere"), 404, None),
        (alice.put(url, json={}), 405, None),
    ]
    for response, status, kind in cases:
        problem = assert_problem(response, status, kind)
        assert problem["detail"], problem
    assert snapshot(store) == before


def test_oversize_bodies_get_413_and_write_nothing(api: Api, pg: HttpDeployment) -> None:
    store = pg.deployment.queue.store
    before = snapshot(store)
    limit = 3 * (1 << 20)
    big = {"name": "http.add", "input": {"blob": "x" * (limit + 10)}}
    with api.client("token-alice") as client:
        assert_problem(client.post("/tasks", json=big), 413, "body-too-large")

        def chunks() -> Any:
            # No Content-Length: the server counts as it reads.
            yield b'{"name": "http.add", "input": {"blob": "'
            for _ in range(limit // 65536 + 2):
                yield b"x" * 65536
            yield b'"}}'

        chunked = client.post(
            "/tasks", content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert_problem(chunked, 413, "body-too-large")
        # Under the HTTP cap but over the store's payload limit: 422 from the store.
        payload = {"name": "http.add", "input": {"blob": "x" * (1 << 20)}}
        assert_problem(client.post("/tasks", json=payload), 422, "invalid-task-data")
    assert snapshot(store) == before


# -- outages and configuration ----------------------------------------------------------


def test_store_outage_is_503_with_retry_after(pg: HttpDeployment) -> None:
    from tests.integration.harness import free_port

    down = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing"
    api = pg.start_api(QUEUESTORE_DATABASE_URL=down, QUEUESTORE_HTTP_RETRY_AFTER="7")
    try:
        with api.client("token-alice") as client:
            assert client.get("/livez").status_code == 200
            for response in (
                client.get("/readyz"),
                client.get("/tasks"),
                client.post("/tasks", json={"name": "http.add", "input": {"a": 1, "b": 1}}),
                client.get("/tasks/AAAAAAAAAAAAAAAAAAAAAA"),
                client.post("/tasks/AAAAAAAAAAAAAAAAAAAAAA/cancel"),
                client.get("/tasks/AAAAAAAAAAAAAAAAAAAAAA/events"),
            ):
                problem = assert_problem(response, 503)
                assert response.headers["retry-after"] == "7"
                assert "127.0.0.1" not in problem["detail"]
    finally:
        pg.stop(api)


def test_store_requiring_owners_refuses_anonymous_callers(pg: HttpDeployment) -> None:
    api = pg.start_api(QUEUESTORE_REQUIRE_OWNER="true")
    try:
        with api.client() as anonymous, api.client("token-alice") as alice:
            assert_problem(anonymous.get("/tasks"), 401, "unauthorized")
            assert_problem(anonymous.post("/tasks", json={"name": "http.add"}), 401)
            assert alice.get("/tasks").status_code == 200
    finally:
        pg.stop(api)


def test_openapi_document_and_dashboard(api: Api) -> None:
    with api.client() as client:
        document = client.get("/openapi.json").json()
        paths = document["paths"]
        assert set(paths) >= {
            "/tasks",
            "/tasks/{task_id}",
            "/tasks/{task_id}/cancel",
            "/tasks/{task_id}/resume",
            "/tasks/{task_id}/events",
            "/events",
            "/livez",
            "/readyz",
        }
        assert "Problem" in document["components"]["schemas"]
        schemas = document["components"]["schemas"]
        create_fields = schemas["CreateTask"]["properties"]
        assert create_fields["run_at"]["anyOf"][0]["format"] == "date-time"
        assert create_fields["delay"]["anyOf"][0]["minimum"] == 0
        assert schemas["CreateTask"]["not"]["required"] == ["run_at", "delay"]
        assert "run_at" in schemas["TaskView"]["required"]
        page = client.get("/dashboard")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "Content-Security-Policy" in page.headers
        assert client.get("/", follow_redirects=False).headers["location"] == "/dashboard"


def test_shutdown_ends_open_streams(pg: HttpDeployment) -> None:
    api = pg.start_api()
    with api.client("token-alice") as client, client.stream("GET", "/events") as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        assert next(lines) == "retry: 2000"
        started = time.monotonic()
        api.process.process.send_signal(signal.SIGTERM)
        assert list(lines) == [""]  # the stream ends; the server does not wait for it
        api.process.process.wait(timeout=15)
        assert time.monotonic() - started < 5
    pg.stop(api)


def test_dropped_database_connections_are_503_then_recover(
    make_deployment: Callable[[], HttpDeployment], shared: ModuleType
) -> None:
    """Every server-side connection of the API is killed: no request answers 500, the pool
    reconnects, and the event stream (its LISTEN connection killed too) still delivers."""
    deployment = make_deployment()
    api = deployment.start_api()
    database = make_url(deployment.deployment.database_url).database
    try:
        with api.client("token-alice") as client:
            task = create(client, "http.steps")  # no worker: it stays submitted
            with client.stream("GET", f"/tasks/{task['id']}/events") as stream:
                received = events(stream)
                assert next(received)["status"] == "submitted"
                assert shared.terminate_connections(database) >= 1

                # Reads are retried on a fresh connection; a write that cannot be is a 503.
                cancel = client.post(f"/tasks/{task['id']}/cancel")
                if cancel.status_code != 200:
                    assert_problem(cancel, 503, "store-unavailable")
                    assert cancel.headers["retry-after"] == "5"
                    cancel = client.post(f"/tasks/{task['id']}/cancel")
                assert cancel.status_code == 200, cancel.text
                # The change feed listens again: the cancel arrives on the open stream.
                assert next(received)["status"] == "cancelled"
    finally:
        deployment.stop(api)
