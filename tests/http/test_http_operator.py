"""The operator's endpoints in process (the in-memory store): who sees what, and what they say.

An admin (``http_admins``) sees and acts on two owners' tasks; a plain
principal sees and acts on its own only, on every endpoint, and is refused the
operator's views (403). The overview's numbers are the store's; the workers
are the store's rows; a task's timeline tells its runs, errors, answers,
end and deliveries; resubmit makes a new task linked to the old.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from fastapi.testclient import TestClient

from queuestore import InMemoryTaskStore, Settings, TaskError, TaskQueue
from queuestore.http import create_app
from queuestore.store.deliveries import Settlement
from queuestore.submit.queue import RESUBMITTED_FROM
from tests.celery_support import Published

TOKENS = {"t-ops": "ops", "t-alice": "alice", "t-bob": "bob"}
LEASE = timedelta(seconds=30)
URL = "https://93.184.216.34/hook"


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[TaskQueue]:
    app = Celery("http-operator", broker="memory://", set_as_current=False)
    Published.on(app, monkeypatch)
    yield TaskQueue(InMemoryTaskStore(), app)
    app.close()


@pytest.fixture
def http(queue: TaskQueue) -> Iterator[TestClient]:
    settings = Settings(http_tokens=TOKENS, http_admins=["ops"])
    with TestClient(create_app(settings, queue=queue)) as client:
        yield client


def as_(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer t-{who}"}


def ids(response: Any) -> set[str]:
    assert response.status_code == 200, response.text
    return {task["id"] for task in response.json()["tasks"]}


def test_an_admin_sees_and_acts_on_every_owner_a_principal_on_its_own_only(
    http: TestClient, queue: TaskQueue, caplog: pytest.LogCaptureFixture
) -> None:
    alices = http.post("/tasks", json={"name": "x.job"}, headers=as_("alice")).json()
    bobs = [http.post("/tasks", json={"name": "x.job"}, headers=as_("bob")).json() for _ in "ab"]
    queue.store.add_callback(bobs[0]["id"], URL)
    queue.store.update(bobs[1]["id"], status="working")
    queue.store.update(bobs[1]["id"], status="failed", error={"type": "E", "message": "m"})

    assert ids(http.get("/tasks", headers=as_("ops"))) == {alices["id"], *(b["id"] for b in bobs)}
    assert ids(http.get("/tasks", params={"owner": "bob"}, headers=as_("ops"))) == {
        b["id"] for b in bobs
    }
    assert ids(http.get("/tasks", headers=as_("alice"))) == {alices["id"]}
    assert ids(http.get("/tasks", params={"owner": "alice"}, headers=as_("alice"))) == {
        alices["id"]
    }
    refused = http.get("/tasks", params={"owner": "bob"}, headers=as_("alice"))
    assert (refused.status_code, refused.json()["type"]) == (
        403,
        "urn:queuestore:problem:forbidden",
    )
    assert http.get("/tasks", params={"total": "true"}, headers=as_("ops")).json()["total"] == 3

    bob = bobs[0]["id"]
    reads = [f"/tasks/{bob}", f"/tasks/{bob}/timeline", f"/tasks/{bob}/deliveries"]
    for path in reads:
        assert http.get(path, headers=as_("alice")).status_code == 404, path
        assert http.get(path, headers=as_("ops")).status_code == 200, path
    for path in ("/operator/overview", "/operator/workers"):
        assert http.get(path, headers=as_("alice")).status_code == 403, path
        assert http.get(path).status_code == 401, path
        assert http.get(path, headers=as_("ops")).status_code == 200, path

    failed = bobs[1]["id"]
    assert http.post(f"/tasks/{bob}/cancel", json={}, headers=as_("alice")).status_code == 404
    assert http.post(f"/tasks/{failed}/resubmit", headers=as_("alice")).status_code == 404
    assert http.delete(f"/tasks/{failed}", headers=as_("alice")).status_code == 404
    with caplog.at_level(logging.INFO, "queuestore.http.admin"):
        cancelled = http.post(f"/tasks/{bob}/cancel", json={}, headers=as_("ops"))
        again = http.post(f"/tasks/{failed}/resubmit", headers=as_("ops"))
        deleted = http.delete(f"/tasks/{failed}", headers=as_("ops"))
    assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled")
    assert (again.status_code, again.json()["owner"]) == (201, "bob")
    assert deleted.status_code == 204
    said = [r.getMessage() for r in caplog.records if r.name == "queuestore.http.admin"]
    assert said == [
        f"admin ops: cancelled task_id={bob} owner=bob",
        f"admin ops: resubmitted task_id={failed} new_task_id={again.json()['id']} owner=bob",
        f"admin ops: deleted task_id={failed} owner=bob",
    ]


def test_the_overview_gives_the_stores_numbers(http: TestClient, queue: TaskQueue) -> None:
    store = queue.store
    for owner, count in (("alice", 3), ("bob", 2)):
        for _ in range(count):
            queue.submit("reports.build", owner=owner)
    done = queue.submit("mail.send", owner="alice")
    assert store.claim(done.id, "h:1:a", LEASE) is not None
    store.report(done.id, "h:1:a", status="completed", result=1)
    failing = queue.submit("mail.send", owner="bob")
    assert store.claim(failing.id, "h:1:b", LEASE) is not None
    store.retry(failing.id, "h:1:b", error=TaskError(type="E"), run_at=datetime.now(UTC))
    assert store.claim(failing.id, "h:1:c", LEASE) is not None
    store.report(failing.id, "h:1:c", status="failed", error={"type": "E", "message": "m"})

    overview = http.get("/operator/overview", headers=as_("ops")).json()
    day = http.get("/operator/overview", params={"window": "day"}, headers=as_("ops")).json()

    assert overview["counts"] == {str(k): v for k, v in store.status_counts().items()}
    backlog = overview["backlog"]
    assert backlog["total"] == 5
    assert backlog["by_owner"] == [{"key": "alice", "count": 3}, {"key": "bob", "count": 2}]
    assert backlog["by_job"] == [{"key": "reports.build", "count": 5}]
    assert backlog["oldest"]["name"] == "reports.build"
    series = overview["series"]
    assert (series["step_seconds"], len(series["starts"])) == (60, 60)
    assert sum(series["counts"]["submitted"]) == 7
    assert sum(series["counts"]["completed"]) == sum(series["counts"]["failed"]) == 1
    assert sum(series["counts"]["retried"]) == 1
    assert series["backlog"][-1] == 5
    assert (day["series"]["step_seconds"], len(day["series"]["starts"])) == (900, 96)
    assert day["latency"]["step_seconds"] == 3600
    latency = overview["latency"]
    assert latency["run_p50"][-1] is not None
    assert latency["wait_p95"][-1] is not None
    jobs = {job["name"]: job for job in overview["jobs"]}
    assert (jobs["mail.send"]["completed"], jobs["mail.send"]["failed"]) == (1, 1)
    assert (jobs["mail.send"]["retried"], jobs["reports.build"]["waiting"]) == (1, 5)
    assert jobs["mail.send"]["run_p95"] is not None
    assert (
        http.get("/operator/overview", params={"window": "week"}, headers=as_("ops")).status_code
        == 422
    )


def test_workers_live_and_stopped_with_the_tasks_they_run(
    http: TestClient, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = queue.store
    held = queue.submit("reports.build", owner="bob")
    store.beat_worker(
        "h1:7:aa",
        host="h1",
        pid=7,
        node="celery@h1",
        pool="prefork",
        concurrency=2,
        running=[held.id, "gone-task"],
    )
    clock = [datetime.now(UTC) + timedelta(minutes=5)]
    monkeypatch.setattr(store, "_now", lambda: clock[0])
    store.beat_worker("h2:8:bb", host="h2", pid=8, pool="solo")

    workers = http.get("/operator/workers", headers=as_("ops")).json()

    assert workers["stale_after_seconds"] == 30
    (live,) = workers["live"]
    (stopped,) = workers["stopped"]
    assert (live["host"], live["pool"], live["tasks"]) == ("h2", "solo", [])
    assert (stopped["host"], stopped["node"], stopped["concurrency"]) == ("h1", "celery@h1", 2)
    assert stopped["running"] == [held.id, "gone-task"]
    assert [task["id"] for task in stopped["tasks"]] == [held.id]
    assert stopped["silent_seconds"] >= 299


def test_a_timeline_tells_runs_errors_answers_the_end_and_deliveries(
    http: TestClient, queue: TaskQueue
) -> None:
    store = queue.store
    task = queue.submit("reports.build", owner="alice")
    store.add_callback(task.id, URL, owner="alice")
    assert store.claim(task.id, "h:1:a", LEASE) is not None
    store.retry(
        task.id, "h:1:a", error=TaskError(type="Timeout", message="slow"), run_at=datetime.now(UTC)
    )
    assert store.claim(task.id, "h:1:b", LEASE) is not None
    store.report(task.id, "h:1:b", status="input_required", status_message="Go?")
    store.provide_input(task.id, "yes")
    assert store.claim(task.id, "h:1:c", LEASE) is not None
    store.report(task.id, "h:1:c", status="failed", error={"type": "E", "message": "broke"})
    (taken,) = store.take_deliveries(lease=LEASE)
    store.settle_delivery(taken.delivery, Settlement.dead("HTTP 410", 410))

    entries = http.get(f"/tasks/{task.id}/timeline", headers=as_("alice")).json()["entries"]

    kinds = [entry["kind"] for entry in entries]
    assert kinds[:3] == ["submitted", "started", "retried"]
    assert {"answered", "ended", "delivery"} <= set(kinds)
    retried = entries[kinds.index("retried")]
    assert (retried["attempt"], retried["detail"]) == (1, "slow")
    assert entries[kinds.index("answered")]["detail"] == "yes"
    ended = entries[kinds.index("ended")]
    assert (ended["status"], ended["attempt"], ended["detail"]["message"]) == ("failed", 3, "broke")
    delivery = entries[kinds.index("delivery")]
    assert "dead" in delivery["title"]
    assert delivery["detail"] == "HTTP 410"
    timed = [entry["at"] for entry in entries if entry["at"] is not None]
    assert timed == sorted(timed)


def test_resubmit_answers_201_with_the_new_task_and_409_for_a_completed_one(
    http: TestClient, queue: TaskQueue
) -> None:
    task = http.post("/tasks", json={"name": "x.job", "input": {"n": 1}}, headers=as_("alice"))
    task_id = task.json()["id"]
    http.post(f"/tasks/{task_id}/cancel", json={}, headers=as_("alice"))

    again = http.post(f"/tasks/{task_id}/resubmit", headers=as_("alice"))

    assert again.status_code == 201
    assert again.json()["metadata"] == {RESUBMITTED_FROM: task_id}
    assert again.headers["location"].endswith(f"/tasks/{again.json()['id']}")
    queue.store.update(again.json()["id"], status="working")
    queue.store.update(again.json()["id"], status="completed")
    refused = http.post(f"/tasks/{again.json()['id']}/resubmit", headers=as_("alice"))
    assert refused.status_code == 409


def test_the_list_keeps_the_tasks_created_in_a_span(http: TestClient) -> None:
    made = [http.post("/tasks", json={"name": "x.job"}, headers=as_("alice")).json() for _ in "abc"]
    span = {"created_after": made[0]["created_at"], "created_before": made[2]["created_at"]}

    assert ids(http.get("/tasks", params=span, headers=as_("alice"))) == {made[1]["id"]}


def test_an_admins_event_stream_carries_every_owners_changes(
    http: TestClient, queue: TaskQueue
) -> None:
    with http.stream("GET", "/events", headers=as_("ops")) as stream:
        bobs = queue.submit("x.job", owner="bob")
        for line in stream.iter_lines():
            if line.startswith("data:"):
                event = json.loads(line.removeprefix("data:"))
                break
    assert event["id"] == bobs.id
