"""The schedules over HTTP in process (the in-memory store): verbs, owners, refusals.

A principal creates and acts on its own schedules only; an admin
(``http_admins``) sees and acts on every owner's and may schedule for another
owner; an anonymous caller is refused. Bad input is a 422 and writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from fastapi.testclient import TestClient

from queuestore import InMemoryTaskStore, Settings, TaskContext, TaskQueue
from queuestore.http import create_app
from tests.celery_support import Published, register

TOKENS = {"t-ops": "ops", "t-alice": "alice", "t-bob": "bob"}


def build(ctx: TaskContext, month: str) -> dict[str, str]:
    return {"month": month}


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[TaskQueue]:
    app = Celery("http-schedules", broker="memory://", set_as_current=False)
    Published.on(app, monkeypatch)
    register(app, build, "reports.build")
    yield TaskQueue(InMemoryTaskStore(), app)
    app.close()


@pytest.fixture
def http(queue: TaskQueue) -> Iterator[TestClient]:
    settings = Settings(http_tokens=TOKENS, http_admins=["ops"])
    with TestClient(create_app(settings, queue=queue)) as client:
        yield client


def as_(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer t-{who}"}


def ok(response: Any, code: int = 200) -> Any:
    assert response.status_code == code, response.text
    return response.json() if code != 204 else None


NIGHTLY = {"name": "reports.build", "input": {"month": "2026-11"}, "cron": "0 2 * * *"}


def test_a_schedule_is_created_read_changed_paused_resumed_triggered_and_deleted(
    http: TestClient, queue: TaskQueue
) -> None:
    made = http.post(
        "/schedules",
        json=NIGHTLY | {"timezone": "Europe/Paris", "catch_up": "each", "catch_up_limit": 3},
        headers=as_("alice"),
    )
    created = ok(made, 201)
    assert made.headers["Location"].endswith(f"/schedules/{created['id']}")
    assert (created["owner"], created["cron"], created["catch_up"]) == (
        "alice",
        "0 2 * * *",
        "each",
    )
    assert created["next_run_at"] is not None
    path = f"/schedules/{created['id']}"

    assert ok(http.get(path, headers=as_("alice"))) == created
    changed = ok(http.patch(path, json={"every": 90}, headers=as_("alice")))
    assert (changed["cron"], changed["every"]) == (None, 90.0)
    paused = ok(http.post(f"{path}/pause", headers=as_("alice")))
    assert (paused["paused"], paused["next_run_at"]) == (True, None)
    task = ok(http.post(f"{path}/trigger", headers=as_("alice")), 201)
    assert (task["name"], task["owner"], task["input"]) == (
        "reports.build",
        "alice",
        {"month": "2026-11"},
    )
    shown = ok(http.get(path, headers=as_("alice")))
    assert (shown["last_task_id"], shown["last_status"]) == (task["id"], "submitted")
    assert ok(http.post(f"{path}/resume", headers=as_("alice")))["paused"] is False
    ok(http.delete(path, headers=as_("alice")), 204)
    assert http.get(path, headers=as_("alice")).status_code == 404
    assert queue.store.get(task["id"]).owner == "alice"


def test_owners_see_their_own_and_an_admin_every_owners(http: TestClient) -> None:
    alices = ok(http.post("/schedules", json=NIGHTLY, headers=as_("alice")), 201)
    bobs = ok(http.post("/schedules", json=NIGHTLY | {"id": "bobs"}, headers=as_("bob")), 201)
    for_bob = ok(http.post("/schedules", json=NIGHTLY | {"owner": "bob"}, headers=as_("ops")), 201)

    def listed(who: str, **params: str) -> list[str]:
        found = ok(http.get("/schedules", params=params, headers=as_(who)))["schedules"]
        return [schedule["id"] for schedule in found]

    assert listed("alice") == [alices["id"]]
    assert listed("bob") == [bobs["id"], for_bob["id"]]
    assert listed("ops") == [alices["id"], bobs["id"], for_bob["id"]]
    assert listed("ops", owner="alice") == [alices["id"]]
    assert http.get("/schedules", params={"owner": "bob"}, headers=as_("alice")).status_code == 403
    for method, suffix in [("get", ""), ("post", "/pause"), ("post", "/trigger")]:
        answer = http.request(method, f"/schedules/bobs{suffix}", headers=as_("alice"))
        assert answer.status_code == 404
        assert answer.json()["type"] == "urn:queuestore:problem:schedule-not-found"
    assert ok(http.post("/schedules/bobs/pause", headers=as_("ops")))["paused"] is True
    refused = http.post("/schedules", json=NIGHTLY | {"owner": "bob"}, headers=as_("alice"))
    assert refused.status_code == 403
    assert http.get("/schedules").status_code == 401
    assert http.post("/schedules", json=NIGHTLY).status_code == 401
    taken = http.post("/schedules", json=NIGHTLY | {"id": "bobs"}, headers=as_("bob"))
    assert taken.status_code == 409


@pytest.mark.parametrize(
    "body",
    [
        NIGHTLY | {"name": "reports.nope"},
        NIGHTLY | {"input": {"month": 11}},
        NIGHTLY | {"cron": "61 * * * *"},
        NIGHTLY | {"every": 60},
        {"name": "reports.build", "input": {"month": "2026-11"}},
        NIGHTLY | {"timezone": "Mars/Olympus"},
        NIGHTLY | {"catch_up": "sometimes"},
        NIGHTLY | {"every": 0.1, "cron": None},
        NIGHTLY | {"colour": "red"},
    ],
)
def test_bad_input_is_a_422_and_writes_nothing(
    http: TestClient, queue: TaskQueue, body: dict[str, Any]
) -> None:
    answer = http.post("/schedules", json=body, headers=as_("alice"))

    assert answer.status_code == 422, answer.text
    assert queue.list_schedules() == []


def test_a_change_to_bad_input_is_a_422_and_changes_nothing(http: TestClient) -> None:
    made = ok(http.post("/schedules", json=NIGHTLY, headers=as_("alice")), 201)
    path = f"/schedules/{made['id']}"

    for change in [{"input": {"month": 11}}, {"cron": "bad"}, {"every": 0}]:
        assert http.patch(path, json=change, headers=as_("alice")).status_code == 422

    assert ok(http.get(path, headers=as_("alice"))) == made


def test_a_tick_shows_as_the_last_run(http: TestClient, queue: TaskQueue) -> None:
    made = ok(
        http.post("/schedules", json=NIGHTLY | {"cron": None, "every": 1}, headers=as_("bob")), 201
    )
    schedule = queue.get_schedule(made["id"])
    assert schedule.next_run_at is not None

    (task,) = queue.store.run_schedules(now=schedule.next_run_at + timedelta(milliseconds=5))

    shown = ok(http.get(f"/schedules/{made['id']}", headers=as_("bob")))
    assert (shown["last_task_id"], shown["last_status"]) == (task.id, "submitted")
    assert shown["last_run_at"] is not None
