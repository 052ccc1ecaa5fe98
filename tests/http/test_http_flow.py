"""Flow control over HTTP in process (the in-memory store): admins pause and resume a job,
an owner or a key, and read the pauses and the rate limits; nobody else may."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from fastapi.testclient import TestClient

from queuestore import FlowControl, InMemoryTaskStore, RateLimit, Settings, TaskQueue
from queuestore.http import create_app
from tests.celery_support import Published

TOKENS = {"t-ops": "ops", "t-alice": "alice"}
RATES = FlowControl(
    rates={"llm.call": RateLimit(10, per=timedelta(minutes=1), key="input.provider")}
)


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[TaskQueue]:
    app = Celery("http-flow", broker="memory://", set_as_current=False)
    Published.on(app, monkeypatch)
    yield TaskQueue(InMemoryTaskStore(), app, flow=RATES)
    app.close()


@pytest.fixture
def http(queue: TaskQueue) -> Iterator[TestClient]:
    settings = Settings(http_tokens=TOKENS, http_admins=["ops"])
    with TestClient(create_app(settings, queue=queue)) as client:
        yield client


OPS = {"Authorization": "Bearer t-ops"}
ALICE = {"Authorization": "Bearer t-alice"}


def test_an_admin_pauses_shows_and_resumes(http: TestClient, queue: TaskQueue) -> None:
    until = datetime.now(UTC) + timedelta(minutes=5)
    job = http.put("/operator/pauses/job/llm.call", json={"reason": "deploy"}, headers=OPS)
    key = http.put("/operator/pauses/key/openai", json={"until": until.isoformat()}, headers=OPS)
    owner = http.put("/operator/pauses/owner/bob", json={"seconds": 60}, headers=OPS)

    assert job.status_code == 200, job.text
    assert (job.json()["kind"], job.json()["until"], job.json()["reason"]) == (
        "job",
        None,
        "deploy",
    )
    assert datetime.fromisoformat(key.json()["until"]) == until
    assert owner.json()["until"] is not None
    shown = http.get("/operator/flow", headers=OPS).json()
    assert [(p["kind"], p["value"]) for p in shown["pauses"]] == [
        ("job", "llm.call"),
        ("key", "openai"),
        ("owner", "bob"),
    ]
    assert shown["rate_limits"] == {
        "llm.call": {"limit": 10, "per_seconds": 60.0, "key": "input.provider", "cost": 1}
    }
    assert shown["rate_use"] == []
    assert {(p.kind.value, p.value) for p in queue.store.pauses()} == {
        ("job", "llm.call"),
        ("key", "openai"),
        ("owner", "bob"),
    }

    resumed = http.delete("/operator/pauses/job/llm.call", headers=OPS)
    again = http.delete("/operator/pauses/job/llm.call", headers=OPS)
    assert (resumed.json(), again.json()) == ({"resumed": True}, {"resumed": False})


def test_an_admin_reads_how_much_of_each_key_s_rate_is_used(
    http: TestClient, queue: TaskQueue
) -> None:
    for provider in ("openai", "openai", "mistral"):
        task = queue.store.create("llm.call", {"provider": provider})
        assert queue.store.claim(task.id, "w-1", timedelta(seconds=30), flow=RATES) is not None

    shown = http.get("/operator/flow", headers=OPS).json()

    assert [{k: use[k] for k in ("job", "key", "used", "limit")} for use in shown["rate_use"]] == [
        {"job": "llm.call", "key": "mistral", "used": 1, "limit": 10},
        {"job": "llm.call", "key": "openai", "used": 2, "limit": 10},
    ]
    assert {(use["per_seconds"], use["next_turn"]) for use in shown["rate_use"]} == {(60.0, None)}


def test_only_an_admin_may_and_bad_input_writes_nothing(http: TestClient, queue: TaskQueue) -> None:
    assert http.get("/operator/flow", headers=ALICE).status_code == 403
    assert http.put("/operator/pauses/job/x", json={}, headers=ALICE).status_code == 403
    assert http.delete("/operator/pauses/job/x", headers=ALICE).status_code == 403
    assert http.put("/operator/pauses/job/x", json={}).status_code == 401
    bad_kind = http.put("/operator/pauses/tenant/x", json={}, headers=OPS)
    both = http.put(
        "/operator/pauses/job/x",
        json={"seconds": 5, "until": "2030-01-01T00:00:00Z"},
        headers=OPS,
    )
    naive = http.put("/operator/pauses/job/x", json={"until": "2030-01-01T00:00:00"}, headers=OPS)

    assert [bad_kind.status_code, both.status_code, naive.status_code] == [422, 422, 422]
    assert queue.store.pauses() == []


def test_an_admin_drains_a_worker_through_celery_s_control(
    http: TestClient, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[str, str, list[str]]] = []

    def answered(verb: str) -> Any:
        def control(queue_name: str, *, destination: list[str], **_: Any) -> list[Any]:
            sent.append((verb, queue_name, destination))
            return [{destination[0]: {"ok": "done"}}] if destination[0] != "gone@x" else []

        return control

    monkeypatch.setattr(queue.app.control, "cancel_consumer", answered("cancel"))
    monkeypatch.setattr(queue.app.control, "add_consumer", answered("add"))

    drained = http.post("/operator/workers/celery@host-1/drain", json={}, headers=OPS)
    undone = http.post("/operator/workers/celery@host-1/drain", json={"undo": True}, headers=OPS)
    gone = http.post("/operator/workers/gone@x/drain", json={}, headers=OPS)
    refused = http.post("/operator/workers/celery@host-1/drain", json={}, headers=ALICE)

    assert drained.json() == {"node": "celery@host-1", "queue": "celery", "consuming": False}
    assert undone.json()["consuming"] is True
    assert (gone.status_code, gone.json()["type"]) == (
        404,
        "urn:queuestore:problem:worker-not-found",
    )
    assert refused.status_code == 403
    assert sent == [
        ("cancel", "celery", ["celery@host-1"]),
        ("add", "celery", ["celery@host-1"]),
        ("cancel", "celery", ["gone@x"]),
    ]
