"""Helpers of the HTTP tests: reading event streams, and the store's state as a fingerprint."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from queuestore import ANY, TaskStatus, TaskStore

RUNNING = {TaskStatus.SUBMITTED, TaskStatus.WORKING}


def events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The ``task`` events of an open ``text/event-stream`` response, as task dicts."""
    kind, data = None, []
    for line in response.iter_lines():
        if line.startswith("event:"):
            kind = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())
        elif line == "":
            if kind == "task" and data:
                yield json.loads("\n".join(data))
            kind, data = None, []


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
