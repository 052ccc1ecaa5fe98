"""The OpenAPI document says what the server accepts, no more and no less.

A request the document's schemas allow is served; one they refuse is refused.
Where the server has the workers' app (``serve --app``) the document names its
jobs and the input each takes; a cursor is never empty; a time is RFC 3339
only. In-process (Starlette's TestClient) on the in-memory store; the fuzzing
of every operation is test_http_schemathesis.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from queuestore import InMemoryTaskStore, Settings, TaskContext, TaskQueue, job
from queuestore.http import create_app

ALICE = {"Authorization": "Bearer ta"}


@pytest.fixture
def queue() -> Iterator[TaskQueue]:
    app = Celery("http-openapi", broker="memory://", set_as_current=False)
    made = TaskQueue(InMemoryTaskStore(), app)
    yield made
    app.close()


@pytest.fixture
def jobs(queue: TaskQueue) -> None:
    """Jobs of every kind of signature, on the served app."""

    @job(queue.app, name="reports.build")
    def build(ctx: TaskContext, month: str, *, draft: bool = False) -> None:
        return None

    @job(queue.app, name="mail.send")
    def send(ctx: TaskContext, to: str, **fields: object) -> None:
        return None

    @job(queue.app, name="ping")
    def ping(ctx: TaskContext) -> None:
        return None


def serve(queue: TaskQueue) -> TestClient:
    settings = Settings(http_tokens={"ta": "alice"}, cursor_secret="openapi")
    return TestClient(create_app(settings, queue=queue))


def validator(document: dict[str, Any], component: str) -> Draft202012Validator:
    """Validates against one component of ``document`` (its references resolved in it)."""
    return Draft202012Validator({**document, "$ref": f"#/components/schemas/{component}"})


def parameter(document: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [p for p in document["paths"]["/tasks"]["get"]["parameters"] if p["name"] == name]
    return dict(found["schema"])


BODIES = [
    ({"name": "reports.build", "input": {"month": "2026-11"}}, True),
    ({"name": "reports.build", "input": {"month": "11", "draft": True}}, True),
    ({"name": "reports.build", "input": {"month": 11}}, False),  # month is a str
    ({"name": "reports.build"}, False),  # month is required
    ({"name": "reports.build", "input": {"draft": True}}, False),
    ({"name": "reports.build", "input": {"month": "2026-11", "colour": "red"}}, False),
    ({"name": "mail.send", "input": {"to": "a@example.com", "subject": "hi"}}, True),
    ({"name": "mail.send", "input": {}}, False),
    ({"name": "ping"}, True),
    ({"name": "ping", "input": {"extra": 1}}, False),
    ({"name": "reports.biuld", "input": {"month": "2026-11"}}, False),  # no such job
]


@pytest.mark.usefixtures("jobs")
@pytest.mark.parametrize(("body", "valid"), BODIES)
def test_with_the_apps_jobs_the_document_accepts_what_the_server_does(
    queue: TaskQueue, body: dict[str, Any], valid: bool
) -> None:
    with serve(queue) as http:
        document = http.get("/openapi.json").json()
        single = http.post("/tasks", json=body, headers=ALICE)
        batch = http.post("/tasks:batch", json={"tasks": [body]}, headers=ALICE)

    assert validator(document, "CreateTask").is_valid(body) is valid
    assert validator(document, "CreateTaskItem").is_valid(body) is valid
    assert (single.status_code, batch.status_code) == ((201, 201) if valid else (422, 422))


@pytest.mark.usefixtures("jobs")
def test_the_document_names_the_apps_jobs(queue: TaskQueue) -> None:
    with serve(queue) as http:
        schemas = http.get("/openapi.json").json()["components"]["schemas"]
    for component in ("CreateTask", "CreateTaskItem"):
        assert schemas[component]["properties"]["name"]["enum"] == [
            "mail.send",
            "ping",
            "reports.build",
        ]


def test_without_the_apps_jobs_any_name_and_input_are_stated(queue: TaskQueue) -> None:
    body = {"name": "defined.in.the.workers", "input": {"anything": [1, 2]}}
    with serve(queue) as http:
        document = http.get("/openapi.json").json()
        assert http.post("/tasks", json=body, headers=ALICE).status_code == 201
    assert "enum" not in document["components"]["schemas"]["CreateTask"]["properties"]["name"]
    assert validator(document, "CreateTask").is_valid(body)


def test_a_cursor_is_never_empty(queue: TaskQueue) -> None:
    with serve(queue) as http:
        document = http.get("/openapi.json").json()
        empty = http.get("/tasks", params={"cursor": ""}, headers=ALICE)
    assert not Draft202012Validator(parameter(document, "cursor")).is_valid("")
    assert empty.status_code == 400
    assert empty.json()["type"].endswith("invalid-cursor")


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("2026-12-07T09:30:00Z", True),
        ("2026-12-07T10:30:00.5+01:00", True),
        ("0.5", False),  # pydantic would read seconds since 1970
        ("1765099800", False),
        ("2026-12-07", False),
        ("2026-12-07T09:30:00", False),  # no offset
        ("0001-01-01T00:30:00+01:00", False),  # before year 1 in UTC
    ],
)
def test_updated_after_is_an_rfc3339_time_in_both(
    queue: TaskQueue, value: str, valid: bool
) -> None:
    with serve(queue) as http:
        document = http.get("/openapi.json").json()
        answer = http.get("/tasks", params={"updated_after": value}, headers=ALICE)
    # What the document says: an RFC 3339 date-time, off the calendar's end days.
    (stated,) = [s for s in parameter(document, "updated_after")["anyOf"] if s.get("format")]
    assert stated["format"] == "date-time"
    assert not Draft202012Validator(stated).is_valid("0001-01-01T00:30:00+01:00")
    assert answer.status_code == (200 if valid else 422), answer.text
