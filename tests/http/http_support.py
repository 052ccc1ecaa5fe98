"""Helpers of the HTTP tests: creating a task, checking a problem, reading event streams,
waiting for a status, and the store's state as a fingerprint."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from queuestore import ANY, TaskStatus, TaskStore

RUNNING = {TaskStatus.SUBMITTED, TaskStatus.WORKING}
PROBLEM = "application/problem+json"


def create(client: httpx.Client, name: str, **body: Any) -> dict[str, Any]:
    response = client.post("/tasks", json={"name": name, **body})
    assert response.status_code == 201, response.text
    return response.json()


def assert_problem(response: httpx.Response, status: int, kind: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["status"] == status
    assert problem["title"]
    if kind is not None:
        assert problem["type"] == f"urn:queuestore:problem:{kind}"
    assert "Traceback" not in response.text
    return problem


def raw_events(
    response: httpx.Response, within: float = 30.0
) -> Iterator[tuple[str | None, str | None, str]]:
    """The events of an open ``text/event-stream`` response: ``(event, id, data)``.

    Fails once ``within`` seconds have passed (checked at each line; an idle
    stream sends a keep-alive line every 15 seconds), so a test never hangs.
    """
    deadline = time.monotonic() + within
    kind, event_id, data = None, None, []
    for line in response.iter_lines():
        assert time.monotonic() < deadline, f"no expected event within {within}s"
        if line.startswith("event:"):
            kind = line.removeprefix("event:").strip()
        elif line.startswith("id:"):
            event_id = line.removeprefix("id:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())
        elif line == "":
            if data:
                yield kind, event_id, "\n".join(data)
            kind, event_id, data = None, None, []


def events(response: httpx.Response, within: float = 30.0) -> Iterator[dict[str, Any]]:
    """The ``task`` events of an open ``text/event-stream`` response, as task dicts."""
    for kind, _, data in raw_events(response, within):
        if kind == "task":
            yield json.loads(data)


def snapshot(store: TaskStore, timeout: float = 30.0) -> dict[str, int]:
    """Every task's id and version once no job is running: equal before and after a
    request means the request wrote nothing."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = list(store.iterate(owner=ANY, limit=1000))
        if all(task.status not in RUNNING for task in tasks):
            return {task.id: task.version for task in tasks}
        assert time.monotonic() < deadline, "jobs kept running"
        time.sleep(0.05)


def wait_for_status(
    client: httpx.Client, task_id: str, *statuses: str, timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        task = client.get(f"/tasks/{task_id}").json()
        if task["status"] in statuses:
            return task
        assert time.monotonic() < deadline, f"task stayed {task['status']}: {task}"
        time.sleep(0.05)
